"""Scoring on a Ray cluster: one local Ray (127.0.0.1, 2 CPUs) for the module, the real minilm-probe RM.

Ray output equals single-process output (API, `morkit score --ray`, `pool build --ray`); an actor that
dies mid-run loses no batch and duplicates none; an actor killed for good, or raising a morkit error, fails the
run in one line and its actors are gone at once, so a retry that needs every CPU runs; a driver killed mid-run
resumes from the score cache;
an address where nothing listens is a one-line error naming it; a batch from a replica that computes under
another cache key than the driver's is refused before it is cached.
"""

from __future__ import annotations

import functools
import os
import socket
import sys

import pytest
from fakes.ray_cluster import FailingReplica, alive, seconds_until_free

from morkit.reward_models.cache import ScoreCache

pytestmark = pytest.mark.slow

RM = "minilm-probe"
CHUNK = 4


class DriverKilled(BaseException):
    """Stands for the driver process dying (not an Exception: nothing on the way catches it)."""


class DiesOnce:
    """minilm-probe that kills its own Ray worker process (os._exit) on its first batch while `marker` is
    absent; shipped to the actors by value."""

    def __init__(self, marker: str):
        from morkit.reward_models.options import ScoringOptions
        from morkit.reward_models.catalog import resolve_rm

        self.marker = marker
        self.rm = resolve_rm(RM, ScoringOptions()).load()

    def score(self, pairs):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return self.rm.score(pairs)


@pytest.fixture(scope="module")
def ray_local(ray_session):
    """The session's local Ray (tests/conftest.py), this module's classes shipped to the actors by value."""
    import fakes.ray_cluster

    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray_session.cloudpickle.register_pickle_by_value(fakes.ray_cluster)  # FailingReplica
    yield ray_session
    ray_session.cloudpickle.unregister_pickle_by_value(fakes.ray_cluster)
    ray_session.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def queries(data_dir):
    from morkit.data.datasets import gsm8k_model_solutions

    return gsm8k_model_solutions(data_dir)[700:704]


@pytest.fixture(scope="module")
def local_scores(queries):
    """Single-process scores of every candidate, in order (the reference)."""
    import morkit

    return _values(morkit.score(queries, [RM], chunk=CHUNK))


def _values(queries):
    return [c.scores[RM] for q in queries for c in q.candidates]


def same_scores(got, expected):
    """Equal to one process's scores to 1e-6: an actor that holds one CPU runs torch on one thread, whose kernels
    sum in another order than two threads do (about 1e-7 apart on some CPUs), as in any process."""
    return got == pytest.approx(expected, abs=1e-6)


def _pairs(queries):
    return list(dict.fromkeys((q.question, c.text) for q in queries for c in q.candidates))


class CountingCache(ScoreCache):
    """A ScoreCache that records every pair written, and raises DriverKilled after `die_after` batches."""

    def __init__(self, path, die_after=None):
        super().__init__(path)
        self.written, self.batches, self.die_after = [], 0, die_after

    def put_many(self, rm, pairs, scores):
        pairs = list(pairs)
        super().put_many(rm, pairs, scores)
        self.written.extend(pairs)
        self.batches += 1
        if self.batches == self.die_after:
            raise DriverKilled


def test_api_and_cli_on_ray_equal_single_process(ray_local, queries, local_scores, tmp_path):
    import morkit
    from morkit.cli.main import main
    from morkit.reward_models.catalog import resolve_rm
    from morkit.reward_models.options import ScoringOptions

    assert _values(morkit.score(queries, [RM], ray="auto", chunk=CHUNK)) == local_scores

    morkit.save_queries(tmp_path / "in.jsonl", queries)
    assert main(["score", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"), "--rm", RM, "-q",
                 "--chunk", str(CHUNK), "--cache", str(tmp_path / "score.sqlite"), "--ray"]) == 0
    assert _values(morkit.load_queries(tmp_path / "out.jsonl")) == local_scores

    # pool build: the scores it computed on Ray are the ones in its cache, under the single-process key
    assert main(["pool", "build", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "pool"), "--rm", RM, "-q",
                 "--chunk", str(CHUNK), "--cache", str(tmp_path / "pool.sqlite"), "--ray", "--ray-workers", "2"]) == 0
    pairs = _pairs(queries)
    by_pair = dict(zip(((q.question, c.text) for q in queries for c in q.candidates), local_scores))
    with ScoreCache(tmp_path / "pool.sqlite") as cache:
        cached = cache.get_many(resolve_rm(RM, ScoringOptions()).cache_key, pairs)
    assert same_scores([s.value for s in cached], [by_pair[p] for p in pairs])


