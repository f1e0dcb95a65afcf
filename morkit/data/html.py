"""One-file HTML reports (pool, selection, pipeline): inline CSS, PNG data URIs, escaped text, atomic writes.

Plots use matplotlib's Agg canvas, never pyplot (no global backend), and never read user text as mathtext.
"""

from __future__ import annotations

import base64
import io
import os
from html import escape
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from morkit.data.jsonl import atomic_path

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}
h1{font-size:24px;margin-bottom:4px}h2{font-size:19px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 16px;background:#f6f7f9;padding:12px 16px;border-radius:6px}
.facts dt{font-weight:600;color:#555}.facts dd{margin:0}
table{border-collapse:collapse;margin:8px 0;font-variant-numeric:tabular-nums}
th,td{padding:3px 10px;border-bottom:1px solid #e4e4e4;text-align:right}
th{background:#f0f2f5;position:sticky;top:0}td.name,th.name{text-align:left}
tr:nth-child(even) td{background:#fafafa}td.best{background:#c8f0c8!important;font-weight:700}
td.ref{color:#666;font-style:italic}img{max-width:100%;height:auto;display:block;margin:8px 0}
.note{color:#666;font-size:13px}.row{display:flex;gap:32px;flex-wrap:wrap;align-items:flex-start}
"""


def png(fig: Any) -> str:
    """The figure as a PNG data URI."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def img(fig: Any, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="{png(fig)}">'


def fmt(value: float, digits: int = 3) -> str:
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
          ref_rows: Sequence[int] = (), formats: Mapping[int, str] | None = None) -> str:
    """An HTML table; numbers are formatted (3 decimals, or the column's format spec in `formats`, e.g. "+.1f"),
    text is shown as it is, and the max number of each column in `best_cols` is highlighted."""
    formats = formats or {}
    best = {}
    for c in best_cols:
        values = [r[c] for i, r in enumerate(rows)
                  if i not in ref_rows and not isinstance(r[c], str) and np.isfinite(r[c])]
        best[c] = max(values) if values else None
    head = "".join(f'<th class="{"name" if isinstance(rows[0][i], str) else ""}">{escape(h)}</th>'
                   for i, h in enumerate(header)) if rows else ""
    body = []
    for i, row in enumerate(rows):
        cells = []
        for c, v in enumerate(row):
            if isinstance(v, str):
                cells.append(f'<td class="name{" ref" if i in ref_rows else ""}">{escape(v)}</td>')
            else:
                if isinstance(v, (int, np.integer)):
                    text = str(v)
                else:
                    text = format(v, formats[c]) if c in formats and np.isfinite(v) else fmt(v)
                cls = "best" if best.get(c) is not None and v == best[c] else ""
                cells.append(f'<td class="{cls}">{text}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def write_page(path: str | os.PathLike, title: str, body: Sequence[str]) -> Path:
    """Write one self-contained HTML page atomically; returns its path. `body` parts are already HTML."""
    target = Path(path)
    with atomic_path(target) as tmp:
        page = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
                f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")
        tmp.write_text(page, encoding="utf-8")
    return target
