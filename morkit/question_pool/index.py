"""Nearest-question search in FAISS: exact inner product for small pools, IVF (or HNSW) above a threshold.

An approximate index is trusted only with its recall@k against exact search measured (`recall_at_k`).
"""
# IVF codes are 8-bit (SQ8, a quarter of the floats), and a search re-ranks its shortlist exactly (`Reranked`).

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from morkit.core import checks
from morkit.core.errors import InputError
from morkit.question_pool import spill

INDEX_KINDS = ("auto", "flat", "ivf", "hnsw")
IVF_CODES = ("sq8", "flat")
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
    ivf_codes: str = "sq8"  # IVF list codes: 8-bit per dimension with an exact re-rank, or "flat" floats
    rerank: int = 4  # "sq8": the shortlist re-ranked exactly against the pool's vectors is rerank * k

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
        checks.one_of(config.ivf_codes, IVF_CODES, "IVF codes")
        codes = "SQ8" if config.ivf_codes == "sq8" else "Flat"
        index = faiss.index_factory(dim, f"IVF{config.lists(size)},{codes}", faiss.METRIC_INNER_PRODUCT)
        faiss.extract_index_ivf(index).nprobe = config.nprobe
        return index
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = config.ef_construction
        index.hnsw.efSearch = config.ef_search
        return index
    raise InputError(f"unknown concrete index kind {kind!r}")


