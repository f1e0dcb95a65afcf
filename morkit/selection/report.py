"""The "Selection" section of the pool report: methods' best-of-n, the confidence's reliability, feature weights
and per-domain gains. It reads selection-layer fits, which the pool report may not import, so the CLI passes
the fragment to `write_report(sections=...)`; selection_section.html.j2 lays it out, escaping user text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from morkit.data.html import Table, fmt, fragment, hbars, image, plot_style, table
from morkit.question_pool.pool import QuestionPool

if TYPE_CHECKING:
    from markupsafe import Markup

TOP_FEATURES = 20
LEARNED, CHOSEN, OTHER, REFERENCE = "#a9c6ee", "#1f5fbf", "#e39b3b", "#9a9a9a"


def _num(value: Any) -> float:
    """A stored number as a float; missing or malformed values are NaN (the tables show "–")."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _chosen_label(learned: Mapping[str, Any]) -> str:
    """The label of the setting (or blend) the CV chose, as its cv_table row names it."""
    return str(learned.get("label", "?"))


def _mixed_questions(pool: QuestionPool) -> int:
    """Questions with both a right and a wrong answer in the sample the learned selector would learn from."""
    from morkit.question_pool.rows import sample_rows
    from morkit.selection.learned import LEARN_SAMPLE
    from morkit.question_pool.prr import mixed_questions

    rows = sample_rows(len(pool), LEARN_SAMPLE, 0)
    return int(mixed_questions(np.asarray(pool.correct[rows]), np.asarray(pool.valid[rows])).sum())


def _loo(pool: QuestionPool, method: str, k: int) -> tuple[float, int]:
    """(mean leave-one-out best-of-n, picks) of a registered selection method over the pool's LOO sample."""
    from morkit.selection.methods import SELECTION_METHODS
    from morkit.selection.calibration import leave_one_out_picks

    hits = leave_one_out_picks(pool, SELECTION_METHODS.get(method).load()(pool), k)[1]
    return (float(np.mean(hits)) if len(hits) else float("nan")), int(len(hits))


def _stacker_row(pool: QuestionPool) -> list[Any] | None:
    """[method, best-of-n, sd, measured by] of the "stacker" method's CV pick over every pool RM (the former
    stacker's settings, no baselines); None where no question has every RM's scores, or none is mixed."""
    from morkit.selection.learned import STACKER_SETTINGS, fit_learned

    try:
        fit = fit_learned(pool, settings=STACKER_SETTINGS, baselines=False, min_mixed=1)
    except LookupError:
        return None
    sd = dict((label, sd) for label, _, sd in fit.cv_table).get(fit.label, float("nan"))
    report = fit.report
    return [f"stacker: {fit.label}", fit.cv_best_of_n, sd, f"{report['folds']}-fold CV, {report['questions']} questions"]


def _accuracy_rows(pool: QuestionPool, k: int, learned: Mapping[str, Any] | None
                   ) -> tuple[list[list[Any]], list[str]]:
    """Table rows [method, best-of-n, sd over folds, measured by] and one bar colour per row; the best single
    RM is the last row. `learned`: the stored learned fit to show (None: none)."""
    rows, colors = [], []
    if learned:
        chosen = _chosen_label(learned)
        labels = [str(row[0]) for row in learned.get("cv_table", [])]
        values = [np.nan_to_num(_num(row[1]), nan=-1.0) for row in learned.get("cv_table", [])]
        if chosen not in labels and labels:  # a label format changed since the pool was built: mark the best
            chosen = labels[int(np.argmax(values))]
        report = learned.get("report", {})
        deals = f" x {report['repeats']} fold deals" if report.get("repeats", 1) > 1 else ""
        weighed = report.get("cv_questions", report.get("questions", "?"))
        how = f"{report.get('folds', '?')}-fold CV{deals}, {weighed} questions"
        for label, value, sd in ((*row, None, None)[:3] for row in learned.get("cv_table", [])):
            mark = str(label) == chosen
            rows.append([f"learned: {label}" + (" (chosen)" if mark else ""), _num(value), _num(sd), how])
            colors.append(CHOSEN if mark else LEARNED)
    stacker = _stacker_row(pool)
    if stacker:
        rows.append(stacker)
        colors.append(OTHER)
    for method, label in (("pres", "PRES"), ("pres-top1", "PRES top-1")):
        value, picks = _loo(pool, method, k)
        rows.append([f"{label} (k = {k})", value, float("nan"), f"leave-one-out, {picks} questions"])
        colors.append(OTHER)
    singles = pool.ensemble_table()[: len(pool.rm_names)]
    finite = [s for s in singles if np.isfinite(s["best_of_n"])]
    best = max(finite, key=lambda s: s["best_of_n"]) if finite else singles[0]
    rows.append([f"best single RM: {best['ensemble'].name}", float(best["best_of_n"]), float("nan"),
                 "pool mean (in-sample)"])
    colors.append(REFERENCE)
    return rows, colors


