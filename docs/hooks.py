"""mkdocs hook: the site serves the outputs committed under experiments/, not copies in docs/."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel

FIGURES = "experiments"
SERVED = {".png", ".csv", ".json", ".yaml", ".txt"}
"""The kinds of output the Results page and the log link to: figures, tables, records, configs."""


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add each experiment's output at its path relative to the docs, served at experiments/..."""
    docs = Path(config.docs_dir)
    for output in sorted((docs.parent / FIGURES).rglob("*")):
        if output.suffix not in SERVED or not output.is_file():
            continue
        dest = output.relative_to(docs.parent).as_posix()
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
