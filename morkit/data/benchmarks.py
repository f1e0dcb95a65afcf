"""Benchmarks read from their own public file formats: GPQA's CSV and LiveCodeBench's JSONL, as bare questions.

Pickled tests load through an unpickler that refuses every global; file layouts: docs/jsonl.md.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import logging
import pickle
import zlib
from pathlib import Path
from typing import Any, Iterator

from morkit.core.errors import InputError
from morkit.core.types import Query
from morkit.data.datasets import parse_rows, shuffled_order

log = logging.getLogger(__name__)

GPQA_PROMPT = ("Answer the following multiple-choice question. Think it through step by step, then end with "
               "a line of the form \"The answer is (X)\", where X is the letter of the correct option.\n\n"
               "{question}")
LIVECODEBENCH_PROMPT = ("{problem}\n\nWrite a Python program that solves this problem: it reads the input from "
                        "standard input and writes the answer to standard output (solve the general problem, "
                        "not just the examples). Reply with the complete program in one ```python block.")
GPQA_COLUMNS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3",
                "Record ID")
MAX_INFLATED_BYTES = 1 << 30  # a compressed test blob may expand to this much, no more (a zlib bomb stops here)


def gpqa(data_dir: Path) -> list[Query]:
    """The 198 GPQA diamond questions (CC-BY-4.0, idavidrein/gpqa) with their reference letters."""
    return _gpqa(data_dir / "gpqa" / "gpqa_diamond.csv")


def gpqa_main(data_dir: Path) -> list[Query]:
    """The 448 GPQA main questions (CC-BY-4.0, idavidrein/gpqa) with their reference letters."""
    return _gpqa(data_dir / "gpqa" / "gpqa_main.csv")


def _gpqa(path: Path) -> list[Query]:
    def parse(number: int, row: dict[str, str]) -> Query:
        record = row["Record ID"].strip()
        options = [row[column].strip() for column in GPQA_COLUMNS[1:5]]  # the correct answer first
        if not record or not row["Question"].strip() or not all(options):
            raise ValueError("empty question, answer or record id")
        order = shuffled_order(record, len(options))
        lines = [f"({letter}) {options[i]}" for letter, i in zip("ABCD", order)]
        question = row["Question"].strip() + "\n\n" + "\n".join(lines)
        extra = {"prompt": GPQA_PROMPT.format(question=question), "record_id": record}
        extra.update({key: row[column].strip() for key, column in (("subdomain", "Subdomain"),
                                                                    ("high_level_domain", "High-level domain"))
                      if (row.get(column) or "").strip()})
        return Query(f"gpqa-{record}", question, (), domain="choice", reference="ABCD"[order.index(0)], extra=extra)

    return parse_rows(path, parse, rows=_csv_rows(path, GPQA_COLUMNS))


def _csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(the line a record starts on, {column: value}) for each record of a CSV file with a header row."""
    try:
        handle = open(path, encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=str(path)) from exc
    with handle:
        reader = csv.reader(handle)
        start = 1
        try:
            header = next(reader, None)
            missing = [c for c in required if c not in (header or [])]
            if missing:
                raise InputError(f"not the expected CSV: the header row lacks {', '.join(map(repr, missing))}",
                                 path=str(path), line=1)
            start = reader.line_num + 1
            for row in reader:
                if row:
                    if len(row) != len(header):
                        raise InputError(f"a record of {len(row)} fields under a header of {len(header)}; "
                                         "is this the public file?", path=str(path), line=start)
                    yield start, dict(zip(header, row))
                start = reader.line_num + 1
        except csv.Error as exc:
            raise InputError(f"malformed CSV ({exc})", path=str(path), line=start) from exc
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text ({exc.reason})", path=str(path), line=start) from exc