def test_killed_actor_loses_no_batch_and_duplicates_none(ray_local, queries, local_scores, tmp_path):
    import morkit
    from morkit.reward_models.options import ScoringOptions
    from morkit.reward_models.catalog import resolve_rm

    marker = tmp_path / "died"
    rm = resolve_rm(RM, ScoringOptions.from_flags(ray="auto", chunk=CHUNK, ray_workers=2))
    rm.factory = functools.partial(DiesOnce, str(marker))  # each actor's replica dies once
    cache = CountingCache(tmp_path / "score.sqlite")
    try:
        scored = morkit.score(queries, [rm], cache=cache, chunk=CHUNK)
    finally:
        cache.close()
    assert marker.exists()  # an actor process did die
    assert sorted(cache.written) == sorted(_pairs(queries))  # every pair written once: none lost, none twice
    assert same_scores(_values(scored), local_scores)


def test_a_failed_run_is_one_line_its_actors_are_gone_at_once_and_a_retry_runs(ray_local, queries, tmp_path):
    """Two actors of one CPU each: one killed for good (or raising a morkit error) fails the run in one line, and
    the other is killed with it, at once; a retry with one actor of both CPUs then runs (it waited forever while a
    failed run's actors lived until garbage collection)."""
    from morkit.core.errors import InputError, ScoreError
    from morkit.reward_models.catalog import resolve_rm
    from morkit.reward_models.options import ScoringOptions

    pairs = _pairs(queries)
    for how, error, line in (
            ("kill", ScoreError, (rf"^reward model '{RM}' failed on Ray: The actor died unexpectedly before "
                                  r"finishing this task: the actor is dead because it was killed by `ray.kill`$")),
            ("input", InputError, r"^query 'q1': no tests$")):
        rm = resolve_rm(RM, ScoringOptions.from_flags(ray="auto", chunk=CHUNK, ray_workers=2))
        rm.factory = functools.partial(FailingReplica, str(tmp_path / how), how)
        with pytest.raises(error, match=line) as failed:
            rm.score(pairs)
        assert type(failed.value) is error
        freed_s = seconds_until_free(ray_local, rm.last_run.names, wait_s=5.0)
        assert freed_s is not None, f"{how}: actors {alive(ray_local, rm.last_run.names)} alive or CPUs busy after 5 s"
        print(f"{how}: {len(rm.last_run.names)} actors killed in {rm.last_run.release_s:.3f}s, "
              f"CPUs free {freed_s:.2f}s later")
    retry = resolve_rm(RM, ScoringOptions.from_flags(ray="auto", chunk=CHUNK, ray_workers=1))
    retry.factory = functools.partial(FailingReplica, str(tmp_path / "never"), None)
    assert [s.value for s in retry.score(pairs)] == [float(len(answer)) for _, answer in pairs]
    assert seconds_until_free(ray_local, retry.last_run.names) is not None  # a finished run lets its actors go too