def _accuracy(pool: QuestionPool, k: int, learned: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Part 1: the methods' best-of-n as a table and as bars against the best single RM."""
    from matplotlib.figure import Figure

    rows, colors = _accuracy_rows(pool, k, learned)
    fig = Figure(figsize=(9, 0.9 + 0.27 * len(rows)), layout="constrained")
    hbars(fig.add_subplot(), [r[0] for r in rows], [r[1] for r in rows], colors, reference=rows[-1][1],
          title="Best-of-n accuracy by selection method")
    return {"table": table(["method", "best-of-n", "sd over folds (and deals)", "measured by"], rows, best_cols=[1],
                           ref_rows=[len(rows) - 1]),
            "image": image(fig, "best-of-n accuracy by selection method")}


def _reliability(reliability: Mapping[str, Any]) -> dict[str, Any] | None:
    """Part 2: accuracy against mean confidence per bin (marker area: picks), the diagonal for perfect
    calibration, and the ECE; bins with a NaN mean are left out. None when no bin is left."""
    from matplotlib.figure import Figure

    bins = [b for b in reliability.get("bins", []) if np.isfinite(_num(b.get("confidence")))
            and np.isfinite(_num(b.get("accuracy")))]
    ece, picks = _num(reliability.get("ece")), reliability.get("picks", 0)
    if not bins:
        return None
    conf = np.array([_num(b["confidence"]) for b in bins])
    acc = np.array([_num(b["accuracy"]) for b in bins])
    count = np.nan_to_num(np.array([_num(b.get("count")) for b in bins]))
    fig = Figure(figsize=(4.8, 4.4), layout="constrained")
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="#888", linestyle="--", linewidth=1, label="perfect calibration")
    ax.plot(conf, acc, color=CHOSEN, linewidth=1, alpha=0.6)
    ax.scatter(conf, acc, s=20 + 280 * count / max(1.0, count.max()), color=CHOSEN,
               alpha=0.8, zorder=3, label="bin (area: picks)")
    for x, y, n in zip(conf, acc, count):
        ax.annotate(f"{n:.0f}", (x, y), textcoords="offset points", xytext=(6, -10), fontsize=8)
    ax.set(xlim=(-0.02, 1.02), ylim=(-0.02, 1.02), xlabel="mean confidence", ylabel="accuracy (best-of-n hit)",
           title=f"ECE {fmt(ece)} over {picks} picks")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, markerscale=0.5)
    rows = [[f"{_num(b.get('low')):.1f}–{_num(b.get('high')):.1f}", int(n), _num(b["confidence"]),
             _num(b["accuracy"])] for b, n in zip(bins, count)]
    return {"image": image(fig, "reliability diagram of the learned selector confidence"), "ece": ece,
            "picks": picks, "table": table(["confidence bin", "picks", "mean confidence", "accuracy"], rows)}


def _feature_parts(name: str) -> tuple[str, str]:
    """(feature group, RM) of a feature name like "query-z:ArmoRM", "pool-z:PRM@mean", "agreement:votes"."""
    group, _, rest = name.partition(":")
    if group == "agreement":
        return f"agreement ({rest})", "all RMs"
    member, _, reduction = rest.partition("@")
    return (f"{group}, steps {reduction}" if reduction else group), member


