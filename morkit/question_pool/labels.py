"""Labels for unlabelled candidates, by the query's grader (morkit.question_pool.graders).

Given labels are never overwritten; an undecided grade is false with a `label_reason`, and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from morkit.core.types import Query
from morkit.question_pool.graders import GRADERS, grader_name


@dataclass(frozen=True)
class LabelReport:
    by_reference: int = 0  # graded against a reference answer (math, choice) or stated instructions (IFEval)
    by_tests: int = 0  # graded by running tests (code)
    no_source: int = 0  # candidates left unlabelled: nothing can grade their query
    undecided: int = 0  # labelled false because the grader could not decide (see `label_reason`)

    def __add__(self, other: "LabelReport") -> "LabelReport":
        return LabelReport(self.by_reference + other.by_reference, self.by_tests + other.by_tests,
                           self.no_source + other.no_source, self.undecided + other.undecided)


def _label_query(query: Query) -> tuple[Query, LabelReport]:
    todo = [i for i, c in enumerate(query.candidates) if c.correct is None]
    if not todo:
        return query, LabelReport()
    name = grader_name(query)
    if name is None:
        return query, LabelReport(no_source=len(todo))
    grades = GRADERS.load(name)().grade(query, [query.candidates[i].text for i in todo])
    candidates = list(query.candidates)
    for i, grade in zip(todo, grades):
        extra = {**candidates[i].extra, "label_reason": grade.reason} if grade.reason else candidates[i].extra
        candidates[i] = replace(candidates[i], correct=grade.correct, extra=extra)
    undecided = sum(g.reason is not None for g in grades)
    report = (LabelReport(by_tests=len(todo), undecided=undecided) if name == "code"
              else LabelReport(by_reference=len(todo), undecided=undecided))
    return replace(query, candidates=tuple(candidates)), report


def fill_labels(queries: Sequence[Query], progress: bool = False) -> tuple[list[Query], LabelReport]:
    """Label what can be labelled; the report counts candidates per source, undecided and left unlabelled."""
    from tqdm import tqdm

    out, totals = [], LabelReport()
    for query in tqdm(queries, desc="labels", unit="query", disable=not progress, leave=False):
        labelled, report = _label_query(query)
        out.append(labelled)
        totals = totals + report
    return out, totals
