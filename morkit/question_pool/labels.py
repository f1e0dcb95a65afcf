"""Labels for unlabelled candidates: math answer equivalence with `reference`, or sandboxed `tests`.

Only candidates whose `correct` is missing are labelled; given labels are never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from morkit.core.grading import is_correct
from morkit.core.types import Query


@dataclass(frozen=True)
class LabelReport:
    by_reference: int = 0
    by_tests: int = 0
    no_source: int = 0  # candidates left unlabelled: the query has neither reference nor tests


def _label_query(query: Query) -> tuple[Query, LabelReport]:
    todo = [i for i, c in enumerate(query.candidates) if c.correct is None]
    if not todo:
        return query, LabelReport()
    labels: dict[int, bool] = {}
    if query.reference is not None:
        for i in todo:
            text = query.candidates[i].text
            labels[i] = bool(is_correct(text, query.reference))
        report = LabelReport(by_reference=len(todo))
    elif query.tests:
        from morkit.reward_models.rules import CodeTests

        results = CodeTests().run_tests(replace(query, candidates=tuple(query.candidates[i] for i in todo)))
        labels = {i: r.passed for i, r in zip(todo, results)}
        report = LabelReport(by_tests=len(todo))
    else:
        return query, LabelReport(no_source=len(todo))
    candidates = tuple(replace(c, correct=labels[i]) if i in labels else c for i, c in enumerate(query.candidates))
    return replace(query, candidates=candidates), report


def fill_labels(queries: Sequence[Query], progress: bool = False) -> tuple[list[Query], LabelReport]:
    """Label what can be labelled; the report counts candidates per source and those left unlabelled."""
    from tqdm import tqdm

    out, totals = [], LabelReport()
    for query in tqdm(queries, desc="labels", unit="query", disable=not progress, leave=False):
        labelled, report = _label_query(query)
        out.append(labelled)
        totals = LabelReport(totals.by_reference + report.by_reference, totals.by_tests + report.by_tests,
                             totals.no_source + report.no_source)
    return out, totals
