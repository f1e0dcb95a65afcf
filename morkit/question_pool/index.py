"""Nearest-question search in FAISS: exact inner product for small pools, IVF (or HNSW) above a threshold.

An approximate index is trusted only with its recall@k against exact search measured (`recall_at_k`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from morkit.core import checks
from morkit.core.errors import InputError

INDEX_KINDS = ("auto", "flat", "ivf", "hnsw")
APPROXIMATE_ABOVE = 100_000
"""Pools with more questions than this get an IVF index under kind "auto". Exact single-query
search on 384-dim vectors measured about 1 ms at 10k and 10 ms at 100k questions (one thread,
bench/knn.py). HNSW answers in about 0.5 ms but took 118-307 s to build at 100k on 2 cores, so a
million questions would take most of an hour; IVF trains its coarse centroids on a sample and adds a
million vectors in about a minute (bench/pool_build.py --large), and `nprobe` trades speed for recall."""
TRAIN_PER_LIST = 64
"""IVF trains its coarse quantizer on this many sampled vectors per list (FAISS warns below 39)."""


@dataclass(frozen=True)
class IndexConfig:
    kind: str = "auto"
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    threshold: int = APPROXIMATE_ABOVE
    nlist: int = 0  # IVF lists; 0: 4 * sqrt(questions)
    nprobe: int = 48  # IVF lists searched per query

    def resolved(self, size: int) -> str:
        checks.one_of(self.kind, INDEX_KINDS, "index kind")
        if self.kind == "auto":
            return "ivf" if size > self.threshold else "flat"
        return self.kind

    def lists(self, size: int) -> int:
        """IVF lists for `size` vectors: `nlist`, else 4 * sqrt(size), at least 1 and at most size / 39."""
        wanted = self.nlist or int(4 * size ** 0.5)
        return max(1, min(wanted, size // 39 or 1))


RECALL_K = 100
"""Neighbours an approximate index's recall is measured at (recall@RECALL_K against exact search)."""


def _faiss() -> Any:
    import faiss

    return faiss


def new_index(dim: int, kind: str, config: IndexConfig = IndexConfig(), size: int = 0) -> Any:
    """An empty inner-product index of the given concrete kind ("flat", "ivf" for `size` vectors, or "hnsw");
    an IVF index still has to be trained (`build_index` does)."""
    faiss = _faiss()
    if kind == "flat":
        return faiss.IndexFlatIP(dim)
    if kind == "ivf":
        index = faiss.index_factory(dim, f"IVF{config.lists(size)},Flat", faiss.METRIC_INNER_PRODUCT)
        faiss.extract_index_ivf(index).nprobe = config.nprobe
        return index
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = config.ef_construction
        index.hnsw.efSearch = config.ef_search
        return index
    raise InputError(f"unknown concrete index kind {kind!r}")


def build_index(vectors: np.ndarray, config: IndexConfig = IndexConfig()) -> tuple[Any, str]:
    """Index all vectors; returns (index, concrete kind)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    kind = config.resolved(len(vectors))
    index = new_index(vectors.shape[1], kind, config, len(vectors))
    if kind == "ivf":
        sample = min(len(vectors), TRAIN_PER_LIST * index.nlist)
        rows = np.sort(np.random.default_rng(0).choice(len(vectors), size=sample, replace=False))
        index.train(vectors[rows] if len(vectors) else np.zeros((1, vectors.shape[1]), np.float32))
    if len(vectors):
        for start in range(0, len(vectors), 1 << 16):  # chunks: no second copy of a million vectors
            index.add(vectors[start : start + (1 << 16)])
    return index, kind


def search(index: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(similarities, ids), each (n_queries, min(k, ntotal)); ids index the pool's question order."""
    k = min(k, index.ntotal)
    queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
    if k == 0:
        return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
    if len(queries) >= 16:
        return index.search(queries, k)
    # A few queries: threads cost more than they save (measured 1.2 ms vs 22 ms p50 at 10k x 384, 2 cores).
    faiss = _faiss()
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return index.search(queries, k)
    finally:
        faiss.omp_set_num_threads(threads)


def recall_at_k(index: Any, vectors: np.ndarray, k: int = 100, sample: int = 500, seed: int = 0) -> float:
    """Share of the exact top-k neighbours the index returns, over `sample` pool vectors as queries."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if len(vectors) == 0:
        return float("nan")
    k = min(k, len(vectors))
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(vectors), size=min(sample, len(vectors)), replace=False)
    faiss = _faiss()
    _, truth = faiss.knn(vectors[picks], vectors, k, metric=faiss.METRIC_INNER_PRODUCT)  # brute force, no copy
    _, found = index.search(vectors[picks], k)
    hits = sum(len(set(t) & set(f)) for t, f in zip(truth, found))
    return hits / (len(picks) * k)


def index_vectors(vectors: np.ndarray, config: IndexConfig) -> tuple[Any, dict[str, Any]]:
    """The FAISS index over unit vectors, and its description (kind; recall@RECALL_K when approximate)."""
    index, kind = build_index(vectors, config)
    info: dict[str, Any] = {"kind": kind}
    if kind != "flat":
        info[f"recall@{RECALL_K}"] = recall_at_k(index, vectors, RECALL_K)
    return index, info


def write_index(index: Any, path: Path) -> None:
    _faiss().write_index(index, str(path))


def read_index(path: Path) -> Any:
    return _faiss().read_index(str(path))
