"""A bench script's table on a docs page: the Markdown a script renders from its --json numbers, kept between two
markers on the page (`<!-- table:NAME -->` and `<!-- /table:NAME -->`), so the page's table is its JSON's. A script
run with `--page PAGE` rewrites its block; tests/test_pages_serving.py renders each block from the committed JSON and
compares.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

WIDTH = 116  # the pages' prose lines


def markers(name: str) -> tuple[str, str]:
    return f"<!-- table:{name} -->", f"<!-- /table:{name} -->"


def block(page: Path, name: str) -> str:
    """The text between the page's markers of table `name` (without them or the blank lines around it)."""
    start, end = markers(name)
    text = Path(page).read_text(encoding="utf-8")
    if start not in text or end not in text:
        raise ValueError(f"{page}: no table {name!r} (markers {start} ... {end})")
    return text.split(start, 1)[1].split(end, 1)[0].strip("\n")


def write_block(page: Path, name: str, table: str) -> None:
    """Put `table` between the page's markers of table `name`, replacing what was there."""
    start, end = markers(name)
    text = Path(page).read_text(encoding="utf-8")
    block(page, name)  # the markers must be there: a page is never written where they are not
    before, rest = text.split(start, 1)
    after = rest.split(end, 1)[1]
    Path(page).write_text(f"{before}{start}\n{table.strip()}\n{end}{after}", encoding="utf-8")


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table: the header, the rule (numbers right-aligned), the rows."""
    rule = ["---:" if all(_numeric(r[i]) for r in rows) and rows else "---" for i in range(len(header))]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [header, rule, *rows])


def prose(text: str) -> str:
    """A sentence or two of the block, wrapped as the pages' prose is."""
    return textwrap.fill(text, WIDTH, break_long_words=False, break_on_hyphens=False)


def _numeric(cell: str) -> bool:
    return cell.replace(",", "").replace(".", "").replace("x", "").replace("%", "").strip().isdigit() or cell == ""
