"""A build's vectors streamed from one embedder run (spill.embed over `encode_chunks`, behind the embedding cache):
each chunk written at its rows as it arrives, to disk past SPILL_BYTES with memory holding about one chunk; one
stream for the whole build; an embedder that knows its dimension only from its first chunk (as on Ray) works; a
run killed midway leaves its finished chunks in the cache and the rerun embeds only the rest, in one stream.
Fake embedders, no model."""

from __future__ import annotations

import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest
from fakes.embedder import HashEmbedder

from morkit.core.errors import InputError, MorkitError
from morkit.question_pool import embed, embed_cache, spill
from morkit.question_pool.embed_cache import CachedEmbedder, EmbeddingCache

CHUNK = 50
COUNT = 1000


class Interrupted(BaseException):
    """Stands for a killed build (not an Exception: nothing on the way catches it)."""


class Wide(HashEmbedder):
    dim = 1024


class LateDim:
    """Knows its dimension only once it has embedded, as a Ray embedder does; counts its streams (one actor pool
    each on Ray) and the texts it embedded; raises Interrupted after `stop` chunks."""

    name, dim = "late-dim", None

    def __init__(self, stop: int | None = None):
        self.stop, self.streams, self.texts, self.chunks = stop, 0, 0, 0

    def encode_chunks(self, texts):
        self.streams += 1
        for start in range(0, len(texts), CHUNK):
            if self.chunks == self.stop:
                raise Interrupted
            part = list(texts[start: start + CHUNK])
            self.chunks += 1
            self.texts += len(part)
            yield np.arange(start, start + len(part)), Wide().encode(part)


def _questions(count=COUNT, repeats=0):
    texts = [f"question {i}: what is {i} + {i % 7}?" for i in range(count - repeats)]
    texts += texts[:repeats]  # the same text asked twice: embedded once, given at both rows
    return [SimpleNamespace(id=f"q{i}", question=t) for i, t in enumerate(texts)]


@pytest.fixture
def spills(monkeypatch):
    monkeypatch.setattr(spill, "SPILL_BYTES", 0)
    monkeypatch.setattr(embed_cache, "PIECE", CHUNK)


def test_a_stream_spills_to_disk_equal_to_memory_in_one_run_and_resumes(spills, tmp_path):
    questions = _questions(repeats=30)
    expected = Wide().encode([q.question for q in questions])
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        killed = LateDim(stop=4)
        with pytest.raises(Interrupted):
            spill.embed(CachedEmbedder(killed, cache), questions)
        assert len(cache) == killed.texts == 4 * CHUNK  # every finished chunk kept

        rest = LateDim()
        vectors = spill.embed(CachedEmbedder(rest, cache), questions)
        assert isinstance(vectors, np.memmap) and vectors.shape == (COUNT, Wide.dim)
        np.testing.assert_array_equal(vectors, expected)
        assert rest.streams == 1 and rest.texts == COUNT - 30 - 4 * CHUNK  # one run, only what was not cached

        again = LateDim()
        np.testing.assert_array_equal(spill.embed(CachedEmbedder(again, cache), questions), expected)
        assert again.texts == 1  # all cached: one text embedded only to learn the dimension, nothing re-embedded


def test_memory_holds_about_a_chunk_not_the_vectors(spills, tmp_path):
    questions = _questions(4000)
    whole = 4000 * Wide.dim * 4
    with EmbeddingCache(tmp_path / "e.sqlite") as cache:
        for embedder in (LateDim(), LateDim()):  # embedded, then all read from the cache
            tracemalloc.start()
            try:
                vectors = spill.embed(CachedEmbedder(embedder, cache), questions)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert isinstance(vectors, np.memmap) and peak < whole / 4, (peak, whole)
    np.testing.assert_array_equal(vectors[-3:], Wide().encode([q.question for q in questions[-3:]]))


def test_in_memory_below_spill_bytes_and_the_local_embedder_path_unchanged(embedder, monkeypatch):
    monkeypatch.setattr(embed, "CHUNK", 3)
    questions = _questions(11)
    streamed = spill.embed(CachedEmbedder(embedder), questions)
    assert not isinstance(streamed, np.memmap) and streamed.dtype == np.float32
    np.testing.assert_array_equal(streamed, embedder.encode([q.question for q in questions]))
    np.testing.assert_array_equal(spill.embed(embedder, questions), streamed)  # its own encode_chunks


class Broken(LateDim):
    def __init__(self, vectors):
        super().__init__()
        self.vectors = vectors

    def encode_chunks(self, texts):
        yield np.arange(len(texts)), self.vectors(len(texts))


def test_a_stream_of_bad_vectors_never_makes_a_pool(spills):
    questions = _questions(5)
    nan = np.full((5, 4), np.nan, dtype=np.float32)
    with pytest.raises(InputError, match="gave a non-finite vector for question 'q0'"):
        spill.embed(Broken(lambda n: nan), questions)
    with pytest.raises(MorkitError, match=r"gave vectors of shape \(4, 4\) for 5 questions"):
        spill.embed(Broken(lambda n: np.ones((4, 4), dtype=np.float32)), questions)


@pytest.mark.parametrize("view", ["memmap slice", "plain slice", "whole"])
def test_a_mapped_slice_is_placed_where_it_lies_in_its_mapping(tmp_path, view):
    """spill.release drops the pages of the bytes it is given: a slice of an np.memmap (itself an np.memmap) is
    found at its own offset in the mapping, not at the mapping's start."""
    path = tmp_path / "rows.npy"
    np.save(path, np.arange(200_000, dtype=np.float64).reshape(2000, 100))
    mapped = np.load(path, mmap_mode="r")
    part = {"memmap slice": mapped[700:900], "plain slice": np.asarray(mapped)[700:900], "whole": mapped}[view]
    mapping, start = spill._mapped(part)
    assert bytes(mapping[start:start + part.nbytes]) == part.tobytes()