def livecodebench(data_dir: Path) -> list[Query]:
    """LiveCodeBench (code_generation_lite) problems with stdin/stdout tests: public and private, in that order.

    Call-based (LeetCode, "functional") problems are skipped, and counted in a warning."""
    folder = data_dir / "livecodebench"
    files = sorted(folder.glob("test*.jsonl"))
    if not files:
        raise InputError("no test*.jsonl files (the code_generation_lite release) in this folder", path=str(folder))
    seen: set[str] = set()

    def parse(number: int, row: dict[str, Any]) -> Query | None:
        tests = _lcb_tests(row["public_test_cases"], "public") + _lcb_tests(row["private_test_cases"], "private")
        metadata = json.loads(row["metadata"]) if isinstance(row["metadata"], str) else row["metadata"]
        kinds = {t["testtype"] for t in tests}
        if not tests or not kinds <= {"stdin", "functional"} or not isinstance(metadata, dict):
            raise ValueError(f"tests of types {sorted(kinds)} (expected 'stdin' or 'functional'), "
                             "or metadata that is not an object")
        if "functional" in kinds or metadata.get("func_name"):
            return None
        qid = f"lcb-{row['question_id']}"
        if qid in seen:
            raise ValueError(f"question_id {row['question_id']!r} was already loaded")
        seen.add(qid)
        extra = {"prompt": LIVECODEBENCH_PROMPT.format(problem=row["question_content"]),
                 "stdio_tests": [{"input": t["input"], "output": t["output"]} for t in tests],
                 "title": row["question_title"], "platform": row["platform"], "difficulty": row["difficulty"],
                 "contest_date": row["contest_date"]}
        return Query(qid, str(row["question_content"]), (), domain="code", extra=extra)

    parsed = [query for path in files for query in parse_rows(path, parse)]
    queries = [query for query in parsed if query is not None]
    if len(queries) < len(parsed):
        log.warning("livecodebench: skipped %d of %d problems, the call-based ones (LeetCode, 'functional' tests); "
                    "only stdin/stdout problems are loaded", len(parsed) - len(queries), len(parsed))
    return queries


def _lcb_tests(value: Any, which: str) -> list[dict[str, str]]:
    """A test-case field: a JSON string of a list of {"input", "output", "testtype"}, or that JSON string
    pickled, zlib-compressed and base64-encoded (what the release does for large private tests)."""
    if not isinstance(value, str):
        raise TypeError(f"{which}_test_cases is a {type(value).__name__}, not a string")
    try:
        tests = json.loads(value)
    except ValueError:
        tests = json.loads(_unpickled_string(value, which))
    if not isinstance(tests, list) or not all(
            isinstance(t, dict) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str)
            and isinstance(t.get("testtype"), str) for t in tests):
        raise ValueError(f"{which}_test_cases is not a list of {{input, output, testtype}} strings")
    return tests


class _PlainValues(pickle.Unpickler):
    """Loads only plain values (strings, numbers, lists, dicts...): every class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: test data may only hold a JSON string")


def _unpickled_string(blob: str, which: str) -> str:
    """The JSON string inside base64(zlib(pickle(str))), unpickled without running anything."""
    try:
        inflater = zlib.decompressobj()
        data = inflater.decompress(base64.b64decode(blob.encode("ascii"), validate=True), MAX_INFLATED_BYTES)
    except (UnicodeEncodeError, binascii.Error, zlib.error) as exc:
        raise ValueError(f"{which}_test_cases is neither JSON nor base64 of zlib data ({exc})") from exc
    if inflater.unconsumed_tail:
        raise ValueError(f"{which}_test_cases expands to more than {MAX_INFLATED_BYTES} bytes")
    try:
        value = _PlainValues(io.BytesIO(data)).load()
    except Exception as exc:  # noqa: BLE001 - any failure to read untrusted pickle data is a bad row
        raise ValueError(f"{which}_test_cases: unreadable pickle ({type(exc).__name__}: {exc})") from exc
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if not isinstance(value, str):
        raise ValueError(f"{which}_test_cases: the pickle holds a {type(value).__name__}, not a JSON string")
    return value
