"""The JSONL query contract: parsing, errors that name file/line/id, round trips, atomic writes."""

from __future__ import annotations

import json
import os

import pytest

from morkit.core.errors import InputError
from morkit.data.contract import load_queries, parse_query, query_to_json, save_queries
from morkit.data.jsonl import MAX_DEPTH, output_file_problem, write_jsonl


def _write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = {
    "id": "q1",
    "question": "What is 6*7?",
    "domain": "math",
    "reference": "42",
    "source": {"dataset": "toy", "row": 3},
    "candidates": [
        {"text": "42", "agent": "a", "correct": True, "scores": {"rm": 0.7, "prm": [0.9, 0.4]}, "seed": 11},
        {"text": "41", "agent": "b", "correct": False, "meta": [1, 2]},
    ],
}


def test_round_trip_keeps_unknown_keys(tmp_path):
    src = _write_lines(tmp_path / "in.jsonl", [json.dumps(GOOD), json.dumps({"id": 7, "question": "q", "candidates": [
        {"scores": {"rm": 1}}]})])
    first = load_queries(src)
    assert first[0].extra == {"source": {"dataset": "toy", "row": 3}}
    assert first[0].candidates[0].extra == {"seed": 11}
    assert first[0].candidates[1].extra == {"meta": [1, 2]}
    assert first[1].id == "7" and first[1].candidates[0].text is None

    out = tmp_path / "out.jsonl"
    assert save_queries(out, first) == 2
    second = load_queries(out)
    assert second == first
    raw = [json.loads(line) for line in out.read_text().splitlines()]
    assert raw[0]["source"] == {"dataset": "toy", "row": 3}
    assert raw[0]["candidates"][0]["seed"] == 11
    assert raw[0]["candidates"][0]["scores"] == {"rm": 0.7, "prm": [0.9, 0.4]}
    assert raw[0]["candidates"][1]["meta"] == [1, 2]
    assert "text" not in raw[1]["candidates"][0]


def test_prm_steps_become_tuples():
    q = parse_query(GOOD)
    assert q.candidates[0].scores["prm"] == (0.9, 0.4)
    assert isinstance(q.candidates[0].scores["prm"], tuple)
    assert q.candidates[0].scores["rm"] == 0.7
    assert q.labelled


def test_malformed_json_names_path_and_line(tmp_path):
    path = _write_lines(tmp_path / "bad.jsonl", [json.dumps(GOOD), json.dumps({**GOOD, "id": "q2"}), "{not json"])
    with pytest.raises(InputError) as err:
        load_queries(path)
    assert str(path) in str(err.value)
    assert ":3:" in str(err.value)
    assert err.value.exit_code == 2


def test_blank_lines_are_skipped_but_counted(tmp_path):
    path = _write_lines(tmp_path / "bad.jsonl", [json.dumps(GOOD), "", "[1, 2]"])
    with pytest.raises(InputError, match=r":3: expected a JSON object"):
        load_queries(path)


def test_non_object_line(tmp_path):
    path = _write_lines(tmp_path / "bad.jsonl", [json.dumps(GOOD), '"just a string"'])
    with pytest.raises(InputError) as err:
        load_queries(path)
    assert f"{path}:2:" in str(err.value)
    assert "object" in str(err.value)


def test_missing_id(tmp_path):
    obj = dict(GOOD)
    del obj["id"]
    path = _write_lines(tmp_path / "bad.jsonl", [json.dumps(obj)])
    with pytest.raises(InputError, match=r":1: missing or invalid 'id'"):
        load_queries(path)


def test_missing_file_is_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_queries(tmp_path / "nope.jsonl")


def test_duplicate_id_names_both_lines(tmp_path):
    other = {**GOOD, "id": "q2"}
    path = _write_lines(tmp_path / "dup.jsonl", [json.dumps(GOOD), json.dumps(other), json.dumps(GOOD)])
    with pytest.raises(InputError) as err:
        load_queries(path)
    msg = str(err.value)
    assert f"{path}:3:" in msg
    assert "line 1" in msg
    assert "'q1'" in msg


def test_candidate_with_neither_text_nor_scores():
    obj = {"id": "qx", "question": "?", "candidates": [{"text": "a"}, {"agent": "x"}]}
    with pytest.raises(InputError) as err:
        parse_query(obj, path="f.jsonl", line=4)
    msg = str(err.value)
    assert "f.jsonl:4:" in msg and "'qx'" in msg and "candidate 1" in msg


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "[0.5, NaN]", "[Infinity]"])
def test_non_finite_score_names_query(tmp_path, bad):
    line = '{"id": "q-nan", "question": "?", "candidates": [{"text": "a", "scores": {"rm": %s}}]}' % bad
    path = _write_lines(tmp_path / "nan.jsonl", [json.dumps(GOOD), line])
    with pytest.raises(InputError) as err:
        load_queries(path)
    msg = str(err.value)
    assert "'q-nan'" in msg and ":2:" in msg and "finite" in msg