def test_killed_driver_resumes_from_the_cache(ray_local, queries, local_scores, tmp_path):
    import morkit
    from morkit.reward_models.options import ScoringOptions
    from morkit.reward_models.catalog import resolve_rm

    total = len(_pairs(queries))
    first = resolve_rm(RM, ScoringOptions.from_flags(ray="auto", chunk=CHUNK, ray_workers=1))
    cache = CountingCache(tmp_path / "score.sqlite", die_after=2)
    with pytest.raises(DriverKilled):
        morkit.score(queries, [first], cache=cache, chunk=CHUNK)
    cache.close()
    stored = cache.written
    assert 0 < len(stored) < total

    again = resolve_rm(RM, ScoringOptions.from_flags(ray="auto", chunk=CHUNK))
    cache = CountingCache(tmp_path / "score.sqlite")
    try:
        scored = morkit.score(queries, [again], cache=cache, chunk=CHUNK)
    finally:
        cache.close()
    assert again.pairs_sent == total - len(stored)  # the batches stored before the kill were not scored again
    assert set(cache.written).isdisjoint(stored) and len(cache.written) + len(stored) == total
    assert same_scores(_values(scored), local_scores)


def test_a_replica_computing_under_another_key_caches_nothing(ray_local, queries, tmp_path):
    import morkit
    from morkit.core.errors import ScoreError
    from morkit.reward_models.catalog import resolve_rm
    from morkit.reward_models.options import ScoringOptions

    rm = resolve_rm(RM, ScoringOptions.from_flags(ray="auto", chunk=CHUNK, ray_workers=1))
    own = rm.cache_key  # as an actor of this CPU cluster works it out: a CPU run's key
    assert own == resolve_rm(RM, ScoringOptions(device="cpu")).cache_key
    rm.__dict__["cache_key"] = own.replace("dtype=float32", "dtype=bfloat16")  # keyed as another node would be
    cache = CountingCache(tmp_path / "score.sqlite")
    try:
        with pytest.raises(ScoreError, match=r"a Ray replica computes under .*dtype=float32.*, not under .*bfloat16"):
            morkit.score(queries, [rm], cache=cache, chunk=CHUNK)
    finally:
        cache.close()
    assert cache.written == []  # refused before any of its scores was cached


KEY_NEUTRAL = {"progress": True, "cache": "elsewhere.sqlite", "chunk": 2, "batch_size": 4, "ray_workers": 2,
               "check_fit": False}


@pytest.mark.parametrize("name", [RM, "qwen2.5-math-prm-7b", "code-tests"])
def test_replicas_key_as_this_process_would_and_no_neutral_option_enters_it(ray_local, name):
    from morkit.reward_models.catalog import resolve_rm
    from morkit.reward_models.options import SCORE_NEUTRAL, ScoringOptions

    def key(**flags):
        return resolve_rm(name, ScoringOptions.from_flags(device="cpu", **flags)).cache_key

    assert set(KEY_NEUTRAL) == set(SCORE_NEUTRAL)
    base = key(ray="auto")
    assert base == key()  # CPU actors compute as this process would (moved here from test_cache_identity.py)
    for flag, value in KEY_NEUTRAL.items():
        assert key(ray="auto", **{flag: value}) == base, flag


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_second_cluster_address_is_refused_not_ignored(ray_local, queries):
    import morkit
    from morkit.core.errors import InputError
    from morkit.reward_models.backends.ray import connect

    assert connect(ray_local.get_runtime_context().gcs_address) is ray_local  # the cluster it is attached to
    with socket.socket() as other:  # something listens there, but it is not this process's cluster
        other.bind(("127.0.0.1", 0))
        other.listen()
        address = f"127.0.0.1:{other.getsockname()[1]}"
        with pytest.raises(InputError, match=f"--ray {address}: this process is already attached"):
            morkit.score(queries, [RM], ray=address)


def test_unreachable_cluster_is_one_line_naming_it(ray_local, queries, tmp_path, capsys):
    import morkit
    from morkit.cli.main import main
    from morkit.core.errors import UnavailableError

    address = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(UnavailableError, match=f"Ray cluster at {address}"):
        morkit.score(queries, [RM], ray=address)
    morkit.save_queries(tmp_path / "in.jsonl", queries)
    code = main(["score", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"), "--rm", RM, "-q",
                 "--no-cache", "--ray", f"ray://{address}"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1
    assert err.startswith("morkit: error:") and f"ray://{address}" in err
    assert not (tmp_path / "out.jsonl").exists()
