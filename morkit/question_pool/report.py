"""A one-file HTML report on a question pool: how each RM and the best ensembles rank answers. Everything is inline
(PNG plots, CSS), so the file can be mailed or archived alone; this module computes the figures and tables, the
template pool_report.html.j2 lays them out and escapes user text."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from morkit.core.errors import InputError
from morkit.data.html import Image, hbars, image, plot_style, table, write_page
from morkit.data.html import fmt as _fmt
from morkit.question_pool.leakage import MIN_ALONE, RMEvidence, leak_warnings, rm_evidence
from morkit.question_pool.pool import QuestionPool
from morkit.question_pool.rows import nanmean_columns, sample_rows, skipped_domains

if TYPE_CHECKING:
    from markupsafe import Markup


def _single_prr(pool: QuestionPool) -> tuple[np.ndarray, np.ndarray]:
    """(rows, PRR of each single RM on them): every question of a dense pool; a seeded sample of an on-the-fly
    pool's, of the size its stored means were estimated on."""
    if pool.dense:
        return np.arange(len(pool)), np.asarray(pool.prr[:, : len(pool.rm_names)])
    rows = sample_rows(len(pool), pool.meta["statistics"]["sample"])
    return rows, pool.statistics(rows, singles_only=True)[0]


def _domain_prr(pool: QuestionPool) -> tuple[list[str], np.ndarray]:
    """Domains (largest first) and the (R, D) mean single-RM PRR per domain."""
    rows, single = _single_prr(pool)
    domains = np.array([pool.questions[r].domain for r in rows])
    names, counts = np.unique(domains, return_counts=True)
    order = [str(n) for _, n in sorted(zip(-counts, names))]
    return order, np.stack([nanmean_columns(single[domains == d]) for d in order], axis=1)


def _not_applicable(pool: QuestionPool, domains: Sequence[str]) -> np.ndarray:
    """(R, D) True where the RM applies to none of the domain's questions (pool meta `not_applicable`)."""
    skipped = skipped_domains(pool.rm_names, [q.domain for q in pool.questions], pool.meta.get("not_applicable", {}))
    return np.array([[d in skipped[name] for d in domains] for name in pool.rm_names],
                    dtype=bool).reshape(len(pool.rm_names), len(domains))


def _header(pool: QuestionPool, domains: Sequence[str]) -> list[tuple[str, str]]:
    """The facts at the top of the report, as (name, value) pairs."""
    meta = pool.meta
    index = dict(meta.get("index", {}))
    kind = index.pop("kind", "?")
    recall = ", ".join(f"{k} = {_fmt(float(v))}" for k, v in index.items())
    per_domain = {d: sum(q.domain == d for q in pool.questions) for d in domains}
    missing = {k: v for k, v in meta.get("missing_scores", {}).items() if v}
    return [
        ("Questions", f"{len(pool)} in {len(domains)} domain(s): "
                      + ", ".join(f"{d} ({n})" for d, n in per_domain.items())),
        ("Reward models", f"{len(pool.rm_names)}: " + ", ".join(pool.rm_names)),
        ("Ensembles", f"{len(pool.ensembles)} (up to {pool.config.max_members} members; "
                      f"weightings {', '.join(pool.config.weightings)}; {pool.normalizer.kind} normalisation)"),
        ("Embedder", f"{pool.meta.get('embedder', {}).get('name', '?')} "
                     f"(dim {pool.meta.get('embedder', {}).get('dim', '?')})"),
        ("Index", kind + (f" ({recall})" if recall else " (exact search)")),
        ("Revision", f"{meta.get('revision', '?')} (created {meta.get('created', '?')}, "
                     f"updated {meta.get('updated', '?')})"),
        ("morkit version", str(meta.get("morkit_version", "?"))),
        ("Skipped queries", ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in meta.get("skipped", {}).items())
         or "none"),
        ("Missing scores", ", ".join(f"{k}: {v} questions" for k, v in missing.items()) or "none"),
        ("Not applicable", "; ".join(f"{k}: " + ", ".join(f"{d} ({n})" for d, n in v.items())
                                     for k, v in meta.get("not_applicable", {}).items() if v) or "none"),
    ]


