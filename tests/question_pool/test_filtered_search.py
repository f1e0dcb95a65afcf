"""A search restricted to some rows (`search(..., allowed=id_filter(mask))`): one FAISS search on every index kind,
returning only admitted rows, keeping the index's own search settings, and on 8-bit codes re-ranking no more rows
than an unfiltered search does."""

from __future__ import annotations

import numpy as np
import pytest

from morkit.question_pool.index import (
    IndexConfig,
    Reranked,
    build_index,
    id_filter,
    search,
    search_parameters,
)

K = 10


def _vectors(n=3000, dim=16, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True), rng.random(n) < 0.1


def _exact(x, mask, queries, k):
    rows = np.flatnonzero(mask)
    sims = queries @ x[rows].T
    return rows[np.argsort(-sims, axis=1, kind="stable")[:, :k]]


@pytest.mark.parametrize("config", [IndexConfig(kind="flat"), IndexConfig(kind="ivf"),
                                    IndexConfig(kind="ivf", ivf_codes="flat"), IndexConfig(kind="hnsw")],
                         ids=["flat", "ivf-sq8", "ivf-flat", "hnsw"])
def test_a_filtered_search_returns_the_nearest_admitted_rows(config):
    x, mask = _vectors()
    index, _ = build_index(x, config)
    queries = x[:40]
    sims, rows = search(index, queries, K, id_filter(mask))
    assert rows.shape == (40, K) and (rows >= 0).all() and mask[rows].all()
    assert np.all(np.diff(sims, axis=1) <= 1e-6)
    hits = np.mean([len(set(a) & set(b)) / K for a, b in zip(rows, _exact(x, mask, queries, K))])
    assert hits == 1.0 if config.kind == "flat" else hits > 0.9


def test_the_filter_keeps_the_index_search_settings():
    import faiss

    x, mask = _vectors()
    ivf, _ = build_index(x, IndexConfig(kind="ivf", nprobe=3))
    params = search_parameters(ivf, id_filter(mask))
    assert isinstance(params, faiss.SearchParametersIVF) and params.nprobe == 3
    hnsw, _ = build_index(x, IndexConfig(kind="hnsw", ef_search=77))
    params = search_parameters(hnsw, id_filter(mask))
    assert isinstance(params, faiss.SearchParametersHNSW) and params.efSearch == 77
    flat, _ = build_index(x, IndexConfig(kind="flat"))
    assert type(search_parameters(flat, id_filter(mask))) is faiss.SearchParameters


def test_fewer_admitted_rows_than_k_pad_with_minus_one():
    x, _ = _vectors(200)
    mask = np.zeros(200, dtype=bool)
    mask[[5, 150, 199]] = True
    index, _ = build_index(x, IndexConfig(kind="flat"))
    _, rows = search(index, x[:2], K, id_filter(mask))
    assert sorted(rows[0][rows[0] >= 0].tolist()) == [5, 150, 199] and (rows[:, 3:] == -1).all()
    ivf, _ = build_index(x, IndexConfig(kind="ivf", nlist=5, nprobe=1))  # one list probed: only its admitted rows
    _, rows = search(ivf, x[:20], K, id_filter(mask))
    assert ((rows == -1) | mask[rows]).all() and (rows == -1).sum(axis=1).min() >= K - 3


class _CountingVectors:
    """The pool's vectors as a Reranked index reads them, counting the rows of each read."""

    def __init__(self, x):
        self.x, self.reads = x, []

    def __len__(self):
        return len(self.x)

    def __getitem__(self, rows):
        self.reads.append(len(rows))
        return self.x[rows]


def test_a_filtered_sq8_search_reads_rerank_times_k_vectors_per_query():
    x, mask = _vectors()
    index, _ = build_index(x, IndexConfig(kind="ivf"))
    assert isinstance(index, Reranked)
    counting = _CountingVectors(x)
    index.vectors = counting
    _, rows = search(index, x[:5], K, id_filter(mask))
    assert mask[rows[rows >= 0]].all()
    assert len(counting.reads) == 5 and max(counting.reads) <= index.rerank * K
