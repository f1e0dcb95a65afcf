"""Embedding on Ray: one local Ray (127.0.0.1, 2 CPUs) for the session, CPU actors with the real MiniLM.

Vectors equal single-process ones (max |diff| <= 1e-6), in order, each question once, with 1 and 2 actors, through
the API and `pool build/add --ray`; a build's vectors stream from one actor pool, spilled to disk, and the driver
never loads the model; a killed driver or a failing actor keeps every finished chunk in the embedding cache and the
rerun embeds only the rest; a failing actor's run frees its actors at once, so a retry needing every CPU runs; a
missing Ray or an unreachable address is one line naming it.
"""

from __future__ import annotations

import json
import socket
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from fakes.ray_cluster import seconds_until_free

from morkit.cli import main
from morkit.core.errors import InputError, UnavailableError
from morkit.question_pool import embed, spill
from morkit.question_pool.embed_cache import CachedEmbedder, EmbeddingCache
from morkit.question_pool.embed_ray import (
    RayEmbedder,
    RayEmbedOptions,
    _EmbedActor,
    actor_resources,
)
from morkit.question_pool.pool import load_pool

TEXTS = [f"A shop sells {n} pens at {n % 7 + 1} dollars each. What do they cost in all?" for n in range(23)]
TEXTS[5] = "Write a function that reverses a linked list in place."  # lengths vary: padding differs per chunk
CHUNK = 4


class DriverKilled(BaseException):
    """Stands for the driver process dying (not an Exception: nothing on the way catches it)."""


class Poisoned(_EmbedActor):
    """An actor that fails, with a morkit error, on the chunk holding a text with POISON in it (shipped by value)."""

    def __call__(self, batch):
        if any("POISON" in text for text in batch["text"].tolist()):
            raise InputError("poisoned question")
        return super().__call__(batch)


class PoisonedRay(RayEmbedder):
    actor = Poisoned


class KilledAfterTwo(RayEmbedder):
    """The driver dies after two chunks came back."""

    def encode_chunks(self, texts):
        chunks = super().encode_chunks(texts)
        for count, chunk in enumerate(chunks):
            if count == 2:
                chunks.close()  # a dead driver's run ends with it
                raise DriverKilled
            yield chunk


@pytest.fixture(scope="module")
def ray_local(ray_session):
    """The session's local Ray (tests/conftest.py), this module's classes shipped to the actors by value."""
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray_session
    ray_session.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(embed, "CHUNK", CHUNK)
    return CHUNK


@pytest.fixture
def reference(embedder, small_chunks):
    return embedder.encode(TEXTS)


@pytest.fixture
def no_driver_model(monkeypatch):
    """Fails the test if this (the driver) process loads a sentence-transformers model: every actor loads its own.
    Ask for it after `reference`, which loads one here."""
    from morkit.runtime import models

    loads = []

    def refused(*args, **kwargs):
        loads.append(args)
        raise AssertionError("the driver loaded the embedder")

    monkeypatch.setattr(models, "sentence_transformer", refused)
    yield loads
    assert loads == []


@pytest.mark.slow
@pytest.mark.parametrize("actors", [1, 2])
def test_ray_vectors_equal_one_process_in_order(ray_local, reference, actors):
    ray_embedder = RayEmbedder(None, device="cpu", options=RayEmbedOptions(actors=actors))
    out = ray_embedder.encode(TEXTS)
    assert ray_embedder.name == "all-MiniLM-L6-v2" and ray_embedder.actors == actors
    assert out.shape == reference.shape and out.dtype == np.float32
    assert float(np.abs(out - reference).max()) <= 1e-6
    assert ray_embedder.texts_sent == len(TEXTS)


@pytest.mark.slow
def test_a_killed_driver_resumes_embedding_only_the_rest(ray_local, reference, no_driver_model, tmp_path,
                                                         monkeypatch):
    """A build's vectors (spill.embed, to disk) from one actor pool, the driver loading no model and learning the
    dimension from the first chunk; killed after two chunks, the rerun embeds only the rest, in one run."""
    monkeypatch.setattr(spill, "SPILL_BYTES", 0)  # every vector to disk as it comes
    questions = [SimpleNamespace(id=f"q{i}", question=text) for i, text in enumerate(TEXTS)]
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        killed = CachedEmbedder(KilledAfterTwo(None, device="cpu"), cache)
        with pytest.raises(DriverKilled):
            spill.embed(killed, questions)
        assert len(cache) == killed.embedded == 2 * CHUNK  # both finished chunks kept
        assert seconds_until_free(ray_local, killed.inner.last_run.names) is not None  # an abandoned run's too
        rest = RayEmbedder(None, device="cpu", options=RayEmbedOptions(actors=2))
        assert rest.dim is None  # nothing asked of any model yet
        resumed = spill.embed(CachedEmbedder(rest, cache), questions)
    assert rest.texts_sent == len(TEXTS) - 2 * CHUNK
    assert rest.runs == 1 and rest.dim == 384 and isinstance(resumed, np.memmap)
    assert float(np.abs(resumed - reference).max()) <= 1e-6


