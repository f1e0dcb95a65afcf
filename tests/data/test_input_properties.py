"""Property tests of the JSONL contract: whatever a queries file holds (any JSON value, any bytes, any nesting),
loading it gives valid Query objects or an InputError naming the file and line, never another exception; loaded
scores are finite floats; what is loaded is written as standard JSON and reads back equal; the value checks the
CLI and the options share answer every number with its value or an InputError."""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.data.contract import load_queries, save_queries
from morkit.data.jsonl import MAX_DEPTH, write_jsonl

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text with control characters and lone surrogates (Cs), which JSON can escape but UTF-8 cannot hold.
TEXT = st.text(st.characters(codec=None, categories=["L", "N", "P", "S", "Z", "Cc", "Cs"]), max_size=6)
KEYS = TEXT | st.sampled_from(["id", "question", "candidates", "text", "scores", "correct", "agent", "domain",
                               "reference", "tests"])
NUMBERS = (st.integers() | st.integers(min_value=10**300, max_value=10**400).map(lambda n: n * (-1) ** (n % 2))
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.sampled_from([1e308, -1e308, 5e-324, -0.0, 2**53 + 1]))
SCALARS = st.none() | st.booleans() | NUMBERS | TEXT
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                    max_leaves=12)
SCORE = NUMBERS | st.lists(NUMBERS, max_size=3) | JSON
CANDIDATE = st.fixed_dictionaries(
    {"text": TEXT},
    optional={"agent": TEXT, "correct": st.booleans(), "scores": st.dictionaries(KEYS, SCORE, max_size=3),
              "note": JSON})
QUERY = st.fixed_dictionaries(
    {"id": TEXT | st.integers(), "question": TEXT, "candidates": st.lists(CANDIDATE, max_size=3)},
    optional={"domain": TEXT, "reference": TEXT, "tests": TEXT, "meta": JSON})
LOOSE_QUERY = st.fixed_dictionaries(  # every field may be absent or of any type
    {}, optional={"id": JSON, "question": JSON, "candidates": JSON | st.lists(CANDIDATE | JSON, max_size=3),
                  "domain": JSON, "scores": JSON})
LINE = QUERY | LOOSE_QUERY | JSON


def _lines_in(path: Path) -> int:
    """Lines as the reader counts them (universal newlines)."""
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:
        return sum(1 for _ in handle)


def load_or_input_error(path: Path) -> list[Query] | None:
    """The queries of `path`, or None after checking the InputError names the file and a line of it;
    any other exception fails the test."""
    try:
        queries = load_queries(path)
    except InputError as exc:
        message = str(exc)
        assert exc.path == str(path), message
        assert exc.line is not None and 1 <= exc.line <= _lines_in(path), message
        assert message.startswith(f"{path}:{exc.line}: "), message
        assert "\n" not in message and "\r" not in message, message
        return None
    for query in queries:
        assert isinstance(query.id, str) and isinstance(query.question, str)
        for candidate in query.candidates:
            for value in candidate.scores.values():
                for number in value if isinstance(value, tuple) else (value,):
                    assert type(number) is float and math.isfinite(number), (query.id, value)
    return queries


def assert_round_trip(queries: list[Query], folder: Path) -> None:
    """Written as standard UTF-8 JSON (no NaN, no infinities), the queries read back equal."""
    out = folder / "out.jsonl"
    assert save_queries(out, queries) == len(queries)
    raw = out.read_bytes().decode("utf-8")  # strict: valid UTF-8
    for line in raw.split("\n")[:-1]:  # not splitlines(): U+0085 and U+2028 are text inside a line
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c} written"))
    assert load_queries(out) == queries


@SETTINGS
@given(values=st.lists(LINE, min_size=1, max_size=4), ascii_only=st.booleans())
def test_any_json_values_load_or_name_the_line(values, ascii_only):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl"
        # ensure_ascii escapes lone surrogates (valid UTF-8 bytes, an invalid string); without it they are
        # written as surrogate bytes, which are not UTF-8.
        text = "".join(json.dumps(v, ensure_ascii=ascii_only, allow_nan=True) + "\n" for v in values)
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        queries = load_or_input_error(path)
        if queries is not None:
            assert len(queries) == len(values)
            assert_round_trip(queries, Path(tmp))


