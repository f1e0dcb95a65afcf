"""A saved pool opens lazily: its questions are a column table made into rows when indexed, its IVF index is
memory-mapped; older pools (questions.jsonl) open once `pool upgrade` rewrote them, and `pool add` and saving work on
a lazy pool."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from question_pool.legacy_pools import to_legacy

from morkit.core.errors import InputError
from morkit.question_pool import table as table_module
from morkit.question_pool.index import IndexConfig, mapped_bytes, search
from morkit.question_pool.pool import PoolConfig, build_pool, load_pool
from morkit.question_pool.rows import PoolQuestion
from morkit.question_pool.table import QuestionTable


@pytest.fixture(scope="module")
def rewardmath():
    from morkit.core import settings
    from morkit.data.datasets import rewardmath_rm_scores

    return rewardmath_rm_scores(settings.data_dir(None))[:120]


@pytest.fixture(scope="module")
def ivf_pool(rewardmath):
    from fakes.embedder import HashEmbedder

    return build_pool(rewardmath, HashEmbedder(), config=PoolConfig(max_members=1, index=IndexConfig(kind="ivf")))


@pytest.fixture
def mapped(monkeypatch):
    """Every index file memory-mapped when read, as a large pool's is."""
    from morkit.question_pool import index

    monkeypatch.setattr(index, "MMAP_ABOVE", 0)


def test_an_index_file_under_the_mapping_size_is_read_into_memory(ivf_pool, tmp_path):
    ivf_pool.save(tmp_path / "pool")
    loaded = load_pool(tmp_path / "pool")
    assert mapped_bytes(loaded.index) is None  # FAISS searches mapped lists about 5x slower
    queries = np.asarray(ivf_pool.embeddings[:20])
    assert (search(loaded.index, queries, 10)[1] == search(ivf_pool.index, queries, 10)[1]).all()


def test_a_saved_pool_opens_with_a_column_table_and_a_mapped_index(ivf_pool, tmp_path, mapped):
    ivf_pool.save(tmp_path / "pool")
    loaded = load_pool(tmp_path / "pool")
    assert isinstance(loaded.questions, QuestionTable) and loaded.questions == ivf_pool.questions
    assert ivf_pool.questions == loaded.questions and loaded.questions[-1] == ivf_pool.questions[-1]
    assert isinstance(loaded.questions[np.int64(3)], PoolQuestion) and loaded.questions[2:4] == ivf_pool.questions[2:4]
    assert mapped_bytes(loaded.index) is not None and mapped_bytes(ivf_pool.index) is None
    queries = np.asarray(ivf_pool.embeddings[:20])
    assert (search(loaded.index, queries, 10)[1] == search(ivf_pool.index, queries, 10)[1]).all()
    assert loaded.summary()["domains"] == ivf_pool.summary()["domains"]


def test_a_lazy_pool_saves_its_mapped_index_byte_for_byte_and_takes_additions(ivf_pool, rewardmath, tmp_path,
                                                                              mapped):
    from fakes.embedder import HashEmbedder

    ivf_pool.save(tmp_path / "a")
    loaded = load_pool(tmp_path / "a")
    loaded.save(tmp_path / "b")  # FAISS would write a mapped index as a reference to its file
    assert (tmp_path / "b" / "index.faiss").read_bytes() == (tmp_path / "a" / "index.faiss").read_bytes()
    grown = loaded.add([replace(q, id=q.id + "+") for q in rewardmath[:5]], embedder=HashEmbedder())
    assert len(grown) == len(ivf_pool) + 5 and grown.index.ntotal == len(grown)
    assert isinstance(grown.questions, QuestionTable) and grown.questions[-1].id == rewardmath[4].id + "+"
    grown.save(tmp_path / "a")
    again = load_pool(tmp_path / "a")
    assert again.questions == grown.questions and list(again.questions)[: len(ivf_pool)] == list(ivf_pool.questions)
    with pytest.raises(InputError, match="already in the pool"):
        again.add(rewardmath[:1], embedder=HashEmbedder())


@pytest.mark.parametrize("statistics", ["dense", "on-the-fly"])
def test_pools_of_format_1_and_2_open_once_upgraded_to_the_new_format(rewardmath, tmp_path, statistics):
    from fakes.embedder import HashEmbedder

    from morkit.services.pool_upgrade import upgrade_pool

    pool = build_pool(rewardmath[:30], HashEmbedder(), config=PoolConfig(max_members=2, statistics=statistics))
    pool.save(tmp_path / "pool")
    to_legacy(tmp_path / "pool")
    assert json.loads((tmp_path / "pool" / "pool.json").read_text())["format_version"] == (
        1 if statistics == "dense" else 2)
    with pytest.raises(InputError, match="run morkit pool upgrade") as caught:
        load_pool(tmp_path / "pool")
    assert caught.value.path == str(tmp_path / "pool") and "\n" not in str(caught.value)
    assert upgrade_pool(tmp_path / "pool").changed
    assert json.loads((tmp_path / "pool" / "pool.json").read_text())["format_version"] == 3
    old = load_pool(tmp_path / "pool")
    assert old.questions == pool.questions and old.dense == pool.dense
    assert [q.id for q in old.questions] == [q.id for q in pool.questions]
    for name in ("scores", "correct", "valid", "prr", "top1", "embeddings", "steps"):
        mine, theirs = getattr(old, name), getattr(pool, name)
        assert (mine is None) == (theirs is None), name
        assert mine is None or np.array_equal(mine, theirs, equal_nan=mine.dtype.kind == "f"), name
    assert (old.rm_names, old.ensembles, old.normalizer, old.meta) == (pool.rm_names, pool.ensembles,
                                                                      pool.normalizer, pool.meta)
    old.save(tmp_path / "pool")
    assert json.loads((tmp_path / "pool" / "pool.json").read_text())["format_version"] == 3
    assert load_pool(tmp_path / "pool").questions == pool.questions
    assert not upgrade_pool(tmp_path / "pool").changed  # format 3 already: nothing to do


