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
from morkit.reward_models.cache import text_hash

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


def _damage(cache_file, vector):
    """Every cached vector replaced by `vector`'s bytes (a damaged or hand-edited cache)."""
    import sqlite3

    db = sqlite3.connect(str(cache_file))
    with db:
        db.execute("UPDATE vectors SET vector = ?", (vector,))
    db.close()


@pytest.mark.parametrize("what, blob", [
    ("vectors of another size", np.ones(3, dtype="<f4").tobytes()),
    ("non-finite vectors", np.full(384, np.nan, dtype="<f4").tobytes()),
    ("bytes that are no float32 vector", b"\x01\x02\x03\x04\x05"),
], ids=["another size", "non-finite", "not float32"])
def test_a_damaged_cache_is_a_miss_and_never_a_pool(embedder, tmp_path, capsys, what, blob):
    """A cached vector must have the embedder's dimension and finite values, else it is embedded again: the pool
    swapped in over the good one is the good one again, and selection on it works."""
    source = _pool_input(tmp_path / "val.jsonl")
    args = ["pool", "build", str(source), "-o", str(tmp_path / "pool"), "--device", "cpu", "-q",
            "--cache", str(tmp_path / "cache" / "scores.sqlite")]
    assert main(args) == 0
    good = load_pool(tmp_path / "pool").embeddings.copy()
    _damage(tmp_path / "cache" / "embeddings.sqlite", blob)
    assert main(args) == 0
    rebuilt = load_pool(tmp_path / "pool")
    assert rebuilt.embeddings.shape == (7, 384) and rebuilt.meta["embedder"]["dim"] == 384, what
    assert np.allclose(rebuilt.embeddings, good, atol=1e-6)
    with EmbeddingCache(tmp_path / "cache" / "embeddings.sqlite") as cache:  # the misses were stored again
        stored = cache.get_many(embedder_key(embedder.name), [text_hash(t) for t in TEXTS[:7]])
        assert all(v is not None and v.shape == (384,) for v in stored)
    assert main(["select", str(source), "--pool", str(tmp_path / "pool"), "-o", str(tmp_path / "sel.jsonl"),
                 "--device", "cpu"]) == 0


def test_a_cache_of_another_schema_is_one_line_naming_it_and_the_pool_stays(tmp_path, capsys, embedder):
    import sqlite3

    source = _pool_input(tmp_path / "val.jsonl", 3)
    (tmp_path / "cache").mkdir()
    db = sqlite3.connect(str(tmp_path / "cache" / "embeddings.sqlite"))
    db.execute("CREATE TABLE vectors (key TEXT, blob BLOB)")
    db.commit()
    db.close()
    args = ["pool", "build", str(source), "-o", str(tmp_path / "pool"), "--device", "cpu", "-q",
            "--cache", str(tmp_path / "cache" / "scores.sqlite")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"morkit: error: {tmp_path / 'cache' / 'embeddings.sqlite'}: its 'vectors' table has "
                          "columns key, blob") and err.count("\n") == 1
    assert not (tmp_path / "pool").exists()


class _WrongShape:
    """An embedder that says 16 dimensions and gives 3 (a broken custom embedder)."""

    name, dim = "wrong-shape", 16

    def encode(self, texts, *, progress=False):
        return np.ones((len(texts), 3), dtype=np.float32) / np.sqrt(3)


def test_vectors_not_of_the_embedders_dimension_never_make_a_pool(tmp_path):
    from morkit.core.errors import MorkitError
    from morkit.data.contract import load_queries
    from morkit.question_pool.pool import build_pool

    queries = load_queries(_pool_input(tmp_path / "val.jsonl", 3))
    with pytest.raises(MorkitError, match=r"gave vectors of shape \(3, 3\) for 3 questions of dimension 16"):
        build_pool(queries, _WrongShape())
    with pytest.raises(MorkitError, match="gave vectors of shape"):
        CachedEmbedder(_WrongShape()).encode(TEXTS[:2])


def test_a_pool_whose_dimension_is_not_its_embedders_is_one_line_at_select(tmp_path, capsys):
    """A pool built (or edited) with 16-d vectors that names the 384-d default embedder: select says so in one line
    naming pool.json, instead of failing inside the index search."""
    from fakes.embedder import HashEmbedder

    from morkit.data.contract import load_queries
    from morkit.question_pool.pool import build_pool

    source = _pool_input(tmp_path / "val.jsonl", 3)
    pool = build_pool(load_queries(source), HashEmbedder())
    pool.save(tmp_path / "pool")
    header = json.loads((tmp_path / "pool" / "pool.json").read_text())
    header["embedder"]["name"] = "all-MiniLM-L6-v2"
    (tmp_path / "pool" / "pool.json").write_text(json.dumps(header))
    assert main(["select", str(source), "--pool", str(tmp_path / "pool"), "-o", str(tmp_path / "s.jsonl"),
                 "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"morkit: error: {tmp_path / 'pool' / 'pool.json'}: embedder.dim: the pool holds vectors "
                          "of dimension 16") and err.count("\n") == 1
