"""mkdocs hook: the site shows the figures committed under experiments/, without a copy in docs/."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel

FIGURES = "experiments"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add each experiment's PNG at its path relative to the docs, served at experiments/..."""
    docs = Path(config.docs_dir)
    for figure in sorted((docs.parent / FIGURES).glob("*/*.png")):
        dest = figure.relative_to(docs.parent).as_posix()
        # The pages link to it as `../experiments/...`, the path that also resolves on GitHub;
        # included explicitly, since mkdocs excludes any path with a part starting with a dot.
        files.append(
            File(
                f"../{dest}",
                src_dir=str(docs),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
                dest_uri=dest,
                inclusion=InclusionLevel.INCLUDED,
            )
        )
    return files
