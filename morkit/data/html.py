"""One-file HTML reports: Jinja2 templates (morkit/resources/templates, one base holding the CSS) filled with tables
and PNG data-URI figures computed here; user text escaped, pages written atomically. The environment is built on
first use; plots use matplotlib's Agg canvas, never pyplot, and never read user text as mathtext."""

from __future__ import annotations

import base64
import io
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from morkit.data.jsonl import atomic_path

if TYPE_CHECKING:
    from markupsafe import Markup


@dataclass(frozen=True)
class Cell:
    """One table cell: its text (escaped when rendered) and CSS class ("name", "name ref", "best" or none)."""

    text: str
    cls: str = ""


@dataclass(frozen=True)
class Table:
    """A table as the templates' `table` macro lays it out."""

    header: tuple[Cell, ...]
    rows: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True)
class Image:
    """A figure as a PNG data URI, with its alt text."""

    alt: str
    src: str


def png(fig: Any) -> str:
    """The figure as a PNG data URI."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def image(fig: Any, alt: str) -> Image:
    """The figure, drawn to PNG now, for a template's `image` macro."""
    return Image(alt, png(fig))


def fmt(value: float, digits: int = 3) -> str:
    """A number with `digits` decimals; "–" where it is not finite (also the templates' `fmt` filter)."""
    return "–" if not np.isfinite(value) else f"{value:.{digits}f}"


def plot_style() -> Any:
    """The context every report plot is drawn in: literal text (an RM named "$x$" is not mathtext), 10pt."""
    from matplotlib import rc_context

    return rc_context({"text.parse_math": False, "font.size": 10})


def hbars(ax: Any, labels: Sequence[str], values: Sequence[float], colors: Sequence[str],
          reference: float | None = None, title: str = "") -> None:
    """Horizontal bars, first on top, each value printed at its end; the value axis is zoomed to the finite
    values (differences of a point matter); `reference` (e.g. the best single RM) is drawn as a dashed line."""
    values = np.asarray(values, dtype=np.float64)
    y = np.arange(len(values))
    ax.barh(y, np.nan_to_num(values, nan=0.0), color=colors)
    ax.set_yticks(y, labels, fontsize=9)
    ax.invert_yaxis()
    finite = values[np.isfinite(values)]
    low, high = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
    span = max(high - low, 0.02)
    ax.set_xlim(max(0.0, low - 0.6 * span), min(1.0, high + 0.25 * span) + 0.02 * span)
    if reference is not None and np.isfinite(reference):
        ax.axvline(reference, color="#555", linestyle="--", linewidth=1)
    for yi, v in zip(y, values):
        if np.isfinite(v):
            ax.text(v, yi, f" {fmt(v)}", va="center", fontsize=8)
    if title:
        ax.set_title(title, fontsize=11)
    ax.grid(axis="x", alpha=0.3)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], best_cols: Sequence[int] = (),
          ref_rows: Sequence[int] = (), formats: Mapping[int, str] | None = None) -> Table:
    """A table's cells: numbers formatted (3 decimals, or the column's format spec in `formats`, e.g. "+.1f"),
    text as it is, and the max number of each column in `best_cols` marked "best" (`ref_rows` are left out)."""
    formats = formats or {}
    best = {}
    for c in best_cols:
        values = [r[c] for i, r in enumerate(rows)
                  if i not in ref_rows and not isinstance(r[c], str) and np.isfinite(r[c])]
        best[c] = max(values) if values else None

    def cell(i: int, c: int, v: Any) -> Cell:
        if isinstance(v, str):
            return Cell(v, "name ref" if i in ref_rows else "name")
        if isinstance(v, (int, np.integer)):
            text = str(v)
        else:
            text = format(v, formats[c]) if c in formats and np.isfinite(v) else fmt(v)
        return Cell(text, "best" if best.get(c) is not None and v == best[c] else "")

    head = tuple(Cell(h, "name" if isinstance(rows[0][i], str) else "") for i, h in enumerate(header)) if rows else ()
    return Table(head, tuple(tuple(cell(i, c, v) for c, v in enumerate(row)) for i, row in enumerate(rows)))


@cache
def _environment() -> Any:
    """The templates' Jinja2 environment: autoescaped, strict about undefined names, with the `fmt` filter."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("morkit", "resources/templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt
    return env


def render(template: str, **context: Any) -> str:
    """The named template (in morkit/resources/templates) rendered with `context`, as HTML."""
    return _environment().get_template(template).render(**context)


def fragment(template: str, **context: Any) -> Markup:
    """The named template rendered as a `markupsafe.Markup` fragment: HTML another template inserts as it is (a
    plain string there is escaped, so only what a template rendered is ever inserted unescaped).

    Args:
        template: The template's file name in morkit/resources/templates.
        **context: Its variables.

    Returns:
        The rendered HTML, as Markup.
    """
    from markupsafe import Markup

    return Markup(render(template, **context))


def write_page(path: str | os.PathLike, template: str, **context: Any) -> Path:
    """Render one self-contained page from `template` and write it atomically; returns its path."""
    target = Path(path)
    page = render(template, **context)
    with atomic_path(target) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return target