def _importances(learned: Mapping[str, Any], importances: Mapping[str, Any]) -> dict[str, Any]:
    """Part 3: the TOP_FEATURES largest weights by magnitude, with what the learner's numbers mean (no table
    where the fit chose PRES or reports no weights)."""
    label = _chosen_label(learned)
    learners = {c.get("setting", {}).get("learner") for c in learned.get("components") or [] if isinstance(c, dict)}
    learner = learners.pop() if len(learners) == 1 else "blend" if learners else None
    what = {"logit": "signed coefficient on the scaled feature (positive: raises a candidate's score)",
            "lambdarank": "share of the boosted trees' split gain",
            "blend": "the mean over the blended models of each one's weights, scaled to a total magnitude of 1 "
                     "(logit coefficients signed, lambdarank gain shares)"}.get(learner, "importance")
    values = sorted(((str(n), _num(v)) for n, v in importances.items()),
                    key=lambda item: -np.nan_to_num(abs(item[1]), nan=-1.0))[:TOP_FEATURES]
    pres = bool(learned.get("pres_members"))
    rows = [[*_feature_parts(name), value] for name, value in values]
    weights = table(["feature group", "RM", "value"], rows, formats={2: ".3f" if learner == "lambdarank" else "+.3f"})
    return {"count": len(values), "pres": pres, "label": label, "what": what, "features": len(importances),
            "table": weights if rows and not pres else None}


def _domains(domains: Mapping[str, Mapping[str, Any]]) -> Table | None:
    """Part 4: per domain (largest first), the learned CV best-of-n, the best single RM's, and the gain; with
    the RMs of the fit that serves the domain where the pool stores several; None when none is stored."""
    if not domains:
        return None
    several = len({d.get("rms") for d in domains.values()}) > 1
    rows = []
    for domain, d in sorted(domains.items(), key=lambda item: (-_num(item[1].get("questions")), item[0])):
        best = _num(d.get("best_single"))
        best = best if best >= 0 else float("nan")  # the fit stores -1 where no single RM is defined
        learned = _num(d.get("learned"))
        rows.append([str(domain), int(np.nan_to_num(_num(d.get("questions")))), learned,
                     str(d.get("best_single_rm", "–")) if np.isfinite(best) else "–", best,
                     100 * (learned - best)] + ([str(d.get("rms"))] if several else []))
    return table(["domain", "questions", "learned (CV)", "best single RM", "its best-of-n", "gain (points)"]
                 + (["selector over"] if several else []), rows, formats={5: "+.1f"})


def _members(fit: Mapping[str, Any]) -> str:
    from morkit.selection.learned_method import stored_members

    return ", ".join(stored_members(fit) or ("?",))


def _stored_note(fits: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Where the pool stores a fit per RM set (a pool mixing domains): which, on how many questions."""
    items = "; ".join(f"over {_members(f)}: {(f.get('report') or {}).get('questions', '?')} questions, CV "
                      f"best-of-n {fmt(_num(f.get('cv_best_of_n')))}" for f in fits)
    return {"count": len(fits), "summary": items}


def _merged_domains(fits: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Per domain, the stored gains of the first fit that learned from that domain, with its RMs."""
    out: dict[str, Mapping[str, Any]] = {}
    for fit in fits:
        for domain, gains in ((fit.get("report") or {}).get("domains") or {}).items():
            if domain not in out and isinstance(gains, Mapping):
                out[domain] = {**gains, "rms": _members(fit)}
    return out


def selection_section(pool: QuestionPool, k: int = 100) -> Markup:
    """The HTML fragment (a `markupsafe.Markup`) of the pool report's "Selection" section (see the module
    docstring); `k` is the neighbours per question for the PRES leave-one-out estimates."""
    from morkit.selection.learned import MIN_MIXED
    from morkit.selection.learned_method import stored_fits

    with plot_style():
        fits = stored_fits(pool)
        if fits:
            learned = fits[0]
            report = learned.get("report") or {}
            context = {"why": None, "stored": _stored_note(fits) if len(fits) > 1 else None, "learned": learned,
                       "accuracy": _accuracy(pool, k, learned),
                       "reliability": _reliability(report.get("reliability") or {}),
                       "weights": _importances(learned, report.get("importances") or {}),
                       "domains": _domains(_merged_domains(fits))}
        else:
            mixed = _mixed_questions(pool)
            if mixed < MIN_MIXED:
                why = (f"The pool has {mixed} questions with both a right and a wrong answer; the learned "
                       f"selector needs {MIN_MIXED}, so selection falls back to PRES.")
            else:
                why = ("No learned selector is stored with this pool; selection fits one when it first runs "
                       "(pools built or extended with the morkit pool commands store it).")
            context = {"why": why, "stored": None, "learned": None, "accuracy": _accuracy(pool, k)}
    return fragment("selection_section.html.j2", **context)
