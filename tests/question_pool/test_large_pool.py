"""Pools past a dense PRR table: memory-mapped arrays, PRR of the neighbours on the fly, IVF search.

Each on-the-fly figure is checked against the dense table of the same pool, built from the same rows.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np
import pytest

from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.question_pool import store
from morkit.question_pool.index import IndexConfig, faiss_index
from morkit.question_pool.neighbour_prr import (
    EnsembleMatrix,
    neighbour_prr,
    prr_evidence,
)
from morkit.question_pool.pool import PoolConfig, build_pool, load_pool
from morkit.selection.base import Neighbours
from morkit.selection.pres import PRES, pres_top1
from morkit.selection.router import Router


def _tied_queries(n=60, seed=0):
    """Discrete scores (many exact ties, within and across RMs), mixed and one-label questions, a missing score."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        size = int(rng.integers(2, 8))
        labels = rng.random(size) < 0.4
        candidates = []
        for c in range(size):
            scores = {"half": float(rng.integers(0, 3)) / 2, "coarse": float(rng.integers(0, 2)),
                      "fine": float(rng.normal()), "copy": 0.0}
            scores["copy"] = scores["half"]  # identical to another RM: ensembles of the two tie everywhere
            if i == 5 and c == 1:
                del scores["fine"]
            candidates.append(Candidate(f"answer {c}", correct=bool(labels[c]), scores=scores))
        out.append(Query(f"q{i}", f"question {i} about topic {i % 4}", tuple(candidates), domain="math"))
    return out


@pytest.fixture(scope="module")
def rewardmath(data_dir):
    from morkit.data.datasets import rewardmath_rm_scores

    return rewardmath_rm_scores(data_dir)[:90]


def _both(queries, embedder, **config):
    dense = build_pool(queries, embedder, config=PoolConfig(statistics="dense", **config))
    fly = build_pool(queries, embedder, config=PoolConfig(statistics="on-the-fly", **config))
    return dense, fly


def _same(a, b):
    a32, b32 = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return np.array_equal(np.isnan(a32), np.isnan(b32)) and np.array_equal(np.nan_to_num(a32), np.nan_to_num(b32))


