"""`morkit pool upgrade`: pools of formats 1 and 2 (questions.jsonl) open only once rewritten in format 3; their
questions.jsonl is checked as the old reader checked it; a failure leaves the old pool as it was; a format-3 pool
loses only the header slots nothing reads now, and one without them is left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes.embedder import HashEmbedder
from question_pool.legacy_pools import to_legacy

from morkit.cli import main
from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.data import staging
from morkit.question_pool.pool import build_pool, load_pool
from morkit.services.pool_upgrade import upgrade_pool


def _queries(n=4):
    return [Query(f"q{i}", f"question q{i}", tuple(
        Candidate(text=f"answer {j}", correct=ok, scores={"a": a, "b": b})
        for j, (ok, a, b) in enumerate(zip([True, False, i % 2 == 0], [3.0 + i, 1.0, 2.0], [0.1 * i, 0.9, 0.5]))),
        domain="math") for i in range(n)]


@pytest.fixture
def old_pool(tmp_path):
    build_pool(_queries(), HashEmbedder()).save(tmp_path / "pool")
    return to_legacy(tmp_path / "pool")


def _contents(root: Path) -> list[tuple[str, bytes]]:
    return sorted((p.name, p.read_bytes()) for p in root.iterdir())


def _listing(folder: Path) -> list[str]:
    """The folder's entries, but the score cache conftest puts in every test's tmp_path."""
    return sorted(p.name for p in folder.iterdir() if p.name != "morkit-cache")


QUESTION_DAMAGE = {
    "question id a number": (None, lambda d: (d / "questions.jsonl").write_text(
        (d / "questions.jsonl").read_text().replace('"id": "q0"', '"id": 0'))),
    "n_candidates off": (None, lambda d: (d / "questions.jsonl").write_text(
        (d / "questions.jsonl").read_text().replace('"n_candidates": 3', '"n_candidates": 2', 1))),
    "a line without an id": (r"questions.jsonl:1: not a pool question", lambda d: (d / "questions.jsonl").write_text(
        '{"question": "q"}\n')),
}


@pytest.mark.parametrize("case", sorted(QUESTION_DAMAGE))
def test_a_damaged_questions_jsonl_is_a_one_line_error_naming_it_and_the_old_pool_stays(old_pool, case, capsys):
    match, damage = QUESTION_DAMAGE[case]
    damage(old_pool)
    before = _contents(old_pool)
    with pytest.raises(InputError, match=match) as caught:
        upgrade_pool(old_pool)
    assert caught.value.path == str(old_pool / "questions.jsonl"), str(caught.value)
    assert main(["pool", "upgrade", str(old_pool)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"morkit: error: {old_pool / 'questions.jsonl'}:") and err.count("\n") == 1
    assert _contents(old_pool) == before and _listing(old_pool.parent) == ["pool"]


def test_an_old_pool_does_not_open_and_says_how_to_upgrade_it(old_pool, capsys):
    assert main(["pool", "info", str(old_pool)]) == 2
    err = capsys.readouterr().err
    assert err == (f"morkit: error: {old_pool}: pool format 1, written by an older morkit: run morkit pool upgrade "
                   f"{old_pool}\n")


def test_the_cli_upgrades_in_place_and_then_has_nothing_to_do(old_pool, capsys):
    built = build_pool(_queries(), HashEmbedder())
    assert main(["pool", "upgrade", str(old_pool)]) == 0
    assert capsys.readouterr().err == f"pool {old_pool}: rewritten from format 1 in format 3\n"
    assert not (old_pool / "questions.jsonl").exists() and _listing(old_pool.parent) == ["pool"]
    pool = load_pool(old_pool)
    assert pool.questions == built.questions and pool.meta["revision"] == 1
    before = _contents(old_pool)
    assert main(["pool", "upgrade", str(old_pool)]) == 0
    assert capsys.readouterr().err == f"pool {old_pool}: already format 3; nothing to do\n"
    assert _contents(old_pool) == before
    assert main(["pool", "info", str(old_pool)]) == 0


def test_a_failed_swap_leaves_the_old_pool_as_it_was(old_pool, monkeypatch):
    before = _contents(old_pool)

    def broken(staged, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(staging, "swap_in", broken)
    with pytest.raises(InputError) as caught:
        upgrade_pool(old_pool)
    assert str(caught.value) == (f"{old_pool}: could not write the upgraded pool (No space left on device); the "
                                 "old pool is unchanged")
    assert _contents(old_pool) == before and _listing(old_pool.parent) == ["pool"]


def test_a_write_that_fails_is_a_one_line_error_naming_the_pool_not_an_internal_one(old_pool, monkeypatch, capsys):
    from morkit.question_pool import store

    before = _contents(old_pool)

    def full(path, array):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "save_array", full)
    assert main(["pool", "upgrade", str(old_pool)]) == 2
    assert capsys.readouterr().err == (f"morkit: error: {old_pool}: could not write the upgraded pool (No space left "
                                       "on device); the old pool is unchanged\n")
    assert _contents(old_pool) == before and _listing(old_pool.parent) == ["pool"]


def test_the_pool_given_as_the_current_directory_is_upgraded(old_pool, monkeypatch, capsys):
    monkeypatch.chdir(old_pool)
    assert main(["pool", "upgrade", "."]) == 0
    assert capsys.readouterr().err == "pool .: rewritten from format 1 in format 3\n"
    monkeypatch.chdir(old_pool.parent)
    assert load_pool(old_pool).questions == build_pool(_queries(), HashEmbedder()).questions
    assert _listing(old_pool.parent) == ["pool"] and not (old_pool / "questions.jsonl").exists()


def test_the_hint_quotes_a_path_the_shell_would_split(tmp_path, capsys):
    import shlex

    build_pool(_queries(), HashEmbedder()).save(tmp_path / "my pools" / "p")
    pool = to_legacy(tmp_path / "my pools" / "p")
    assert main(["pool", "info", str(pool)]) == 2
    assert capsys.readouterr().err.endswith(f"run morkit pool upgrade {shlex.quote(str(pool))}\n")
    assert shlex.quote(str(pool)) != str(pool)


def test_fewer_questions_than_array_rows_names_questions_jsonl(old_pool):
    lines = (old_pool / "questions.jsonl").read_text().splitlines(keepends=True)
    (old_pool / "questions.jsonl").write_text("".join(lines[:-1]))
    before = _contents(old_pool)
    with pytest.raises(InputError) as caught:
        upgrade_pool(old_pool)
    assert str(caught.value) == f"{old_pool / 'questions.jsonl'}: 3 questions; pool.json says the arrays hold 4"
    assert _contents(old_pool) == before


def test_a_retired_slot_of_a_format_3_pool_is_dropped_by_the_upgrade_only(tmp_path, capsys):
    pool = tmp_path / "pool"
    build_pool(_queries(), HashEmbedder()).save(pool)
    header = json.loads((pool / "pool.json").read_text())
    (pool / "pool.json").write_text(json.dumps({**header, "stacker": {"members": ["a"], "weights": [1.0]}}))
    with pytest.raises(InputError) as caught:
        load_pool(pool)
    assert str(caught.value) == (f"{pool}: pool.json keeps the retired slot 'stacker' of an older morkit: run "
                                 f"morkit pool upgrade {pool}")
    arrays = {p.name: p.read_bytes() for p in pool.iterdir() if p.name != "pool.json"}
    assert main(["pool", "upgrade", str(pool)]) == 0
    assert capsys.readouterr().err == f"pool {pool}: format 3; removed the retired slot stacker from pool.json\n"
    assert {p.name: p.read_bytes() for p in pool.iterdir() if p.name != "pool.json"} == arrays
    assert json.loads((pool / "pool.json").read_text()) == {**header, "format_version": 3}
    assert "stacker" not in load_pool(pool).meta and _listing(tmp_path) == ["pool"]
    assert main(["pool", "upgrade", str(pool)]) == 0
    assert capsys.readouterr().err == f"pool {pool}: already format 3; nothing to do\n"


def test_an_older_format_loses_its_retired_slot_with_its_questions_jsonl(old_pool, capsys):
    header = json.loads((old_pool / "pool.json").read_text())
    (old_pool / "pool.json").write_text(json.dumps({**header, "stacker": {"weights": [1.0]}}))
    assert main(["pool", "upgrade", str(old_pool)]) == 0
    assert capsys.readouterr().err == (f"pool {old_pool}: rewritten from format 1 in format 3; removed the retired "
                                       "slot stacker\n")
    assert "stacker" not in json.loads((old_pool / "pool.json").read_text())


def test_a_damaged_array_of_an_old_pool_names_the_old_pools_file(old_pool):
    (old_pool / "scores.npy").write_bytes(b"garbage")
    with pytest.raises(InputError, match="unreadable array") as caught:
        upgrade_pool(old_pool)
    assert caught.value.path == str(old_pool / "scores.npy")
    assert json.loads((old_pool / "pool.json").read_text())["format_version"] == 1


def test_what_is_not_a_pool_of_an_older_format_is_refused(tmp_path):
    with pytest.raises(InputError, match="no such pool directory"):
        upgrade_pool(tmp_path / "nope")
    build_pool(_queries(), HashEmbedder()).save(tmp_path / "p")
    header = json.loads((tmp_path / "p" / "pool.json").read_text())
    (tmp_path / "p" / "pool.json").write_text(json.dumps({**header, "format_version": 99}))
    with pytest.raises(InputError, match="format version 99"):
        upgrade_pool(tmp_path / "p")
