"""The embedding cache: vectors are kept per (embedder, text) as each chunk finishes, so an interrupted build
(Ctrl-C, or an embedder that fails after some chunks) embeds only the rest on a rerun, and the final vectors
are identical to one uninterrupted run. The real MiniLM, with CHUNK made small so a few texts span chunks.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from morkit.cli import main
from morkit.core.errors import InputError
from morkit.question_pool import embed
from morkit.question_pool.embed_cache import (
    CachedEmbedder,
    EmbeddingCache,
    cache_path,
    embedder_key,
)
from morkit.question_pool.pool import load_pool

TEXTS = [f"Tom has {n} apples and eats {n % 3}. How many are left?" for n in range(11)]


class Interrupted(BaseException):
    """Stands for Ctrl-C (not an Exception: nothing on the way catches it)."""


class Counting:
    """The real embedder, counting the texts it embeds, raising `error` after `stop` chunks."""

    def __init__(self, inner, stop=None, error=Interrupted):
        self.inner, self.stop, self.error, self.texts, self.chunks = inner, stop, error, 0, 0
        self.name, self.dim = inner.name, inner.dim

    def encode_chunks(self, texts):
        for positions, vectors in self.inner.encode_chunks(texts):
            if self.stop is not None and self.chunks == self.stop:
                raise self.error("embedder died")
            self.chunks += 1
            self.texts += len(positions)
            yield positions, vectors


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(embed, "CHUNK", 3)
    return 3


def test_cached_embedder_equals_encode_and_embeds_each_distinct_text_once(embedder, small_chunks, tmp_path):
    reference = embedder.encode(TEXTS)
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        counting = Counting(embedder)
        out = CachedEmbedder(counting, cache).encode(TEXTS + TEXTS[:2])  # repeats are embedded once
        assert np.array_equal(out[: len(TEXTS)], reference) and np.array_equal(out[len(TEXTS):], reference[:2])
        assert counting.texts == len(TEXTS) == len(cache)
        again = Counting(embedder)
        assert np.array_equal(CachedEmbedder(again, cache).encode(TEXTS[::-1]), reference[::-1])
        assert again.texts == 0
    assert CachedEmbedder(embedder).encode([]).shape == (0, embedder.dim)


@pytest.mark.parametrize("error", [Interrupted, RuntimeError])
def test_an_interrupted_run_resumes_embedding_only_the_rest(embedder, small_chunks, tmp_path, error):
    reference = embedder.encode(TEXTS)  # one uninterrupted run
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        dying = Counting(embedder, stop=2, error=error)
        with pytest.raises(error, match="embedder died"):
            CachedEmbedder(dying, cache).encode(TEXTS)
        assert len(cache) == dying.texts == 2 * small_chunks  # every finished chunk was kept
        rest = Counting(embedder)
        resumed = CachedEmbedder(rest, cache).encode(TEXTS)
    assert rest.texts == len(TEXTS) - 2 * small_chunks
    assert np.array_equal(resumed, reference)


def test_the_key_is_the_embedder_and_a_local_model_changed_in_place_is_a_new_one(tmp_path):
    assert embedder_key("all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    first = embedder_key(str(model))
    assert first.startswith(f"{model}@") and embedder_key(str(model)) == first
    (model / "config.json").write_text('{"retrained": true}')
    assert embedder_key(str(model)) != first
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        cache.put_many("a", ["h"], np.ones((1, 4), dtype=np.float32))
        assert cache.get_many("b", ["h"]) == [None]
        assert np.array_equal(cache.get_many("a", ["h", "x"])[0], np.ones(4))


def test_a_path_that_cannot_hold_the_cache_is_an_error_naming_it(tmp_path):
    with pytest.raises(InputError, match="is a directory; the embedding cache"):
        EmbeddingCache(tmp_path)
    (tmp_path / "not.sqlite").write_text("hello")
    with pytest.raises(InputError, match="not.sqlite: is not a SQLite embedding cache"):
        EmbeddingCache(tmp_path / "not.sqlite")
    assert cache_path(tmp_path / "scores.sqlite") == tmp_path / "embeddings.sqlite"


def _pool_input(path, count=7):
    with open(path, "w") as out:
        for i in range(count):
            candidates = [{"text": f"answer {j}", "correct": j == i % 2, "scores": {"rm-a": float((i + j) % 3)}}
                          for j in range(3)]
            out.write(json.dumps({"id": f"v{i}", "question": TEXTS[i], "candidates": candidates}) + "\n")
    return path


def test_pool_build_killed_while_embedding_resumes_from_the_cache(embedder, small_chunks, tmp_path, monkeypatch):
    """`pool build` interrupted after two chunks exits 130; the rerun embeds only the rest and its pool holds the
    same vectors as a build that was never interrupted."""
    source = _pool_input(tmp_path / "val.jsonl")
    whole = tmp_path / "whole"
    assert main(["pool", "build", str(source), "-o", str(whole), "--device", "cpu", "-q", "--no-cache"]) == 0
    calls = []
    real = embed.SentenceEmbedder.embed_chunk

    def dies_on_third(self, texts, **kw):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(len(texts))
        return real(self, texts, **kw)

    args = ["pool", "build", str(source), "-o", str(tmp_path / "pool"), "--device", "cpu", "-q",
            "--cache", str(tmp_path / "cache" / "scores.sqlite")]
    monkeypatch.setattr(embed.SentenceEmbedder, "embed_chunk", dies_on_third)
    assert main(args) == 130
    with EmbeddingCache(tmp_path / "cache" / "embeddings.sqlite") as cache:
        assert len(cache) == sum(calls) == 2 * small_chunks
    calls.clear()
    monkeypatch.setattr(embed.SentenceEmbedder, "embed_chunk",
                        lambda self, texts, **kw: calls.append(len(texts)) or real(self, texts, **kw))
    assert main(args) == 0
    assert sum(calls) == 7 - 2 * small_chunks
    assert np.array_equal(load_pool(tmp_path / "pool").embeddings, load_pool(whole).embeddings)


def test_embedder_actor_flags_need_ray(tmp_path, capsys):
    source = _pool_input(tmp_path / "val.jsonl", 3)
    assert main(["pool", "build", str(source), "-o", str(tmp_path / "p"), "--embed-actors", "2", "-q"]) == 2
    assert "--embed-actors applies only with --ray" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["pool", "build", str(source), "-o", str(tmp_path / "p"), "--ray", "auto", "--embed-gpus", "-1"])
    assert exit_.value.code == 2 and "--embed-gpus: must be a finite number >= 0" in capsys.readouterr().err