@pytest.mark.parametrize("value", [True, "0.5", None, []])
def test_bad_score_types_rejected(value):
    obj = {"id": "q", "question": "?", "candidates": [{"text": "a", "scores": {"rm": value}}]}
    with pytest.raises(InputError, match="'q'"):
        parse_query(obj)


@pytest.mark.parametrize(
    "patch, fragment",
    [
        ({"question": 3}, "'question'"),
        ({"candidates": {}}, "'candidates'"),
        ({"domain": 1}, "'domain'"),
        ({"candidates": ["x"]}, "candidate must be an object"),
        ({"candidates": [{"text": 5}]}, "'text'"),
        ({"candidates": [{"text": "a", "correct": "yes"}]}, "'correct'"),
        ({"candidates": [{"text": "a", "scores": [1]}]}, "'scores'"),
    ],
)
def test_field_type_errors(patch, fragment):
    with pytest.raises(InputError) as err:
        parse_query({**GOOD, **patch})
    assert fragment in str(err.value)
    assert "'q1'" in str(err.value)


def test_query_to_json_field_order_and_omissions():
    q = parse_query({"id": "a", "question": "?", "candidates": [{"text": "t"}]})
    assert query_to_json(q) == {"id": "a", "question": "?", "candidates": [{"text": "t"}]}


def _records_then_fail(n):
    for i in range(n):
        yield {"i": i}
    raise RuntimeError("boom")