def test_neighbour_prr_equals_the_dense_table_with_ties_and_gaps(hash_embedder):
    dense, fly = _both(_tied_queries(), hash_embedder, max_members=3)
    assert dense.dense and not fly.dense and fly.prr is None
    matrix = EnsembleMatrix.of(fly.ensembles, fly.rm_names)
    rows = np.arange(len(fly))
    got = neighbour_prr(fly.scores, fly.correct, fly.valid, fly.normalizer, fly.rm_names, matrix)
    assert _same(got, dense.prr)
    assert np.isnan(got[5]).any() and not np.isnan(got[5]).all()  # q5 lacks one score: only its ensembles are NaN
    prr, top1 = fly.statistics(rows[::7])
    assert _same(prr, dense.prr[::7]) and _same(top1, dense.top1[::7])
    singles = len(fly.rm_names)
    for pool in (fly, dense):  # the single RMs' columns alone, as the report asks for them
        prr, top1 = pool.statistics(rows[::7], singles_only=True)
        assert _same(prr, dense.prr[::7, :singles]) and _same(top1, dense.top1[::7, :singles])
    sims = np.random.default_rng(1).random(len(rows))
    evidence = prr_evidence(fly.scores, fly.correct, fly.valid, fly.normalizer, fly.rm_names, matrix, sims)
    np.testing.assert_allclose(evidence, sims @ np.nan_to_num(dense.prr.astype(np.float64)), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_on_the_fly_pres_picks_what_the_dense_table_picks(rewardmath, hash_embedder):
    dense, fly = _both(rewardmath, hash_embedder)
    assert len(fly.ensembles) == 5335  # 22 RMs, up to 3 members, 3 weightings
    np.testing.assert_array_equal(dense.ensemble_means()[0], fly.ensemble_means()[0])  # sample = every question
    for method in (PRES, pres_top1):
        a, b = method(dense), method(fly)
        everything = frozenset(dense.rm_names)
        router = Router(dense, "pres", embedder=hash_embedder, k=20)
        for row in range(0, len(dense), 9):
            neighbours = router.chooser.neighbours(dense.embeddings[[row]])[0]
            evidence_a, evidence_b = a.scores(neighbours), b.scores(neighbours)
            np.testing.assert_allclose(evidence_a, evidence_b, rtol=1e-5, atol=1e-5)
            top_two = np.sort(evidence_a)[-2:]
            if top_two[1] - top_two[0] > 1e-4:
                assert a.choose(neighbours, everything).ensemble == b.choose(neighbours, everything).ensemble


@pytest.mark.slow
def test_on_the_fly_pool_saves_as_version_2_and_opens_memory_mapped(rewardmath, hash_embedder, tmp_path):
    fly = build_pool(rewardmath, hash_embedder, config=PoolConfig(statistics="on-the-fly", max_members=2))
    fly.save(tmp_path / "pool")
    header = json.loads((tmp_path / "pool" / "pool.json").read_text())
    assert header["format_version"] == store.FORMAT_COLUMNAR and "prr" not in header["shapes"]  # on the fly
    assert header["statistics"]["sample"] == len(fly)
    assert not (tmp_path / "pool" / "prr.npy").exists() and not (tmp_path / "pool" / "top1.npy").exists()
    loaded = load_pool(tmp_path / "pool")
    assert isinstance(loaded.scores, np.memmap) and not loaded.dense
    assert loaded.summary()["statistics"].startswith("on the fly")
    assert [r["mean_prr"] for r in loaded.ensemble_table()] == pytest.approx(
        [r["mean_prr"] for r in fly.ensemble_table()], nan_ok=True)
    query = replace(rewardmath[3], id="new")
    for method in ("pres", "stacker"):
        want = Router(fly, method, embedder=hash_embedder, k=10).route([query])[0].to_json()
        assert Router(loaded, method, embedder=hash_embedder, k=10).route([query])[0].to_json() == want
    grown = loaded.add([replace(q, id=q.id + "+") for q in rewardmath[:4]], embedder=hash_embedder)
    assert len(grown) == len(loaded) + 4 and not grown.dense
    (tmp_path / "pool" / "pool.json").write_text(json.dumps({**header, "statistics": {"sample": 3}}))
    with pytest.raises(InputError, match="statistics"):
        load_pool(tmp_path / "pool")


def test_big_arrays_are_checked_where_read(rewardmath, hash_embedder, tmp_path, monkeypatch):
    pool = build_pool(rewardmath[:20], hash_embedder, config=PoolConfig(statistics="on-the-fly", max_members=2))
    pool.save(tmp_path / "pool")
    scores = np.load(tmp_path / "pool" / "scores.npy")
    scores[4, 0, 0] = np.inf
    np.save(tmp_path / "pool" / "scores.npy", scores)
    with pytest.raises(InputError, match="infinite scores"):
        load_pool(tmp_path / "pool")
    monkeypatch.setattr(store, "VALUE_CHECK_BYTES", 0)
    loaded = load_pool(tmp_path / "pool")  # opened unread
    pres = PRES(loaded)
    rows = np.array([2, 4])
    with pytest.raises(InputError, match=f"{loaded.questions[4].id}.*infinite"):
        pres.scores(Neighbours(rows, tuple(loaded.questions[r].id for r in rows), np.ones(2)))


@pytest.mark.parametrize("codes,kind", [("flat", "IndexIVFFlat"), ("sq8", "IndexIVFScalarQuantizer")])
def test_ivf_pool_round_trip_and_a_corrupt_ivf_index(rewardmath, hash_embedder, tmp_path, codes, kind):
    import faiss

    config = PoolConfig(max_members=1, index=IndexConfig(kind="ivf", ivf_codes=codes))
    pool = build_pool(rewardmath, hash_embedder, config=config)
    assert pool.meta["index"]["kind"] == "ivf" and 0 < pool.meta["index"]["recall@100"] <= 1
    pool.save(tmp_path / "pool")
    loaded = load_pool(tmp_path / "pool")
    assert isinstance(faiss_index(loaded.index), getattr(faiss, kind)) and loaded.index.nprobe == IndexConfig().nprobe
    query = replace(rewardmath[0], id="new")
    assert Router(loaded, "pres", embedder=hash_embedder).select(query).to_json() == \
        Router(pool, "pres", embedder=hash_embedder).select(query).to_json()
    broken = faiss.clone_index(faiss_index(pool.index))
    broken.invlists.resize(0, 0)  # a list emptied: the lists no longer hold every vector
    faiss.write_index(broken, str(tmp_path / "broken.faiss"))  # replaced, not rewritten in place: `loaded` maps it
    os.replace(tmp_path / "broken.faiss", tmp_path / "pool" / "index.faiss")
    with pytest.raises(InputError, match="index.faiss.*corrupt IVF index"):
        load_pool(tmp_path / "pool")


def test_a_pool_written_before_large_pools_still_opens(rewardmath, hash_embedder, tmp_path):
    """Version-1 headers have no statistics setting and no IVF fields in their config."""
    pool = build_pool(rewardmath[:30], hash_embedder, config=PoolConfig(max_members=2))
    pool.save(tmp_path / "pool")
    header = json.loads((tmp_path / "pool" / "pool.json").read_text())
    del header["config"]["statistics"]
    for key in ("nlist", "nprobe"):
        del header["config"]["index"][key]
    (tmp_path / "pool" / "pool.json").write_text(json.dumps(header))
    old = load_pool(tmp_path / "pool")
    assert old.dense and old.config == pool.config
    np.testing.assert_array_equal(old.prr, pool.prr)


def _pool_files(path):
    """Every file of a saved pool as bytes, pool.json without what differs between two builds of the same rows
    (its revision token, the times, the phases' timings)."""
    out = {}
    for file in sorted(path.iterdir()):
        if file.name == "pool.json":
            header = json.loads(file.read_text())
            del header["token"], header["created"], header["updated"]
            for entry in header["history"]:
                entry.pop("time"), entry.pop("timings", None)
            out[file.name] = header
        else:
            out[file.name] = file.read_bytes()
    return out


@pytest.fixture()
def on_disk(monkeypatch, tmp_path):
    """Row arrays of any size go to disk, read by chunks of 7 rows and a few RMs at a time; temp files in a folder
    of their own (to see that none is left)."""
    from morkit.question_pool import rowfiles, spill

    monkeypatch.setattr(rowfiles, "ON_DISK_BYTES", 0)
    monkeypatch.setattr(rowfiles, "GROUP_BYTES", 1)  # one RM per pass
    monkeypatch.setattr(rowfiles, "READ_BATCH", 5)
    monkeypatch.setattr(spill, "SPILL_BYTES", 0)  # the question vectors too
    monkeypatch.setattr(spill, "CHUNK", 7)
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    return temp


@pytest.mark.parametrize("statistics", ["on-the-fly", "dense"])
def test_a_build_on_disk_is_the_build_in_memory(rewardmath, hash_embedder, tmp_path, statistics, request):
    config = PoolConfig(statistics=statistics, max_members=2)
    memory = build_pool(rewardmath, hash_embedder, config=config)
    assert not isinstance(memory.scores, np.memmap)
    memory.save(tmp_path / "memory")
    temp = request.getfixturevalue("on_disk")
    disk = build_pool(rewardmath, hash_embedder, config=config)
    from morkit.question_pool.rowfiles import MappedRows

    assert all(isinstance(a, MappedRows) for a in (disk.scores, disk.steps, disk.embeddings)) and disk.steps.shape[2]
    assert not disk.scores.flags.writeable
    assert disk.normalizer == memory.normalizer and disk.global_prr == memory.global_prr
    for name in ("scores", "steps", "prr", "top1", "embeddings"):
        a, b = getattr(memory, name), getattr(disk, name)
        assert (a is None) == (b is None) and (a is None or np.asarray(a).tobytes() == np.asarray(b).tobytes())
    disk.save(tmp_path / "disk")
    assert _pool_files(tmp_path / "disk") == _pool_files(tmp_path / "memory")  # bit for bit, but the times
    loaded = load_pool(tmp_path / "disk")
    query = replace(rewardmath[3], id="new")
    assert Router(loaded, "pres", embedder=hash_embedder, k=10).route([query])[0].to_json() == \
        Router(memory, "pres", embedder=hash_embedder, k=10).route([query])[0].to_json()
    grown = disk.add([replace(q, id=q.id + "+") for q in rewardmath[:4]], embedder=hash_embedder)
    assert len(grown) == len(disk) + 4
    np.testing.assert_array_equal(grown.scores[: len(disk)], memory.scores)
    del disk, grown, loaded
    assert not list(temp.iterdir())  # the temporary files were unlinked from the start


def test_a_build_that_fails_midway_leaves_no_half_written_pool(rewardmath, hash_embedder, tmp_path, on_disk,
                                                               monkeypatch):
    config = PoolConfig(statistics="on-the-fly", max_members=2)
    old = build_pool(rewardmath[:40], hash_embedder, config=config)
    old.save(tmp_path / "pool")
    before = _pool_files(tmp_path / "pool")

    class Failing:
        name, dim = hash_embedder.name, hash_embedder.dim

        def encode(self, texts, progress=False):
            raise RuntimeError("embedder died")

    with pytest.raises(RuntimeError, match="embedder died"):  # after the scores went to disk
        build_pool(rewardmath, Failing(), config=config).save(tmp_path / "pool")
    new = build_pool(rewardmath, hash_embedder, config=config)
    written = []

    def failing_save(path, array):  # the third array file fails, half the pool written
        if len(written) == 2:
            raise OSError("disk full")
        written.append(path)
        np.save(path, np.asarray(array))

    monkeypatch.setattr(store, "save_array", failing_save)
    with pytest.raises(OSError, match="disk full"):
        new.save(tmp_path / "pool")
    assert written and sorted(p.name for p in tmp_path.iterdir()) == ["morkit-cache", "pool", "temp"]
    assert _pool_files(tmp_path / "pool") == before and len(load_pool(tmp_path / "pool")) == 40
    del new
    assert not list(on_disk.iterdir())


def _resident_bytes(array):
    """Bytes of `array`'s mapping resident in this process (/proc/self/smaps), or None off Linux."""
    start = np.asarray(array).ctypes.data
    try:
        lines = open("/proc/self/smaps").read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        field = line.split()[0]
        if "-" in field and not field.endswith(":"):
            low, high = (int(x, 16) for x in field.split("-"))
            inside = low <= start < high
        elif inside and field == "Rss:":
            return int(line.split()[1]) * 1024
    return None


def test_mapped_rows_read_samples_by_batch_and_release_their_pages(monkeypatch):
    from morkit.question_pool import rowfiles, spill

    monkeypatch.setattr(rowfiles, "READ_BATCH", 100)
    values = np.random.default_rng(0).random((4096, 8, 16))  # 4 MiB, a page per row
    out = rowfiles.RowArray(values.shape, values.dtype, on_disk=True)
    for start in range(0, len(values), 1000):
        out.part(start, min(len(values), start + 1000))[...] = values[start : start + 1000]
    mapped = out.finish()
    assert isinstance(mapped, rowfiles.MappedRows) and not mapped.flags.writeable
    rows = np.sort(np.random.default_rng(1).choice(len(values), 300, replace=False))
    for index in (rows, (rows, slice(2, 5)), list(rows[:3]), (rows, Ellipsis, 3)):
        np.testing.assert_array_equal(mapped[index], values[index])
    np.testing.assert_array_equal(mapped[np.ix_(rows[:4], [1, 6])], values[np.ix_(rows[:4], [1, 6])])
    np.testing.assert_array_equal(mapped[10:20][[1, 3]], values[[11, 13]])
    if _resident_bytes(mapped) is None:
        pytest.skip("no /proc/self/smaps")
    assert _resident_bytes(mapped) == 0  # every read above released what it mapped
    view = spill.plain(mapped)
    float(view[2048:].sum())  # half the pages mapped by a plain read
    assert _resident_bytes(mapped) >= 2 * 2**20
    spill.release(view[2048:])  # a slice of the plain view is released where it lies
    assert _resident_bytes(mapped) < 2**20


def test_a_sample_read_from_an_opened_pool_releases_its_pages(rewardmath, hash_embedder, tmp_path, monkeypatch):
    from morkit.question_pool import pool as pool_module

    build_pool(rewardmath, hash_embedder, config=PoolConfig(statistics="on-the-fly", max_members=2)).save(
        tmp_path / "pool")
    loaded = load_pool(tmp_path / "pool")
    if _resident_bytes(loaded.scores) is None:
        pytest.skip("no /proc/self/smaps")
    few = loaded.statistics(np.arange(10))
    assert _resident_bytes(loaded.scores) > 0  # a query's few rows stay mapped
    monkeypatch.setattr(pool_module, "SAMPLE_ROWS", 20)
    many = loaded.statistics(np.arange(0, len(loaded), 2))
    assert _resident_bytes(loaded.scores) == _resident_bytes(loaded.valid) == 0
    assert _same(many[0][:5], few[0][::2]) and _same(many[1][:5], few[1][::2])
