"""meta-bench's tables as plain text or markdown, and its block in a markdown page."""

from __future__ import annotations

Table = tuple[list[str], list[list[str]]]
"""Headers and rows of cells."""


def text_table(table: Table) -> str:
    """A table as aligned plain text: the first column left, the others right."""
    headers, rows = table
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    for row in rows:
        cells = zip(row, widths, strict=True)
        lines.append(
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(cells))
        )
    return "\n".join(lines)


def md_table(table: Table) -> str:
    """A table in markdown."""
    headers, rows = table
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


BEGIN, END = "<!-- meta-bench:begin -->", "<!-- meta-bench:end -->"


def splice(text: str, block: str) -> str:
    """`text` with what stands between the meta-bench markers replaced by `block`."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"it needs one {BEGIN} line followed by one {END} line")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{block.strip()}\n{END}{tail}"