@pytest.fixture
def out_dir(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    return d


def test_write_jsonl_atomic_new_file(out_dir):
    tmp_path = out_dir
    target = tmp_path / "out.jsonl"
    with pytest.raises(RuntimeError, match="boom"):
        write_jsonl(target, _records_then_fail(5))
    assert not target.exists()
    assert os.listdir(tmp_path) == []


def test_write_jsonl_atomic_keeps_old_content(out_dir):
    tmp_path = out_dir
    target = tmp_path / "out.jsonl"
    assert write_jsonl(target, [{"old": 1}]) == 1
    with pytest.raises(RuntimeError):
        write_jsonl(target, _records_then_fail(3))
    assert target.read_text() == '{"old": 1}\n'
    assert os.listdir(tmp_path) == ["out.jsonl"]


def test_write_jsonl_creates_parent_and_counts(tmp_path):
    target = tmp_path / "a" / "b" / "out.jsonl"
    assert write_jsonl(target, ({"i": i, "s": "é"} for i in range(3))) == 3
    lines = target.read_text(encoding="utf-8").splitlines()
    assert [json.loads(x)["i"] for x in lines] == [0, 1, 2]
    assert "é" in lines[0]
    assert os.listdir(target.parent) == ["out.jsonl"]


def test_save_queries_failure_leaves_no_file(out_dir):
    tmp_path = out_dir
    q = parse_query(GOOD)

    def queries():
        yield q
        raise ValueError("mid-way")

    target = tmp_path / "q.jsonl"
    with pytest.raises(ValueError):
        save_queries(target, queries())
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("value", [[], 0, False, ""])
def test_falsy_non_object_scores_rejected(value):
    obj = {"id": "q", "question": "?", "candidates": [{"text": "a", "scores": value}]}
    with pytest.raises(InputError, match="'scores' must be an object"):
        parse_query(obj)


# Values JSON or UTF-8 cannot hold, or Python cannot read: one InputError naming the file and line (and the id).

FIRST = json.dumps(GOOD)


@pytest.mark.parametrize("second, fragments", [
    (b'{"id": "q2", "question": "\xff?", "candidates": []}', ["not valid UTF-8", "byte 0xff"]),
    (b'{"id": "q2", "question": "\xed\xa0\x80", "candidates": []}', ["not valid UTF-8"]),  # an encoded surrogate
    (b'{"id": "q2", "question": "\\ud800", "candidates": []}', ["'q2'", "lone surrogate"]),
    (b'{"id": "q2", "question": "?", "candidates": [], "x": {"\\udfff": 1}}', ["'q2'", "lone surrogate"]),
    (b"[" * 200_000, [f"nested more than {MAX_DEPTH} levels"]),
    (b'{"id": "q2", "question": "?", "candidates": [], "x": ' + b"[" * 150 + b"]" * 150 + b"}",
     ["'q2'", "nested more than"]),
    (b'{"id": "q2", "question": "?", "candidates": [], "x": NaN}', ["'q2'", "NaN is not a finite number"]),
    (b'{"id": "q2", "question": "?", "candidates": [], "x": -Infinity}', ["'q2'", "-Infinity"]),
    (b'{"id": "q2", "question": "?", "candidates": [], "x": 1e999}', ["'q2'", "1e999 is not a finite number"]),
    (b'{"id": "q2", "question": "?", "candidates": [], "x": ' + b"1" * 5000 + b"}", ["more than 4300 digits"]),
    (b'{"id": "q2", "question": "?", "candidates": [{"scores": {"rm": ' + b"9" * 400 + b"}}]}",
     ["'q2'", "candidate 0", "finite", "an integer of 400 digits"]),
])
def test_unreadable_values_name_file_line_and_id(tmp_path, second, fragments):
    path = tmp_path / "in.jsonl"
    path.write_bytes(FIRST.encode() + b"\n" + second + b"\n")
    with pytest.raises(InputError) as err:
        load_queries(path)
    message = str(err.value)
    assert message.startswith(f"{path}:2: ") and "\n" not in message and len(message) < 300, message
    for fragment in fragments:
        assert fragment in message, message


def test_valid_escapes_and_numbers_still_load(tmp_path):
    """A surrogate pair is one character, a big integer is kept exactly, 1e308 is finite."""
    line = ('{"id": "q", "question": "\\ud83d\\ude00 \\\\ud800", "big": %s, "candidates": '
            '[{"text": "a", "scores": {"rm": 1e308, "prm": [-1e308, 2]}}]}') % ("7" * 400)
    path = _write_lines(tmp_path / "in.jsonl", [line])
    [query] = load_queries(path)
    assert query.question == "\U0001F600 \\ud800" and query.extra["big"] == int("7" * 400)
    assert query.candidates[0].scores == {"rm": 1e308, "prm": (-1e308, 2.0)}
    out = tmp_path / "out.jsonl"
    save_queries(out, [query])
    assert load_queries(out) == [query]


def test_crlf_lines_and_gzip_bad_bytes_name_the_line(tmp_path):
    import gzip

    path = tmp_path / "in.jsonl"
    path.write_bytes(FIRST.encode() + b"\r\n" + json.dumps({**GOOD, "id": "q2"}).encode() + b"\r\n")
    assert [q.id for q in load_queries(path)] == ["q1", "q2"]
    packed = tmp_path / "in.jsonl.gz"
    packed.write_bytes(gzip.compress(FIRST.encode() + b"\n\n\xc3\x28\n"))
    with pytest.raises(InputError, match=rf"^{packed}:3: not valid UTF-8"):
        load_queries(packed)


@pytest.mark.parametrize("record, fragment", [
    ({"id": "a", "x": float("nan")}, "NaN or an infinity"),
    ({"id": "a", "x": [float("-inf")]}, "NaN or an infinity"),
    ({"id": "a", "x": "\ud800"}, "lone surrogate"),
])
def test_write_jsonl_refuses_what_json_or_utf8_cannot_hold(out_dir, record, fragment):
    target = out_dir / "out.jsonl"
    with pytest.raises(InputError) as err:
        write_jsonl(target, [{"id": "ok"}, record])
    assert str(err.value).startswith(f"{target}: record 2 (query 'a') holds") and fragment in str(err.value)
    assert os.listdir(out_dir) == []


def test_save_queries_refuses_non_finite_scores_made_in_python(out_dir):
    from morkit.core.types import Candidate, Query

    with pytest.raises(InputError, match="record 1 .query 'q'. holds NaN"):
        save_queries(out_dir / "q.jsonl", [Query("q", "?", (Candidate("a", scores={"rm": float("nan")}),))])
    assert os.listdir(out_dir) == []


def test_write_jsonl_target_problems_are_input_errors(out_dir):
    (out_dir / "folder").mkdir()
    (out_dir / "file").write_text("x")
    with pytest.raises(InputError, match="folder: is a directory"):
        write_jsonl(out_dir / "folder", [{"a": 1}])
    with pytest.raises(InputError, match=r"cannot be created: .*file is a file"):
        write_jsonl(out_dir / "file" / "deeper" / "o.jsonl", [{"a": 1}])
    assert sorted(os.listdir(out_dir)) == ["file", "folder"] and os.listdir(out_dir / "folder") == []
    assert output_file_problem(out_dir / "new" / "o.jsonl") is None