def test_a_large_table_is_checked_where_read(rewardmath, tmp_path, monkeypatch):
    from fakes.embedder import HashEmbedder

    build_pool(rewardmath[:10], HashEmbedder()).save(tmp_path / "pool")
    text = np.load(tmp_path / "pool" / "question_text.npy")
    offsets = np.load(tmp_path / "pool" / "question_offsets.npy")
    text[offsets[2 * 4 + 1]] = 0xFF  # row 4's text
    np.save(tmp_path / "pool" / "question_text.npy", text)
    with pytest.raises(InputError, match="question_text.npy: not UTF-8"):
        load_pool(tmp_path / "pool")
    monkeypatch.setattr(table_module, "CHECK_ALL_UP_TO", 0)
    loaded = load_pool(tmp_path / "pool")  # opened unread
    assert loaded.questions[3].id == rewardmath[3].id
    with pytest.raises(InputError, match="question_text.npy: not UTF-8"):
        loaded.questions[4]


def test_large_vectors_are_spilled_to_disk_and_saved_in_chunks(rewardmath, tmp_path, monkeypatch):
    from fakes.embedder import HashEmbedder

    from morkit.question_pool import spill

    in_memory = build_pool(rewardmath[:50], HashEmbedder())
    monkeypatch.setattr(spill, "SPILL_BYTES", 0)
    monkeypatch.setattr(spill, "CHUNK", 7)
    spilled = build_pool(rewardmath[:50], HashEmbedder())
    assert isinstance(spilled.embeddings, np.memmap) and not isinstance(in_memory.embeddings, np.memmap)
    np.testing.assert_array_equal(spilled.embeddings, in_memory.embeddings)
    spilled.save(tmp_path / "pool")
    loaded = load_pool(tmp_path / "pool")
    loaded.save(tmp_path / "again")  # every array memory-mapped: streamed by chunk
    for name in ("embeddings", "scores", "valid", "question_text"):
        assert (tmp_path / "again" / f"{name}.npy").read_bytes() == (tmp_path / "pool" / f"{name}.npy").read_bytes()
    np.testing.assert_array_equal(load_pool(tmp_path / "again").embeddings, in_memory.embeddings)


def test_sq8_codes_with_the_exact_rerank_find_what_flat_codes_find():
    from morkit.question_pool.index import Reranked, build_index, recall_at_k

    rng = np.random.default_rng(0)
    centers = rng.standard_normal((20, 32))
    x = centers[rng.integers(0, 20, 4000)] + 0.3 * rng.standard_normal((4000, 32))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    sq8, _ = build_index(x, IndexConfig(kind="ivf"))
    flat, _ = build_index(x, IndexConfig(kind="ivf", ivf_codes="flat"))
    assert isinstance(sq8, Reranked) and not isinstance(flat, Reranked)
    assert recall_at_k(sq8, x, k=50, sample=200) >= recall_at_k(flat, x, k=50, sample=200) - 0.005
    sims, ids = search(sq8, x[:5], 10)
    np.testing.assert_allclose(sims, np.take_along_axis(x[:5] @ x.T, ids, 1), rtol=1e-5)  # exact, not 8-bit
    assert (np.diff(sims, axis=1) <= 0).all()


def test_a_tables_ids_read_alone_are_its_rows_ids():
    from morkit.question_pool.rows import RowIds

    questions = tuple(PoolQuestion(f"id-{i}é", f"text {i}", "math", 2) for i in range(5))
    table = QuestionTable.of(questions)
    for cached in (False, True):
        if cached:
            table.ids()
        assert [table.id_of(r) for r in range(5)] == [q.id for q in questions]
        assert table.id_of(-1) == questions[-1].id  # as table[-1].id, never the last row's text
        with pytest.raises(IndexError, match="question row 5 out of range"):
            table.id_of(5)
    picked = np.array([3, 0, 4])
    assert [RowIds(table, rows=picked)[i] for i in range(3)] == [questions[r].id for r in picked]
    assert [RowIds(questions, rows=picked)[i] for i in range(3)] == [questions[r].id for r in picked]
