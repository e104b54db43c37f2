"""The configuration reference page, generated from the config dataclasses' field docstrings.

`python -m meta.config_docs` rewrites docs/reference/configuration.md; `tests/docs/` fails when
the page in the repository is not what this generates, so it cannot drift from the schema.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

from meta.config import Config

PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "configuration.md"
COMMAND = "python -m meta.config_docs"
INTRO = f"""# Configuration reference

Every key of `meta-train` and `meta-eval`, with its type, its default in the schema and what it
does, generated from the dataclasses by `{COMMAND}`: do not edit by hand. Set a key on the
command line as `key=value` (Hydra's override grammar). The config groups (`meta=joint`,
`ppo=selfplay`, `experiment=tiny`, ...) set some keys to other values:
`meta-train [overrides] --cfg job` prints the configuration they compose.
"""


@cache
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass (the string literal after its annotation)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, following in zip(body, [*body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            is_doc = isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
            text = following.value.value if is_doc else ""  # type: ignore[union-attr]
            docs[node.target.id] = " ".join(str(text).split()).replace("|", "\\|")
    return docs


@cache
def field_types(cls: type) -> dict[str, str]:
    """Each field's annotation as written in the source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    return {
        node.target.id: ast.unparse(node.annotation)
        for node in body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _nested(field: dataclasses.Field[Any], owner: type) -> type | None:
    """The dataclass a field holds, if it is one (a section such as `meta` or `ppo.self_play`)."""
    hints = inspect.get_annotations(owner, eval_str=True)
    hint = hints[field.name]
    for candidate in (hint, *getattr(hint, "__args__", ())):
        if dataclasses.is_dataclass(candidate):
            return candidate  # type: ignore[return-value]
    return None


def _value(value: Any) -> str:
    if isinstance(value, list):
        value = [
            dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else v
            for v in value
        ]
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`' if value == "" else f"`{value}`"
    return f"`{value!r}`".replace("|", "\\|")


def sections(cls: type = Config, prefix: str = "") -> list[tuple[str, type, list[list[str]]]]:
    """(section key, dataclass, rows of key, type, default, meaning), depth first."""
    rows: list[list[str]] = []
    nested: list[tuple[str, type, list[list[str]]]] = []
    docs, types = field_docs(cls), field_types(cls)
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = f"{prefix}{field.name}"
        inner = _nested(field, cls)
        if inner is not None and field.name != "tasks":
            nested.extend(sections(inner, f"{key}."))
            default = _default(field)
            if default is not None:
                continue
        kind = types[field.name].replace("|", "\\|")
        rows.append([f"`{key}`", f"`{kind}`", _value(_default(field)), docs.get(field.name, "")])
    return [(prefix.rstrip("."), cls, rows), *nested]


def render() -> str:
    """The whole page."""
    parts = [INTRO]
    for key, cls, rows in sections():
        if not rows:
            continue
        title = f"`{key}`" if key else "Top level"
        summary = " ".join((inspect.getdoc(cls) or "").split())
        parts.append(f"\n## {title}\n\n{summary} (`{cls.__module__}.{cls.__qualname__}`)\n\n")
        parts.append("| key | type | default | meaning |\n|---|---|---|---|\n")
        parts.extend("| " + " | ".join(row) + " |\n" for row in rows)
    return "".join(parts)


def main(argv: list[str] | None = None) -> None:
    """Write the page (or the path given)."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else PAGE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
