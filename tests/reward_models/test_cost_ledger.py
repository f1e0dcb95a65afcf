"""Measured seconds per pair (morkit.reward_models.timing): scoring runs record what the pairs they computed took, by
RM, placement and device, in one JSON ledger in morkit's cache folder; cache hits are not measured, a run with the
score cache off records nothing, an unwritable ledger only warns, two processes may record at once, and `morkit rms
NAME` shows the measurements."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest

from morkit.cli.main import main
from morkit.core.types import Candidate, Query
from morkit.reward_models.cost import cost_table, measured
from morkit.reward_models.options import ScoringOptions
from morkit.reward_models.session import ScoringSession
from morkit.reward_models.timing import LEDGER_NAME, Meter, ledger_path, read_ledger, record


def _queries() -> list[Query]:
    return [Query("q1", "What is 2+2?", (Candidate(text="4"), Candidate(text="It is five, I think.")), domain="math"),
            Query("q2", "Name a prime.", (Candidate(text="7"), Candidate(text="The answer is 9.")), domain="math"),
            Query("q3", "What is 3*3?", (Candidate(text="9"), Candidate(text="9"), Candidate(text="6")),
                  domain="math")]


def _score(rms: list[str], queries: list[Query], **options) -> list[Query]:
    with ScoringSession(ScoringOptions.from_flags(device="cpu", **options)) as session:
        return session.score(queries, rms)


def test_the_ledger_lives_in_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MORKIT_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert ledger_path() == tmp_path / "elsewhere" / LEDGER_NAME
    assert read_ledger() == [] and measured("minilm-probe") == []


def test_a_real_minilm_probe_run_is_measured_and_cache_hits_are_not(minilm, capsys):
    queries = _queries()
    _score(["minilm-probe"], queries)  # the default score cache, in this test's cache folder
    first, = measured("minilm-probe")
    assert (first.placement, first.device, first.pairs) == ("transformers", "cpu", 6)  # 6 distinct pairs
    assert 0 < first.seconds_per_pair < 5 and first.cpu_seconds_per_pair > 0 and first.updated
    _score(["minilm-probe"], queries)  # every pair a cache hit: nothing computed, nothing measured
    assert measured("minilm-probe") == [first]
    more = [Query("q4", "What is 1+1?", (Candidate(text="2"), Candidate(text="3")))]
    _score(["minilm-probe"], more, cache=None)  # the score cache off: nothing is recorded either
    assert measured("minilm-probe") == [first]
    _score(["minilm-probe"], more)  # two more computed pairs: the running mean is over 8
    again, = measured("minilm-probe")
    assert again.pairs == 8
    assert cost_table(["minilm-probe"], unit="seconds").per_candidate["minilm-probe"] == again.seconds_per_pair

    assert main(["rms", "minilm-probe"]) == 0
    out = capsys.readouterr().out
    assert "measured          transformers on cpu: " in out and "over 8 pairs" in out
    assert "45.4 MFLOP/token: 23.3 GFLOP-equivalents per candidate" in out
    assert "22,713,216 parameters in its packaged model.safetensors" in out
    assert main(["rms", "minilm-probe", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["measured"][0]["pairs"] == 8 and shown["measured"][0]["placement"] == "transformers"
    assert shown["cost"]["active_params"] == 22_713_216 and shown["cost"]["describe"] == "45.4 MFLOP/token"
    assert shown["cost"]["gflop_per_candidate"] == pytest.approx(2 * 22_713_216 * 512 / 1e9)


def test_a_rule_is_measured_on_python_with_its_cpu_seconds(capsys):
    _score(["math-consensus"], _queries())
    rule, = measured("math-consensus")
    assert (rule.placement, rule.device, rule.pairs) == ("python", "cpu", 7)
    assert rule.cpu_seconds_per_pair >= 0 and rule.seconds_per_pair > 0
    assert main(["rms", "math-consensus"]) == 0
    assert "measured          python on cpu: " in capsys.readouterr().out


def test_tables_and_bare_clients_are_not_measured():
    scored = [Query("q", "x", (Candidate(text="a", scores={"my-table": 0.5}),))]
    _score(["my-table"], scored)
    assert read_ledger() == []
    assert main(["rms", "remote"]) == 0  # the bare client's name does not say which model ran


def test_an_unwritable_ledger_only_warns(tmp_path, monkeypatch, caplog):
    (ledger_path()).mkdir(parents=True)  # a folder where the file should be
    with caplog.at_level("WARNING"):
        scored = _score(["math-consensus"], _queries())
    assert [c.scores["math-consensus"] for c in scored[2].candidates] == pytest.approx([2 / 3, 2 / 3, 1 / 3])
    assert "could not record math-consensus's seconds per pair" in caplog.text
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MORKIT_CACHE_DIR", str(blocker))  # the cache folder is a file: nothing can be written
    caplog.clear()
    with caplog.at_level("WARNING"):
        _score(["math-consensus"], _queries(), cache=str(tmp_path / "scores.sqlite"))
    assert "could not record math-consensus's seconds per pair" in caplog.text
    assert measured("math-consensus") == []


def test_a_malformed_ledger_warns_and_is_started_afresh(caplog):
    ledger_path().write_text("{not json")
    with caplog.at_level("WARNING"):
        assert measured("math-consensus") == []
        _score(["math-consensus"], _queries())
    assert "not an RM timing ledger" in caplog.text
    assert measured("math-consensus")[0].pairs == 7


def _record_many(path: str, times: int) -> None:
    for _ in range(times):
        meter = Meter()
        meter.add(0.01, 0.01, 1)
        record("math-consensus", "python", "cpu", meter, path=path)


def test_two_processes_recording_at_once_lose_nothing(tmp_path):
    path = tmp_path / "shared" / LEDGER_NAME
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_record_many, args=(str(path), 40)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [w.exitcode for w in workers] == [0, 0]
    only, = measured("math-consensus", path=path)
    assert only.pairs == 80 and only.seconds_per_pair == pytest.approx(0.01)
    assert sorted(os.listdir(path.parent)) == [LEDGER_NAME, LEDGER_NAME + ".lock"]  # no temporary file left


def test_a_meter_times_batches_and_may_leave_the_first_out():
    closed = []

    def batches():
        try:
            for part in ([("q", "a")], [("q", "b"), ("q", "c")], [("q", "d")]):
                yield part, [0.0] * len(part)
        finally:
            closed.append(True)

    meter = Meter()
    assert [len(p) for p, _ in meter.timed(batches())] == [1, 2, 1] and meter.pairs == 4 and closed
    meter, closed[:] = Meter(), []
    stream = meter.timed(batches(), skip_first=True)
    next(stream), next(stream)
    stream.close()  # closing the timed stream closes the RM's at once (a Ray run stops)
    assert meter.pairs == 2 and closed == [True]
    with pytest.raises(ZeroDivisionError):
        with meter.timing(5):
            1 / 0
    assert meter.pairs == 2  # a block that raised is not counted
