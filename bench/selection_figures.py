"""The figures of bench/selection.py, drawn from the numbers its --json holds (so a figure can be redrawn
from a saved run): held-out accuracy per method, and the learned default's confidence reliability."""

from __future__ import annotations

from plotting import BEST_SINGLE, LEARNED, OTHER, PRES, SINGLE, figure

PAPER_PRES = "PRES (paper"  # the CTTS-MM paper's rule, with combinations, on both normalisers: set in bold


def _color(label: str, result: dict) -> str:
    roles = result["roles"]
    if label == roles["default"]:
        return LEARNED
    if label in (roles["best_single"], roles.get("per_domain")):
        return BEST_SINGLE
    if label.startswith("PRES"):
        return PRES
    return OTHER if label in result["selection"] else SINGLE


def plot_accuracy(results: list[dict], path) -> None:
    """Per data set, every selection method's held-out accuracy with its sd over folds x deals, best on top; the
    three best single RMs for reference; the best single chosen on train as a dashed line; the default, that
    best single and the paper's PRES in bold."""
    shown = [[label for label in r["selection"] + r["singles"][:3] if r["methods"].get(label)] for r in results]
    heights = [len(labels) + 3 for labels in shown]
    with figure(path, len(results), 1, height=0.24 * sum(heights) + 0.4,
                gridspec_kw={"height_ratios": heights}) as (fig, axes):
        for ax, result, labels in zip(axes[:, 0], results, shown):
            stats, roles = result["methods"], result["roles"]
            labels = sorted(labels, key=lambda label: stats[label]["mean"])
            for y, label in enumerate(labels):
                st = stats[label]
                ax.errorbar(st["mean"], y, xerr=st["sd_folds"], fmt="o", color=_color(label, result))
                ax.annotate(f"{st['mean']:.1f}", (st["mean"] + st["sd_folds"], y), xytext=(4, 0),
                            textcoords="offset points", va="center", fontsize=8)
            ax.axvline(stats[roles["best_single"]]["mean"], color=BEST_SINGLE, linestyle="--", linewidth=1)
            ax.set_yticks(range(len(labels)), [label + ("  (single RM)" if label in result["rms"] else "")
                                               for label in labels])
            for text, label in zip(ax.get_yticklabels(), labels):
                text.set_color(_color(label, result))
                marked = label in (roles["default"], roles["best_single"]) or label.startswith(PAPER_PRES)
                text.set_fontweight("bold" if marked else "normal")
            ax.grid(axis="y", visible=False)
            ax.margins(x=0.08)
            deals = len(result["seeds"])
            ax.set_xlabel(f"best-of-n accuracy on held-out questions (%)\nbars: sd of the per-fold means over "
                          f"{result['folds']} folds x {deals} fold deal{'s' * (deals != 1)}")
            ax.set_title(f"{result['name']}: {result['questions']} questions ({result['mixed']} mixed)\n"
                         f"not drawn: random pick {stats[roles['random']]['mean']:.1f}%, per-query oracle "
                         f"{stats[roles['oracle']]['mean']:.1f}%", loc="left")


def plot_reliability(results: list[dict], path) -> None:
    """Per data set: the default's confidence on held-out questions against their accuracy, per confidence bin,
    with the diagonal, its fits' own out-of-fold diagram on their pools, and the picks per bin below."""
    with figure(path, 2, len(results), width=min(8.0, 0.8 + 4.4 * len(results)), height=5.8, sharex="col",
                gridspec_kw={"height_ratios": [3, 1]}) as (fig, axes):
        for col, result in enumerate(results):
            top, bottom = axes[0, col], axes[1, col]
            top.plot([0, 1], [0, 1], color=SINGLE, linestyle=":", linewidth=1, label="perfect calibration")
            held, pool = result["reliability"]["held_out"], result["reliability"]["pool_out_of_fold"]
            if pool:
                top.plot([b["confidence"] for b in pool["bins"]], [b["accuracy"] for b in pool["bins"]], "s--",
                         color=SINGLE, markerfacecolor="none",
                         label=f"fits' own out-of-fold picks\n(pool questions), ECE {pool['ece']:.3f}")
            top.plot([b["confidence"] for b in held["bins"]], [b["accuracy"] for b in held["bins"]], "o-",
                     color=LEARNED, label=f"held-out questions, ECE {held['ece']:.3f}")
            top.set(xlim=(0, 1), ylim=(0, 1.02), ylabel="observed accuracy\n(best-of-n hit)",
                    title=f"{result['name']}: {result['roles']['default']}")
            top.legend(loc="upper left", fontsize=8)
            centers = [(b["low"] + b["high"]) / 2 for b in held["bins"]]
            counts = [b["count"] for b in held["bins"]]
            widths = [0.9 * (b["high"] - b["low"]) for b in held["bins"]]  # a gap of a tenth of a bin between bars
            bottom.bar(centers, counts, width=widths, color=LEARNED, alpha=0.7)
            for x, c in zip(centers, counts):
                bottom.annotate(str(c), (x, c), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=8)
            bottom.set(xlabel="predicted confidence", ylabel="held-out\npicks")
            bottom.margins(y=0.35)
            bottom.grid(axis="x", visible=False)
