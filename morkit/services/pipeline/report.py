"""The pipeline's report: report.json (every figure) and report.html (a table and plots per benchmark, laid out by
the template pipeline_report.html.j2)."""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from morkit.data import html


def _plots(name: str, methods: Sequence[Mapping[str, Any]]) -> html.Image:
    """Accuracy per method, and accuracy against seconds spent (the cost a user feels)."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    with rc_context({"text.parse_math": False, "font.size": 9}):
        fig = Figure(figsize=(10, 0.9 + 0.34 * len(methods)), layout="constrained")
        bars, costs = fig.subplots(1, 2, width_ratios=[1.3, 1])
        labels = [m["method"] for m in methods]
        accuracy = [m["accuracy"] if m["accuracy"] == m["accuracy"] else 0.0 for m in methods]
        colours = ["#bbbbbb" if m["reference"] else "#4c72b0" for m in methods]
        ys = range(len(methods))
        bars.barh(ys, accuracy, color=colours)
        bars.set_yticks(ys, labels)
        bars.invert_yaxis()
        bars.set_xlim(0, 1.05)
        bars.set_xlabel("accuracy on the test split")
        for y, value in zip(ys, accuracy):
            bars.text(value, y, f" {value:.2f}", va="center", fontsize=8)
        for m, value, colour in zip(methods, accuracy, colours):
            costs.scatter(m["seconds"], value, color=colour)
            costs.annotate(m["method"], (m["seconds"], value), fontsize=7, xytext=(3, 3), textcoords="offset points")
        costs.set_xlabel("seconds (test split)")
        costs.set_ylabel("accuracy")
        costs.grid(alpha=0.3)
        fig.suptitle(name)
        return html.image(fig, f"{name}: accuracy and cost per method")


def _stage_rows(stages: Mapping[str, Mapping[str, Any]]) -> list[list[Any]]:
    rows = []
    for name, facts in stages.items():
        extra = {k: v for k, v in facts.items() if k not in ("seconds", "output")}
        rows.append([name, float(facts.get("seconds", 0.0)), json.dumps(extra, sort_keys=True)[:160]])
    return rows


def write_reports(run: Any, report: Mapping[str, Any]) -> None:
    """report.json and report.html in the run's workdir, each written atomically."""
    from morkit.data.jsonl import atomic_path, json_safe

    with atomic_path(run.path("report.json")) as tmp:
        tmp.write_text(json.dumps(json_safe(report), indent=1) + "\n", encoding="utf-8")
    grading = ("lenient: an answer's last number counts" if report.get("strict_grading") is False
               else "strict: a stated final answer")
    aggregator = f" (ACS aggregator: {report['aggregator']})" if report.get("aggregator") else ""
    header = [("config", report["config"]), ("agents", report["agents"]), ("pool RMs", ", ".join(report["rms"])),
              ("search", (", ".join(report["search"]) or "none") + aggregator), ("grading", grading)]
    benchmarks = []
    for bench in report["benchmarks"]:
        methods = bench["methods"]
        rows = [[m["method"], m["detail"], m["accuracy"], m["questions"], m["tokens"], m["llm_calls"], m["rm_calls"],
                 m["seconds"]] for m in methods]
        refs = [i for i, m in enumerate(methods) if m["reference"]]
        benchmarks.append({"name": bench["benchmark"], "validation_questions": bench["validation_questions"],
                           "test_questions": bench["test_questions"], "image": _plots(bench["benchmark"], methods),
                           "table": html.table(["method", "choice", "accuracy", "questions", "tokens", "LLM calls",
                                                "RM calls", "seconds"], rows, best_cols=[2], ref_rows=refs)})
    html.write_page(run.path("report.html"), "pipeline_report.html.j2", header=header, benchmarks=benchmarks,
                    stages=html.table(["stage", "seconds", "facts"], _stage_rows(report["stages"])))
