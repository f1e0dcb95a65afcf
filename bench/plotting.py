"""Writing a bench figure: one house style for every bench script, SVG or PNG by the path's suffix.

SVG output is byte-stable (a fixed `svg.hashsalt`, no date), so a rerun with the same numbers gives the same file.
"""

from __future__ import annotations

import argparse
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

SUFFIXES = (".svg", ".png")
WIDTH = 8.0  # inches: 576 pt, drawn at 800 px in the docs' column, so 10 pt text reads at about 14 px
PALETTE = ("#1f5fbf", "#e39b3b", "#2a9d55", "#c0392b", "#7b5ea7", "#8c6d31", "#9a9a9a")
LEARNED, PRES, BEST_SINGLE, OTHER, SINGLE = "#1f5fbf", "#e39b3b", "#2a9d55", "#7b5ea7", "#9a9a9a"
STYLE = {
    "font.size": 10, "axes.titlesize": 10.5, "axes.labelsize": 10, "xtick.labelsize": 9, "ytick.labelsize": 9,
    "legend.fontsize": 9, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
    "axes.spines.right": False, "errorbar.capsize": 3, "lines.markersize": 5, "figure.dpi": 100,
    "savefig.dpi": 150, "svg.hashsalt": "morkit-bench", "svg.fonttype": "path",
}


def write_json(path: Path, value: Any) -> None:
    """The numbers behind a figure, beside it: indented JSON, its folder made when missing."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1) + "\n")


def figure_path(text: str) -> Path:
    """An argparse type for --plot: a path ending in .svg or .png, refused before a long run rather than after."""
    path = Path(text)
    if path.suffix.lower() not in SUFFIXES:
        raise argparse.ArgumentTypeError(f"a figure is written as .svg or .png, not {text!r}")
    return path


@contextmanager
def figure(path: Path | str, rows: int = 1, cols: int = 1, *, height: float = 4.0, width: float = WIDTH,
           **subplots: Any) -> Iterator[tuple[Any, Any]]:
    """(fig, axes as a 2-D array) in the house style, saved to `path` when the block ends without an error;
    `subplots`: more plt.subplots arguments (sharex, gridspec_kw...)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from cycler import cycler

    path = figure_path(str(path))
    with plt.rc_context({**STYLE, "axes.prop_cycle": cycler(color=PALETTE)}):
        fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False, layout="constrained",
                                 **subplots)
        try:
            yield fig, axes
            path.parent.mkdir(parents=True, exist_ok=True)
            metadata = {"Date": None} if path.suffix.lower() == ".svg" else {"Software": None}
            fig.savefig(path, metadata=metadata)
        finally:
            plt.close(fig)