@SETTINGS
@given(queries=st.lists(QUERY, min_size=1, max_size=3))
def test_well_typed_queries_with_finite_scores_load_and_round_trip(queries):
    """Lines of the right shape, without NaN, infinities, big numbers or surrogates: all load."""

    def clean(value):
        if isinstance(value, str):
            return value.encode("utf-8", "ignore").decode("utf-8", "ignore") if value else "x"
        if isinstance(value, float) and not math.isfinite(value) or isinstance(value, int) and abs(value) > 2**60:
            return 0.5
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    rows = []
    for i, query in enumerate(queries):
        query = clean(query)
        query["id"] = f"q{i}"
        for candidate in query["candidates"]:
            candidate["scores"] = {k: v for k, v in candidate.get("scores", {}).items()
                                   if checks.finite_float(v) is not None
                                   or isinstance(v, list) and v and all(checks.finite_float(x) is not None for x in v)}
        rows.append(query)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        loaded = load_queries(path)
        assert [q.id for q in loaded] == [r["id"] for r in rows]
        assert_round_trip(loaded, Path(tmp))


@SETTINGS
@given(chunks=st.lists(st.binary(max_size=40) | st.sampled_from(
    [b'{"id": "a", "question": "?", "candidates": [{"text": "x", "scores": {"r": 1}}]}', b"\xff\xfe", b"\xed\xa0\x80",
     b"[[[[", b"\r", b"\x00", b'"\\ud800"', b"NaN", b"1e999", b"\xef\xbb\xbf{}"]), min_size=1, max_size=6))
def test_any_bytes_load_or_name_the_line(chunks):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl"
        path.write_bytes(b"\n".join(chunks))
        queries = load_or_input_error(path)
        if queries is not None:
            assert_round_trip(queries, Path(tmp))


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=200), compress=st.booleans())
def test_any_bytes_in_a_gz_file_load_or_name_the_file(data, compress):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl.gz"
        path.write_bytes(gzip.compress(data) if compress else data)
        try:
            load_queries(path)
        except InputError as exc:
            assert exc.path == str(path) and str(exc).startswith(f"{path}:") and "\n" not in str(exc)


def _nested(kind: str, depth: int) -> str:
    return "[" * depth + "]" * depth if kind == "list" else '{"a": ' * depth + "1" + "}" * depth


@settings(max_examples=120, deadline=None)
@given(kind=st.sampled_from(["list", "object"]), depth=st.integers(1, 3000) | st.integers(MAX_DEPTH - 5, MAX_DEPTH + 5),
       where=st.sampled_from(["query", "candidate", "score"]), balanced=st.booleans())
def test_any_nesting_loads_or_names_the_line(kind, depth, where, balanced):
    nested = _nested(kind, depth) if balanced else ("[" if kind == "list" else '{"a": ') * depth
    levels = {"query": 1, "candidate": 3, "score": 4}[where]  # containers around the nested value
    candidate = '{"text": "a", "scores": {"r": 0.5, "s": %s}}' % nested if where == "score" else (
        '{"text": "a", "meta": %s}' % nested if where == "candidate" else '{"text": "a"}')
    meta = ', "meta": %s' % nested if where == "query" else ""
    line = '{"id": "q", "question": "?", "candidates": [%s]%s}' % (candidate, meta)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl"
        path.write_text('{"id": "first", "question": "?", "candidates": []}\n' + line + "\n", encoding="utf-8")
        queries = load_or_input_error(path)
        if not balanced:
            assert queries is None
        elif where == "score":  # a score is a number or a list of numbers, never a nested value
            assert queries is None
        elif levels + depth <= MAX_DEPTH:
            assert queries is not None, f"{levels + depth} levels should load"
            assert_round_trip(queries, Path(tmp))
        else:
            with pytest.raises(InputError, match=rf"{path}:2: (query 'q': )?nested more than {MAX_DEPTH} levels"):
                load_queries(path)


@SETTINGS
@given(records=st.lists(st.dictionaries(KEYS, JSON, max_size=3), min_size=1, max_size=3))
def test_write_jsonl_writes_standard_json_or_nothing(records):
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "out.jsonl"
        try:
            assert write_jsonl(target, records) == len(records)
        except InputError as exc:
            assert exc.path == str(target) and "\n" not in str(exc)
            assert os.listdir(tmp) == []  # nothing written, no temporary file left
            return
        lines = target.read_bytes().decode("utf-8").split("\n")[:-1]
        assert [json.loads(x, parse_constant=lambda c: pytest.fail(c)) for x in lines] == records


@SETTINGS
@given(value=NUMBERS | st.booleans() | TEXT | st.none())
def test_value_checks_return_the_value_or_raise_input_error(value):
    for check in (checks.finite, checks.positive, checks.non_negative, checks.probability, checks.share,
                  checks.positive_int, checks.non_negative_int):
        try:
            result = check(value, "--flag")
        except InputError as exc:
            assert str(exc).startswith("--flag must be") and len(str(exc)) < 200, str(exc)
            continue
        assert result is value
        if check not in (checks.positive_int, checks.non_negative_int):
            assert checks.finite_float(value) is not None, (check.__name__, value)