class Reranked:
    """An index of 8-bit codes whose search re-ranks `rerank * k` candidates by exact inner product against
    `vectors` (the pool's embeddings, memory-mapped when opened); anything else reads through to the index."""

    def __init__(self, index: Any, vectors: np.ndarray, rerank: int) -> None:
        self.index, self.vectors, self.rerank = index, vectors, rerank

    def __getattr__(self, name: str) -> Any:
        if name == "index":  # not set yet (a copy being made)
            raise AttributeError(name)
        return getattr(self.index, name)

    def search(self, queries: np.ndarray, k: int, params: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """The `k` best by exact inner product among a shortlist of `rerank * k` from the codes (`params`: FAISS
        search parameters for the shortlist's search, e.g. an ID filter; only its rows are read)."""
        _, shortlist = self.index.search(queries, min(self.index.ntotal, max(k, self.rerank * k)), params=params)
        sims = np.full((len(queries), k), -np.inf, dtype=np.float32)
        ids = np.full((len(queries), k), -1, dtype=np.int64)
        for i, row in enumerate(shortlist):
            row = row[(row >= 0) & (row < len(self.vectors))]
            exact = np.asarray(self.vectors[np.sort(row)], dtype=np.float32) @ queries[i]
            best = np.argsort(-exact, kind="stable")[:k]
            sims[i, : len(best)], ids[i, : len(best)] = exact[best], np.sort(row)[best]
        return sims, ids


def faiss_index(index: Any) -> Any:
    """The FAISS index itself (a Reranked one unwrapped)."""
    return index.index if isinstance(index, Reranked) else index


def reranked(index: Any, vectors: np.ndarray, config: IndexConfig = IndexConfig()) -> Any:
    """`index` wrapped to re-rank against `vectors` when its codes are 8-bit (SQ8), else as it is."""
    if isinstance(index, Reranked):
        index = index.index
    faiss = _faiss()
    return Reranked(index, vectors, config.rerank) if isinstance(index, faiss.IndexIVFScalarQuantizer) else index


def build_index(vectors: np.ndarray, config: IndexConfig = IndexConfig()) -> tuple[Any, str]:
    """Index all vectors (read in chunks: a memory-mapped array's pages are released); returns (index, kind)."""
    kind = config.resolved(len(vectors))
    index = new_index(vectors.shape[1], kind, config, len(vectors))
    if kind == "ivf":
        sample = min(len(vectors), TRAIN_PER_LIST * index.nlist)
        rows = np.sort(np.random.default_rng(0).choice(len(vectors), size=sample, replace=False))
        train = np.empty((sample, vectors.shape[1]), dtype=np.float32)
        for start, part in spill.chunks(vectors):  # gathered chunk by chunk: a mapped file is never all resident
            inside = rows[(rows >= start) & (rows < start + len(part))]
            at = np.searchsorted(rows, start)
            train[at : at + len(inside)] = part[inside - start]
        index.train(train if len(vectors) else np.zeros((1, vectors.shape[1]), np.float32))
        del train
    for _, part in spill.chunks(vectors):  # no second copy of a million vectors
        index.add(part)
    return reranked(index, vectors, config), kind


def id_filter(allowed: np.ndarray) -> Any:
    """A FAISS ID selector admitting the rows where `allowed` is True, for `search`'s `allowed`.

    Args:
        allowed: (Q,) bool, one flag per indexed row.

    Returns:
        A faiss.IDSelectorBitmap over the flags packed 8 to a byte (Q / 8 bytes); the selector holds its bitmap.
    """
    bits = np.packbits(np.asarray(allowed, dtype=bool), bitorder="little")
    return _faiss().IDSelectorBitmap(bits)  # the one-array form keeps `bits` referenced by the selector


def search_parameters(index: Any, allowed: Any) -> Any:
    """FAISS search parameters that restrict a search of `index` to the rows `allowed` admits, keeping the index's
    own search settings (its IVF `nprobe` and `max_codes`, its HNSW `efSearch`), which parameters would replace.

    Args:
        index: The index (a Reranked one is unwrapped).
        allowed: A FAISS ID selector (`id_filter`).

    Returns:
        faiss.SearchParametersIVF, SearchParametersHNSW or SearchParameters (flat) with `sel` set.
    """
    faiss = _faiss()
    base = faiss_index(index)
    if isinstance(base, faiss.IndexHNSW):
        return faiss.SearchParametersHNSW(sel=allowed, efSearch=base.hnsw.efSearch)
    try:
        ivf = faiss.extract_index_ivf(base)
    except RuntimeError:  # not an IVF index: flat
        return faiss.SearchParameters(sel=allowed)
    return faiss.SearchParametersIVF(sel=allowed, nprobe=ivf.nprobe, max_codes=ivf.max_codes)


def search(index: Any, queries: np.ndarray, k: int, allowed: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """The nearest indexed rows of each query, by inner product, most similar first.

    Args:
        index: A FAISS index or a Reranked one.
        queries: (n, d) query vectors.
        k: Rows per query (at most the index's size).
        allowed: A FAISS ID selector (`id_filter`): only the rows it admits are returned, from one search; an
            approximate index returns those its search reaches. None: every row.

    Returns:
        (similarities, ids), each (n, min(k, ntotal)); ids index the pool's question order, -1 padding a query
        with fewer rows found.

    Raises:
        InputError: The index returned an id out of range (a damaged IVF list of a large pool, whose ids are
            checked where read).
    """
    k = min(k, index.ntotal)
    queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
    if k == 0:
        return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
    params = None if allowed is None else search_parameters(index, allowed)

    if len(queries) >= 16:
        found = index.search(queries, k, params=params)
    else:  # a few queries: threads cost more than they save (1.2 ms vs 22 ms p50 at 10k x 384, 2 cores)
        faiss = _faiss()
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            found = index.search(queries, k, params=params)
        finally:
            faiss.omp_set_num_threads(threads)
    if found[1].size and (int(found[1].min()) < -1 or int(found[1].max()) >= index.ntotal):
        raise InputError(f"the FAISS index returned a question id outside 0-{index.ntotal - 1}: corrupt index; "
                         "rebuild the pool")
    return found


RECALL_BATCH = 8
"""Queries whose re-rank reads come between two releases of the vectors' mapped pages in `recall_at_k` (the kernel
maps up to 64 KiB around each row read: eight queries' shortlists of 400 map at most 200 MiB)."""


def recall_at_k(index: Any, vectors: np.ndarray, k: int = 100, sample: int = 500, seed: int = 0) -> float:
    """Share of the exact top-k neighbours the index returns, over `sample` pool vectors as queries."""
    if len(vectors) == 0:
        return float("nan")
    k = min(k, len(vectors))
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(vectors), size=min(sample, len(vectors)), replace=False)
    queries = np.ascontiguousarray(vectors[picks], dtype=np.float32)
    faiss = _faiss()
    best_sims = np.full((len(picks), 0), -np.inf, dtype=np.float32)
    truth = np.zeros((len(picks), 0), dtype=np.int64)
    for start, part in spill.chunks(vectors):  # brute force by chunk, keeping the best k so far
        sims, ids = faiss.knn(queries, part, min(k, len(part)), metric=faiss.METRIC_INNER_PRODUCT)
        best_sims, truth = np.hstack([best_sims, sims]), np.hstack([truth, ids + start])
        keep = np.argsort(-best_sims, axis=1, kind="stable")[:, :k]
        best_sims, truth = np.take_along_axis(best_sims, keep, 1), np.take_along_axis(truth, keep, 1)
    found = []
    for start in range(0, len(queries), RECALL_BATCH):  # a re-rank maps the pages around each row it reads
        found.extend(index.search(queries[start : start + RECALL_BATCH], k)[1])
        spill.release(vectors)
    hits = sum(len(set(t) & set(f)) for t, f in zip(truth, found))
    return hits / (len(picks) * k)


def index_vectors(vectors: np.ndarray, config: IndexConfig) -> tuple[Any, dict[str, Any]]:
    """The FAISS index over unit vectors, and its description (kind; recall@RECALL_K when approximate)."""
    index, kind = build_index(vectors, config)
    info: dict[str, Any] = {"kind": kind}
    if isinstance(index, Reranked):
        info.update(codes="sq8", rerank=index.rerank)
    if kind != "flat":
        info[f"recall@{RECALL_K}"] = recall_at_k(index, vectors, RECALL_K)
    return index, info


def mapped_bytes(index: Any) -> np.ndarray | None:
    """The whole index file an IVF index was memory-mapped from (uint8, read-only), or None when in memory.

    FAISS would write such an index as a reference to its file, and cannot add to or clone it."""
    faiss = _faiss()
    try:
        lists = faiss.downcast_InvertedLists(faiss.extract_index_ivf(faiss_index(index)).invlists)
    except RuntimeError:  # not an IVF index
        return None
    if not isinstance(lists, faiss.OnDiskInvertedLists) or lists.filename:
        return None
    return faiss.rev_swig_ptr(lists.ptr, lists.totsize)


def in_memory(index: Any) -> Any:
    """A copy of the index that can be added to (a memory-mapped IVF index is read into memory)."""
    faiss = _faiss()
    mapped = mapped_bytes(index)
    return faiss.clone_index(faiss_index(index)) if mapped is None else faiss.deserialize_index(np.array(mapped))


def write_index(index: Any, path: Path) -> None:
    """Write the index file; one memory-mapped at opening is copied byte for byte from its mapping."""
    mapped = mapped_bytes(index)
    if mapped is None:
        _faiss().write_index(faiss_index(index), str(path))
        return
    with open(path, "wb") as out:
        for start in range(0, len(mapped), 64 << 20):
            out.write(mapped[start : start + (64 << 20)].tobytes())


MMAP_ABOVE = 1 << 30
"""Index files larger than this are memory-mapped when read; smaller ones (a million questions' SQ8 codes, 0.4 GB)
are read into memory: FAISS searches mapped lists about 5x slower (1.7 against 0.3 ms at 200,000 questions)."""


def read_index(path: Path, *, mmap: bool = True) -> Any:
    """Read an index file; one over MMAP_ABOVE has its IVF lists memory-mapped read-only (FAISS's IO_FLAG_MMAP),
    so it opens at once and pages in the lists a search probes."""
    faiss = _faiss()
    mapped = mmap and Path(path).stat().st_size > MMAP_ABOVE
    return faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if mapped else 0)