def _heatmap(names: Sequence[str], domains: Sequence[str], prr: np.ndarray, overall: np.ndarray,
             not_applicable: np.ndarray) -> Image:
    """RM x domain mean PRR (rows already sorted), annotated; grey where undefined, "n/a" where the RM does not
    apply to the domain; an "all" column if several."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    several = len(domains) > 1
    cols = list(domains) + (["all"] if several else [])
    data = np.ma.masked_invalid(np.column_stack([prr, overall]) if several else prr)
    fig = Figure(figsize=(2.6 + 1.1 * len(cols), 0.9 + 0.3 * len(names)))
    ax = fig.add_subplot()
    shown = ax.imshow(data, cmap=colormaps["RdYlGn"].with_extremes(bad="#d9d9d9"), vmin=0, vmax=1, aspect="auto")
    tilt = several and max(len(c) for c in cols) > 8
    ax.set_xticks(range(len(cols)), cols, rotation=30 if tilt else 0, ha="left" if tilt else "center",
                  rotation_mode="anchor")
    ax.set_yticks(range(len(names)), names)
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    for (i, j), v in np.ndenumerate(data.filled(np.nan)):
        skip = j < len(domains) and not_applicable[i, j]
        ax.text(j, i, "n/a" if skip else _fmt(v, 2), ha="center", va="center", fontsize=9,
                color="#666" if skip else "white" if np.isfinite(v) and (v < 0.2 or v > 0.85) else "black")
    if len(domains) > 1:
        ax.axvline(len(domains) - 0.5, color="white", linewidth=3)
    fig.colorbar(shown, ax=ax, fraction=0.08 if len(cols) < 3 else 0.04, pad=0.03, label="mean PRR")
    return image(fig, "PRR heatmap, reward model by domain")


def _agreement(evidence: dict[str, RMEvidence]) -> dict[str, Any]:
    """Per RM: best-of-n accuracy on the mixed questions it scores, agreement with the others, accuracy alone."""
    header = ["reward model", "mixed questions", "best-of-n", "agreement", "questions alone", "best-of-n alone"]
    rows = [[name, e.questions, e.accuracy, e.agreement, e.alone, e.accuracy_alone] for name, e in evidence.items()]
    sampled = next(iter(evidence.values())).sampled
    where = f" on a seeded sample of {sampled[0]:,} of the pool's {sampled[1]:,} questions" if sampled else ""
    return {"table": table(header, rows, best_cols=[2]), "where": where, "min_alone": MIN_ALONE}


def _ensemble_rows(stats: Sequence[dict[str, Any]]) -> list[list[Any]]:
    return [[" + ".join(s["ensemble"].members), s["ensemble"].weighting,
             ", ".join(f"{w:.2f}" for w in s["ensemble"].weights), s["mean_prr"], s["best_of_n"], s["questions"]]
            for s in stats]


def _ranked(stats: Sequence[dict[str, Any]], key: str, other: str) -> list[dict[str, Any]]:
    finite = [s for s in stats if np.isfinite(s[key])]
    return sorted(finite, key=lambda s: (-s[key], -np.nan_to_num(s[other], nan=-1.0), s["ensemble"].name))


def _bars(ax: Any, stats: Sequence[dict[str, Any]], best_single: dict[str, Any], key: str, title: str) -> None:
    """Horizontal bars of the top ensembles, the best single RM as a grey reference bar."""
    hbars(ax, [s["ensemble"].name for s in stats] + [f"best single: {best_single['ensemble'].name}"],
          [s[key] for s in list(stats) + [best_single]], ["#3b7dd8"] * len(stats) + ["#9a9a9a"],
          reference=best_single[key], title=title)


def _best_ensembles(stats: Sequence[dict[str, Any]], top: int) -> dict[str, Any] | None:
    """The top ensembles by mean PRR and by best-of-n, each as a table and as bars (one figure); None when the pool
    has no ensembles of two or more RMs."""
    from matplotlib.figure import Figure

    singles = [s for s in stats if s["ensemble"].weighting == "single"]
    multi = [s for s in stats if s["ensemble"].weighting != "single"]
    if not multi:
        return None
    header = ["members", "weighting", "weights", "mean PRR", "best-of-n", "questions w/ PRR"]
    tops = []
    fig = Figure(figsize=(10.5, 1.4 + 0.26 * (2 * min(top, len(multi)) + 2)), layout="constrained")
    axes = fig.subplots(2, 1)
    for ax, (key, other, label) in zip(axes, [("mean_prr", "best_of_n", "mean PRR"),
                                              ("best_of_n", "mean_prr", "best-of-n accuracy")]):
        ranked = _ranked(multi, key, other)[:top]
        best_single = (_ranked(singles, key, other) or singles)[0]
        rows = _ensemble_rows(ranked + [best_single])
        rows[-1][0] = f"best single: {rows[-1][0]}"
        tops.append({"count": len(ranked), "label": label, "table": table(
            header, rows, best_cols=[3 if key == "mean_prr" else 4], ref_rows=[len(rows) - 1])})
        _bars(ax, ranked, best_single, key, f"Top {len(ranked)} ensembles by {label}")
    return {"image": image(fig, "top ensembles against the best single RM"), "tops": tops}


def _distribution(pool: QuestionPool) -> Image:
    """Box plot of per-question PRR per RM, sorted by median (best on top)."""
    from matplotlib.figure import Figure

    values = [col[np.isfinite(col)] for col in _single_prr(pool)[1].T.astype(np.float64)]
    medians = [np.median(v) if v.size else -np.inf for v in values]
    means = [v.mean() if v.size else -np.inf for v in values]
    order = sorted(range(len(values)), key=lambda r: (medians[r], means[r]))
    fig = Figure(figsize=(10, 0.9 + 0.32 * len(order)))
    ax = fig.add_subplot()
    ax.boxplot([values[r] if values[r].size else [np.nan] for r in order], orientation="horizontal", widths=0.6,
               showmeans=True, patch_artist=True, boxprops={"facecolor": "#cfe0f7"},
               medianprops={"color": "#c0392b", "linewidth": 2},
               meanprops={"marker": "D", "markerfacecolor": "black", "markeredgecolor": "black", "markersize": 4},
               flierprops={"markersize": 3, "alpha": 0.4})
    ax.set_yticks(range(1, len(order) + 1), [f"{pool.rm_names[r]} (n={values[r].size})" for r in order])
    ax.axvline(0.5, color="#888", linestyle=":", linewidth=1)
    ax.set_xlim(-0.03, 1.03)
    ax.set_xlabel("PRR per question (red line: median, diamond: mean, dotted: chance)")
    ax.grid(axis="x", alpha=0.3)
    return image(fig, "distribution of per-question PRR per reward model")


def write_report(pool: QuestionPool, path: str | os.PathLike, *, top: int = 15, sections: Sequence[Markup] = ()
                 ) -> Path:
    """Write the pool report to `path` (one HTML file, written atomically); returns the path.

    `sections` are HTML fragments from higher layers (e.g. morkit.selection.report's selection section), appended
    after the pool's own: this layer may not import them. Only Markup (`data.html.fragment`) goes in as HTML."""
    if top < 1:
        raise InputError("top must be at least 1")
    with plot_style():
        stats = pool.ensemble_table()
        n_rm = len(pool.rm_names)
        domains, per_domain = _domain_prr(pool)
        singles = stats[:n_rm]
        order = sorted(range(n_rm), key=lambda r: (-np.nan_to_num(singles[r]["mean_prr"], nan=-1.0),
                                                   pool.rm_names[r]))
        overall = np.array([singles[r]["mean_prr"] for r in order])
        header = ["reward model", "mean PRR", "best-of-n", "questions w/ PRR"]
        rows = [[pool.rm_names[r], singles[r]["mean_prr"], singles[r]["best_of_n"], singles[r]["questions"]]
                for r in order]
        not_applicable = _not_applicable(pool, domains)
        if len(domains) > 1:
            header += [f"PRR {d}" for d in domains]
            rows = [row + ["n/a" if skip else v for v, skip in zip(per_domain[r], not_applicable[r])]
                    for row, r in zip(rows, order)]
        evidence = rm_evidence(pool)
        context = {"header": _header(pool, domains), "warnings": leak_warnings(evidence),
                   "heatmap": _heatmap([pool.rm_names[r] for r in order], domains, per_domain[order], overall,
                                       not_applicable[order]),
                   "singles": table(header, rows, [1, 2] + list(range(4, len(header)))),
                   "agreement": _agreement(evidence) if n_rm > 1 else None,
                   "ensembles": _best_ensembles(stats, top), "distribution": _distribution(pool)}
    return write_page(path, "pool_report.html.j2", sections=sections, **context)
