"""The JSONL query contract (docs/jsonl.md): lines to Query objects and back, unknown keys kept."""

from __future__ import annotations

import os
from typing import Any, Iterable

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.data.jsonl import read_jsonl, write_jsonl

_QUERY_KEYS = {"id", "question", "candidates", "domain", "reference", "tests"}
_CANDIDATE_KEYS = {"text", "agent", "correct", "scores"}


def _score_value(value: Any, where: str, path: str | None, line: int | None) -> float | tuple[float, ...]:
    def finite(x: Any) -> float:
        number = checks.finite_float(x)  # None for NaN, infinities, and integers too large for a float
        if number is None:
            raise InputError(f"{where}: score must be a finite number, got {checks.shown(x)}", path=path, line=line)
        return number

    if isinstance(value, list):
        if not value:
            raise InputError(f"{where}: step score list is empty", path=path, line=line)
        return tuple(finite(x) for x in value)
    return finite(value)


def parse_candidate(obj: Any, where: str, path: str | None = None, line: int | None = None) -> Candidate:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: candidate must be an object", path=path, line=line)
    text = obj.get("text")
    if text is not None and not isinstance(text, str):
        raise InputError(f"{where}: 'text' must be a string", path=path, line=line)
    correct = obj.get("correct")
    if correct is not None and not isinstance(correct, bool):
        raise InputError(f"{where}: 'correct' must be true or false", path=path, line=line)
    raw_scores = obj.get("scores")
    if raw_scores is None:
        raw_scores = {}
    if not isinstance(raw_scores, dict):
        raise InputError(f"{where}: 'scores' must be an object of RM name -> score", path=path, line=line)
    scores = {str(k): _score_value(v, f"{where} score {k!r}", path, line) for k, v in raw_scores.items()}
    if text is None and not scores:
        raise InputError(f"{where}: candidate has neither 'text' nor 'scores'", path=path, line=line)
    agent = obj.get("agent")
    return Candidate(
        text=text,
        agent=None if agent is None else str(agent),
        correct=correct,
        scores=scores,
        extra={k: v for k, v in obj.items() if k not in _CANDIDATE_KEYS},
    )


def parse_query(obj: dict[str, Any], path: str | None = None, line: int | None = None, *,
                bare: bool = False) -> Query:
    """Turn one contract object into a Query; every problem names the file, line and id.

    `bare`: the object may leave `candidates` out (a question still to answer, as `generate` takes); it then
    has none. Everywhere else `candidates` is required, so a missing list is never taken for an empty one."""
    qid = obj.get("id")
    if qid is None or isinstance(qid, (dict, list, bool)):
        raise InputError("missing or invalid 'id'", path=path, line=line)
    qid = str(qid)
    question = obj.get("question")
    if not isinstance(question, str):
        raise InputError(f"query {qid!r}: 'question' must be a string", path=path, line=line)
    candidates = [] if bare and "candidates" not in obj else obj.get("candidates")
    if not isinstance(candidates, list):
        raise InputError(f"query {qid!r}: 'candidates' must be a list", path=path, line=line)
    parsed = tuple(
        parse_candidate(c, f"query {qid!r} candidate {i}", path, line) for i, c in enumerate(candidates)
    )
    for key in ("domain", "reference", "tests"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            raise InputError(f"query {qid!r}: {key!r} must be a string", path=path, line=line)
    return Query(
        id=qid,
        question=question,
        candidates=parsed,
        domain=obj.get("domain"),
        reference=obj.get("reference"),
        tests=obj.get("tests"),
        extra={k: v for k, v in obj.items() if k not in _QUERY_KEYS},
    )


def load_queries(path: str | os.PathLike, *, bare: bool = False) -> list[Query]:
    """Read a contract JSONL file into queries; a bad line or a repeated id is an InputError naming file and line.

    Args:
        path: The JSONL file (gzip-compressed when it ends in `.gz`), one query a line; blank lines are skipped.
        bare: Also accept lines without `candidates` (questions not yet answered); they get none.

    Returns:
        The queries in file order.

    Raises:
        InputError: The file cannot be read, a line breaks the contract, or an id repeats.
    """
    queries: list[Query] = []
    seen: dict[str, int] = {}
    for line, obj in read_jsonl(path):
        query = parse_query(obj, path=str(path), line=line, bare=bare)
        if query.id in seen:
            raise InputError(f"duplicate id {query.id!r} (first on line {seen[query.id]})", path=str(path), line=line)
        seen[query.id] = line
        queries.append(query)
    return queries


def candidate_to_json(candidate: Candidate) -> dict[str, Any]:
    out: dict[str, Any] = dict(candidate.extra)
    if candidate.text is not None:
        out["text"] = candidate.text
    if candidate.agent is not None:
        out["agent"] = candidate.agent
    if candidate.correct is not None:
        out["correct"] = candidate.correct
    if candidate.scores:
        out["scores"] = {k: list(v) if isinstance(v, tuple) else v for k, v in candidate.scores.items()}
    return out


def query_to_json(query: Query) -> dict[str, Any]:
    out: dict[str, Any] = {"id": query.id, "question": query.question}
    for key in ("domain", "reference", "tests"):
        if getattr(query, key) is not None:
            out[key] = getattr(query, key)
    out.update(query.extra)
    out["candidates"] = [candidate_to_json(c) for c in query.candidates]
    return out


def save_queries(path: str | os.PathLike, queries: Iterable[Query]) -> int:
    """Write queries as contract JSONL, atomically (a failed write leaves no file).

    Args:
        path: The file to write; replaced if it exists.
        queries: The queries, one line each, with their unknown keys kept.

    Returns:
        The number of lines written.

    Raises:
        InputError: The path cannot be written, or a query holds a value JSON cannot (the file is then not written).
    """
    return write_jsonl(path, (query_to_json(q) for q in queries))
