"""Property tests of pool loading: whatever happens to a pool's files, `load_pool` either gives a usable pool
or raises an InputError naming a file of the pool, never another exception.

One tiny pool (table RMs, a hash embedder) is built per module; each example damages a fresh copy of it:
truncation at a random offset, flipped bytes, random bytes, or a JSON value of pool.json replaced by random JSON
(or removed). A pool of an older format (questions.jsonl) with a line so damaged either upgrades
(`morkit pool upgrade`) to a usable pool or names a file, and is left as it was."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes.embedder import HashEmbedder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from question_pool.legacy_pools import to_legacy

from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.question_pool.index import search
from morkit.question_pool.pool import build_pool, load_pool

FILES = ("pool.json", "question_text.npy", "question_offsets.npy", "question_domains.npy", "scores.npy",
         "correct.npy", "valid.npy", "prr.npy", "top1.npy", "embeddings.npy", "index.faiss")
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    def query(qid, a, b, labels):
        return Query(qid, f"question {qid}", tuple(
            Candidate(f"answer {i}", correct=ok, scores={"a": a[i], "b": b[i]}) for i, ok in enumerate(labels)))

    queries = [query("q1", [3, 1, 2, 2], [0.1, 0.9, 0.5, 0.2], [True, False, True, False]),
               query("q2", [1, 2, 3], [3, 2, 1], [False, False, True]),
               query("q3", [5, 4], [1, 0], [True, True])]
    pool = build_pool(queries, HashEmbedder())
    root = tmp_path_factory.mktemp("pristine") / "pool"
    pool.save(root)
    return root


@pytest.fixture
def copy_of(pristine):
    made = []

    def fresh(legacy: bool = False) -> Path:
        folder = Path(tempfile.mkdtemp(prefix="pool-property-"))
        made.append(folder)
        shutil.copytree(pristine, folder / "pool")
        return to_legacy(folder / "pool") if legacy else folder / "pool"

    yield fresh
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def loads_or_names_a_file(root: Path) -> None:
    """The property: a usable pool, or an InputError whose path is the pool or one of its files."""
    try:
        pool = load_pool(root)
    except InputError as exc:
        assert exc.path is not None, f"InputError without a file: {exc}"
        assert Path(exc.path) == root or Path(exc.path).parent == root, exc.path
        assert str(exc).startswith(exc.path) and "\n" not in str(exc)
        return
    summary = pool.summary()  # what `morkit pool info` shows
    json.dumps(summary, default=lambda v: None)
    assert len(pool) == pool.index.ntotal == len(pool.embeddings)
    sims, ids = search(pool.index, pool.embeddings[:1], 3)
    assert ids.shape[1] <= len(pool) and ((ids >= -1) & (ids < len(pool))).all()
    for ensemble in pool.ensembles:
        assert all(m in pool.rm_names for m in ensemble.members) and all(map(math.isfinite, ensemble.weights))
    assert all(math.isfinite(pool.normalizer.scale[m]) and pool.normalizer.scale[m] > 0 for m in pool.rm_names)


@SETTINGS
@given(file=st.sampled_from(FILES), fraction=st.floats(0, 1, exclude_max=True))
def test_truncated_files(copy_of, file, fraction):
    root = copy_of()
    data = (root / file).read_bytes()
    (root / file).write_bytes(data[: int(len(data) * fraction)])
    loads_or_names_a_file(root)


@SETTINGS
@given(file=st.sampled_from(FILES), flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True),
                                                             st.integers(0, 255)), min_size=1, max_size=6))
def test_flipped_bytes(copy_of, file, flips):
    root = copy_of()
    data = bytearray((root / file).read_bytes())
    for where, value in flips:
        data[int(len(data) * where)] = value
    (root / file).write_bytes(bytes(data))
    loads_or_names_a_file(root)


@SETTINGS
@given(file=st.sampled_from(FILES), garbage=st.binary(max_size=400))
def test_random_bytes(copy_of, file, garbage):
    root = copy_of()
    (root / file).write_bytes(garbage)
    loads_or_names_a_file(root)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every position in a JSON value (the root included), as key/index tuples."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _paths(item, prefix + (i,))
    return out


def _mutated(value: Any, data: st.DataObject) -> Any:
    path = data.draw(st.sampled_from(_paths(value)))
    replacement = data.draw(JSON)
    if not path:
        return replacement
    parent = value
    for step in path[:-1]:
        parent = parent[step]
    if isinstance(parent, dict) and data.draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    return value


@SETTINGS
@given(data=st.data())
def test_random_json_in_pool_json(copy_of, data):
    root = copy_of()
    header = json.loads((root / "pool.json").read_text())
    for _ in range(data.draw(st.integers(1, 3))):
        header = _mutated(header, data)
    (root / "pool.json").write_text(json.dumps(header))  # Python's json writes NaN and Infinity as it reads them
    loads_or_names_a_file(root)


@pytest.mark.parametrize("step_rms", [None, "prm", [1], ["not-an-rm"], ["x", "x"]])
def test_a_malformed_step_rms_names_pool_json(copy_of, step_rms):
    """Found by the property above in CI: `"step_rms": null` was a TypeError, not an InputError."""
    root = copy_of()
    header = json.loads((root / "pool.json").read_text())
    header["step_rms"] = step_rms
    (root / "pool.json").write_text(json.dumps(header))
    with pytest.raises(InputError, match="malformed key 'step_rms'"):
        load_pool(root)


@SETTINGS
@given(data=st.data())
def test_random_json_in_questions(copy_of, data):
    from morkit.services.pool_upgrade import upgrade_pool

    root = copy_of(legacy=True)  # questions.jsonl: pools of format 1 and 2
    lines = [json.loads(line) for line in (root / "questions.jsonl").read_text().splitlines()]
    row = data.draw(st.integers(0, len(lines) - 1))
    lines[row] = _mutated(lines[row], data)
    (root / "questions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    before = sorted((p.name, p.read_bytes()) for p in root.iterdir())
    try:
        upgrade_pool(root)
    except InputError as exc:
        assert exc.path is not None, f"InputError without a file: {exc}"
        assert Path(exc.path) == root or Path(exc.path).parent == root, exc.path
        assert str(exc).startswith(exc.path) and "\n" not in str(exc)
        assert sorted((p.name, p.read_bytes()) for p in root.iterdir()) == before  # the old pool as it was
        assert sorted(p.name for p in root.parent.iterdir()) == [root.name]  # no temp left beside it
        return
    loads_or_names_a_file(root)


@SETTINGS
@given(file=st.sampled_from([f for f in FILES if f.endswith(".npy")]), data=st.data())
def test_arrays_of_another_shape_or_dtype(copy_of, file, data):
    root = copy_of()
    array = np.load(root / file)
    dtype = data.draw(st.sampled_from(["<f8", "<f4", "<f2", "|b1", "<i8", "<u2", "<c16", "<U2", "|S3", "<M8[s]"]))
    shape = data.draw(st.sampled_from([array.shape, array.shape[:1], array.shape + (1,), (0,) + array.shape[1:],
                                       tuple(reversed(array.shape))]))
    values = data.draw(st.sampled_from([0, 1, np.nan, np.inf, -1]))
    try:
        with np.errstate(invalid="ignore"):
            replaced = np.full(shape, values).astype(dtype)
    except (ValueError, TypeError, OverflowError):
        replaced = np.zeros(shape, dtype=dtype)
    np.save(root / file, replaced)
    loads_or_names_a_file(root)