@pytest.mark.slow
def test_a_failing_actor_is_its_own_error_and_loses_no_finished_chunk(ray_local, reference, tmp_path):
    texts = TEXTS[:-1] + ["POISON " + TEXTS[-1]]
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        poisoned = PoisonedRay(None, device="cpu", options=RayEmbedOptions(actors=1))  # both CPUs
        failing = CachedEmbedder(poisoned, cache)
        with pytest.raises(InputError, match="^poisoned question$"):
            failing.encode(texts)
        freed_s = seconds_until_free(ray_local, poisoned.last_run.names, wait_s=5.0)  # killed at once, not at GC
        assert poisoned.last_run.release_s is not None and freed_s is not None
        kept = len(cache)
        assert kept == failing.embedded
        rest = RayEmbedder(None, device="cpu", options=RayEmbedOptions(actors=1))  # needs both CPUs
        out = CachedEmbedder(rest, cache).encode(texts)
    assert rest.texts_sent == len(texts) - kept
    assert float(np.abs(out[:-1] - reference[:-1]).max()) <= 1e-6


def _pool_input(path, texts):
    with open(path, "w") as out:
        for i, text in enumerate(texts):
            candidates = [{"text": f"answer {j}", "correct": j == i % 2, "scores": {"rm-a": float((i + j) % 3)}}
                          for j in range(3)]
            out.write(json.dumps({"id": f"{path.stem}{i}", "question": text, "candidates": candidates}) + "\n")
    return path


@pytest.mark.slow
def test_pool_build_and_add_on_ray_equal_one_process(ray_local, small_chunks, tmp_path, monkeypatch):
    from morkit.runtime import models

    def refused(*args, **kwargs):
        raise AssertionError("the driver loaded the embedder")

    first, more = _pool_input(tmp_path / "a.jsonl", TEXTS[:15]), _pool_input(tmp_path / "b.jsonl", TEXTS[15:])
    for name, ray in (("local", []), ("ray", ["--ray", "auto", "--embed-actors", "2", "--embed-cpus", "1"])):
        if ray:  # the driver loads no model: a load here fails the build
            monkeypatch.setattr(models, "sentence_transformer", refused)
        out = str(tmp_path / name)
        assert main(["pool", "build", str(first), "-o", out, "--device", "cpu", "-q", "--no-cache", *ray]) == 0
        assert main(["pool", "add", out, str(more), "--device", "cpu", "-q", "--no-cache", *ray]) == 0
    local, on_ray = load_pool(tmp_path / "local"), load_pool(tmp_path / "ray")
    assert on_ray.meta["embedder"] == local.meta["embedder"] and len(on_ray) == len(TEXTS)
    assert [q.id for q in on_ray.questions] == [q.id for q in local.questions]
    assert float(np.abs(on_ray.embeddings - local.embeddings).max()) <= 1e-6


def test_an_unreachable_address_is_one_line_naming_it_before_any_work(tmp_path, capsys):
    pytest.importorskip("ray")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    source = _pool_input(tmp_path / "a.jsonl", TEXTS[:3])
    assert main(["pool", "build", str(source), "-o", str(tmp_path / "p"), "-q", "--ray", f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot reach the Ray cluster at 127.0.0.1:{port}" in err
    assert not (tmp_path / "p").exists()


def test_ray_missing_is_one_line_saying_how_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as where it is not installed
    source = _pool_input(tmp_path / "a.jsonl", TEXTS[:3])
    assert main(["pool", "build", str(source), "-o", str(tmp_path / "p"), "-q", "--ray", "auto"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--ray needs Ray Data, which is not installed here: pip install" in err


def test_actor_resources_follow_the_cluster():
    gpus = {"GPU": 8.0, "CPU": 64.0, "nodes": 2.0}
    assert actor_resources(RayEmbedOptions(), gpus) == (8, {"num_gpus": 1.0, "num_cpus": 1.0})
    assert actor_resources(RayEmbedOptions(num_gpus=0.25), gpus) == (32, {"num_gpus": 0.25, "num_cpus": 1.0})
    assert actor_resources(RayEmbedOptions(), gpus, chunks=3)[0] == 3  # never more actors than chunks
    assert actor_resources(RayEmbedOptions(), gpus, device="cpu") == (2, {"num_gpus": 0.0, "num_cpus": 32.0})
    cpus = {"CPU": 2.0, "nodes": 1.0}
    assert actor_resources(RayEmbedOptions(), cpus) == (1, {"num_gpus": 0.0, "num_cpus": 2.0})
    assert actor_resources(RayEmbedOptions(actors=2), cpus) == (2, {"num_gpus": 0.0, "num_cpus": 1.0})
    with pytest.raises(UnavailableError, match="need more than the Ray cluster's 8 GPUs"):
        actor_resources(RayEmbedOptions(actors=9), gpus)
    with pytest.raises(UnavailableError, match="need more than the Ray cluster's 0 GPUs"):
        actor_resources(RayEmbedOptions(num_gpus=1), cpus)
    with pytest.raises(InputError, match="embed_actors must be"):
        RayEmbedOptions(actors=0)
