"""Pools under stress: overflowing scores, corrupt files, concurrent writers, atomic replacement, the temps
of killed writers, and embedder names from pool.json that must not reach the model hub."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from fakes.embedder import HashEmbedder

from morkit.cli import main
from morkit.core.errors import InputError
from morkit.core.types import Candidate, Query
from morkit.data import staging
from morkit.question_pool import lock, store
from morkit.question_pool.pool import PoolConfig, add_questions, build_pool, load_pool

TESTS = Path(__file__).resolve().parents[1]  # tests/, whose fakes/ the children import


def _query(qid, scores_by_rm, labels, question=None):
    cands = tuple(Candidate(text=f"answer {i}", correct=ok, scores={rm: v[i] for rm, v in scores_by_rm.items()})
                  for i, ok in enumerate(labels))
    return Query(qid, question or f"question {qid}", cands, domain="math")


def _queries(prefix="q", n=4, big=None):
    out = []
    for i in range(n):
        a = [3.0 + i, 1.0, 2.0] if big is None else [big, -big, big / 2]
        out.append(_query(f"{prefix}{i}", {"a": a, "b": [0.1 * i, 0.9, 0.5]}, [True, False, i % 2 == 0]))
    return out


def _child(code: str, *args: str, **popen) -> subprocess.Popen:
    """A Python child running `code` with the tests folder importable (fakes.embedder's HashEmbedder)."""
    prelude = f"import sys; sys.path.insert(0, {str(TESTS)!r})\n"
    return subprocess.Popen([sys.executable, "-c", prelude + textwrap.dedent(code), *args], **popen)


def _listing(folder: Path) -> list[str]:
    """The folder's entries, but the score cache conftest puts in every test's tmp_path."""
    return sorted(p.name for p in folder.iterdir() if p.name != "morkit-cache")


def _wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


# ---- 1. derived values must be finite, so a built pool always loads ----------------------------------

def test_scores_near_the_float_limit_are_refused_naming_rm_and_question(tmp_path):
    with pytest.raises(InputError, match=r"^a: its scores are too large to zscore-normalise .*question 'q0'"):
        build_pool(_queries(big=1e308), HashEmbedder())
    with pytest.raises(InputError, match=r"^a: .*scale inf"):  # the mean is finite, the spread overflows
        build_pool(_queries(big=1e200), HashEmbedder())
    # raw scores are not normalised, but an ensemble adding two of them overflows
    both = [_query(f"q{i}", {"a": [1e308, -1e308, 0.0], "b": [1e308, 0.0, -1e308]}, [True, False, i == 0])
            for i in range(3)]
    with pytest.raises(InputError, match=r"question 'q0': the scores of ensemble a\+b@\w+ overflow"):
        build_pool(both, HashEmbedder(), config=PoolConfig(normalizer="raw"))


def test_adding_overflowing_scores_names_the_question(tmp_path):
    small = [_query(f"q{i}", {"a": [0.3, 0.1, 0.01 * i], "b": [0.1 * i, 0.9, 0.5]}, [True, False, False])
             for i in range(4)]
    pool = build_pool(small, HashEmbedder())  # a's scale is about 0.1: 1e308 / 0.1 overflows
    huge = [_query("huge", {"a": [1e308, -1e308], "b": [0.1, 0.2]}, [True, False])]
    with pytest.raises(InputError, match=r"question 'huge': a scores candidate 0 1e\+308, too large"):
        add_questions(pool, huge, HashEmbedder())


def test_a_tiny_softmax_temperature_gives_finite_weights_and_a_loadable_pool(tmp_path):
    pool = build_pool(_queries(), HashEmbedder(), config=PoolConfig(temperature=1e-320))
    soft = [e for e in pool.ensembles if e.weighting == "softmax"]
    assert soft and all(math.isfinite(w) for e in soft for w in e.weights)
    assert all(sorted(e.weights)[-1] == 1.0 for e in soft)  # the better member takes all the weight
    pool.save(tmp_path / "p")
    assert load_pool(tmp_path / "p").ensembles == pool.ensembles


def test_save_refuses_non_finite_header_values_and_writes_nothing(tmp_path):
    from dataclasses import replace

    pool = build_pool(_queries(), HashEmbedder())
    bad = replace(pool, meta={**pool.meta, "stacker": {"members": ["a"], "weights": [float("nan")]}})
    with pytest.raises(InputError, match=r"stacker\.weights\[0\] is nan"):
        bad.save(tmp_path / "p")
    assert not (tmp_path / "p").exists() and _listing(tmp_path) == []


def test_cli_build_of_overflowing_scores_exits_2_and_writes_no_pool(tmp_path, capsys, embedder):
    src = tmp_path / "big.jsonl"
    with open(src, "w") as out:
        for q in _queries(big=1e308):
            out.write(json.dumps({"id": q.id, "question": q.question, "candidates": [
                {"text": c.text, "correct": c.correct, "scores": dict(c.scores)} for c in q.candidates]}) + "\n")
    assert main(["pool", "build", str(src), "-o", str(tmp_path / "pool"), "--device", "cpu", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "too large" in err and "'q0'" in err and "Warning" not in err
    assert not (tmp_path / "pool").exists()


# ---- 2. corrupt files: an InputError naming the file -----------------------------------------------

def _edit(root: Path, change) -> None:
    header = json.loads((root / "pool.json").read_text())
    change(header)
    (root / "pool.json").write_text(json.dumps(header))


def _huge_npy(file: Path) -> None:
    """A valid .npy header that claims ~10^15 float64 values, followed by a few bytes."""
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f8", "fortran_order": False,
                                                   "shape": (10**5, 10**5, 10**5)})
    file.write_bytes(buffer.getvalue() + b"\0" * 64)


CORRUPTIONS = {
    "empty scores.npy": ("scores.npy", lambda d: (d / "scores.npy").write_bytes(b"")),
    "empty embeddings.npy": ("embeddings.npy", lambda d: (d / "embeddings.npy").write_bytes(b"")),
    "truncated prr.npy": ("prr.npy", lambda d: (d / "prr.npy").write_bytes((d / "prr.npy").read_bytes()[:-5])),
    "huge declared shape": ("scores.npy", lambda d: _huge_npy(d / "scores.npy")),
    "wrong dtype": ("valid.npy", lambda d: np.save(d / "valid.npy", np.zeros(np.load(d / "valid.npy").shape, "U3"))),
    "non-finite embedding": ("embeddings.npy", lambda d: np.save(
        d / "embeddings.npy", np.full(np.load(d / "embeddings.npy").shape, np.nan, np.float32))),
    "empty index": ("index.faiss", lambda d: (d / "index.faiss").write_bytes(b"")),
    "truncated index": ("index.faiss", lambda d: (d / "index.faiss").write_bytes(
        (d / "index.faiss").read_bytes()[:40])),
    "garbage index": ("index.faiss", lambda d: (d / "index.faiss").write_bytes(os.urandom(300))),
    "L2 index": ("index.faiss", lambda d: __import__("faiss").write_index(__import__("faiss").IndexFlatL2(16),
                                                                           str(d / "index.faiss"))),
    "pool.json a list": ("pool.json", lambda d: (d / "pool.json").write_text("[1, 2]")),
    "pool.json deeply nested": ("pool.json", lambda d: (d / "pool.json").write_text("[" * 100000)),
    "pool.json huge int": ("pool.json", lambda d: (d / "pool.json").write_text('{"format_version": 1' + "0" * 5000
                                                                                + "}")),
    "rm_names a string": ("pool.json", lambda d: _edit(d, lambda h: h.update(rm_names="ab"))),
    "revision a string": ("pool.json", lambda d: _edit(d, lambda h: h.update(revision="1"))),
    "embedder dim a string": ("pool.json", lambda d: _edit(d, lambda h: h["embedder"].update(dim="16"))),
    "shapes a list": ("pool.json", lambda d: _edit(d, lambda h: h.update(shapes=[1, 2]))),
    "history entries not objects": ("pool.json", lambda d: _edit(d, lambda h: h.update(history=[1]))),
    "member not in rm_names": ("pool.json", lambda d: _edit(d, lambda h: h["ensembles"][-1].update(
        members=["a", "ghost"]))),
    "singles out of order": ("pool.json", lambda d: _edit(d, lambda h: h["ensembles"].reverse())),
    "null normaliser": ("pool.json", lambda d: _edit(d, lambda h: h["normalizer"]["scale"].update(a=None))),
    "infinite weight": ("pool.json", lambda d: _edit(d, lambda h: h["ensembles"][-1].update(
        weights=[float("inf"), 1.0]))),  # json writes Infinity, which Python's reader accepts
    "unknown normaliser": ("pool.json", lambda d: _edit(d, lambda h: h["config"].update(normalizer="cube"))),
    "question offsets out of order": ("question_offsets.npy", lambda d: np.save(
        d / "question_offsets.npy", np.load(d / "question_offsets.npy")[::-1].copy())),
    "question domain code unknown": ("question_domains.npy", lambda d: np.save(
        d / "question_domains.npy", np.load(d / "question_domains.npy") + 7)),
    "question text not UTF-8": ("question_text.npy", lambda d: np.save(
        d / "question_text.npy", np.full_like(np.load(d / "question_text.npy"), 0xFF))),
    "question id twice": ("question_text.npy", lambda d: np.save(
        d / "question_text.npy", np.frombuffer(np.load(d / "question_text.npy").tobytes().replace(b"q1", b"q0"),
                                               np.uint8))),
    "question_domains not names": ("pool.json", lambda d: _edit(d, lambda h: h.update(question_domains=[1]))),
    "applicability domains a number": ("pool.json", lambda d: _edit(d, lambda h: h.update(
        applies={"a": {"domains": 5, "fields": []}}))),
}


@pytest.fixture
def saved_pool(tmp_path):
    pool = build_pool(_queries(), HashEmbedder())
    pool.save(tmp_path / "pool")
    return tmp_path / "pool"


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupt_pool_files_are_one_line_input_errors_naming_the_file(saved_pool, case, capsys):
    file, damage = CORRUPTIONS[case]
    damage(saved_pool)
    with pytest.raises(InputError) as caught:
        load_pool(saved_pool)
    assert caught.value.path == str(saved_pool / file), str(caught.value)
    assert main(["pool", "info", str(saved_pool)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"morkit: error: {saved_pool / file}:") and err.count("\n") == 1  # :LINE: for JSONL


def test_a_pool_replaced_while_it_is_read_is_read_again(saved_pool, monkeypatch):
    """A reader that opened pool.json of one revision and arrays of the next must not mix them."""
    pool = load_pool(saved_pool)
    grown = add_questions(pool, _queries("n", 2), HashEmbedder())
    real, calls = store._questions, []

    def racing(*args):
        out = real(*args)
        if not calls:
            calls.append(args)
            grown.save(saved_pool)  # another writer, between this reader's pool.json and its arrays
        return out

    monkeypatch.setattr(store, "_questions", racing)
    loaded = load_pool(saved_pool)
    assert len(loaded) == len(grown) and loaded.meta["revision"] == 2


# ---- 3. concurrent writers ---------------------------------------------------------------------------

ADD = """
    import sys, time
    from pathlib import Path
    from fakes.embedder import HashEmbedder
    import morkit.services.pools as pools
    from morkit.core.types import Candidate, Query
    pools.load_embedder = lambda name, device=None: HashEmbedder()
    real = pools.add_questions
    def slow(*args, **kwargs):  # keep each writer's read-modify-write wide open
        time.sleep(0.5)
        return real(*args, **kwargs)
    pools.add_questions = slow
    prefix, path, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    queries = [Query(f"{prefix}{i}", f"{prefix} question {i}", (
        Candidate("x", correct=True, scores={"a": 1.0 + i, "b": 0.2}),
        Candidate("y", correct=False, scores={"a": 0.0, "b": 0.4}))) for i in range(3)]
    while not go.exists():
        time.sleep(0.005)
    pools.add_to_saved_pool(path, queries)
"""


@pytest.mark.slow
def test_two_processes_adding_to_one_pool_keep_both_sets(saved_pool, tmp_path):
    go = tmp_path / "go"
    children = [_child(ADD, prefix, str(saved_pool), str(go), stderr=subprocess.PIPE, text=True)
                for prefix in ("left", "right")]
    time.sleep(1.0)  # both children imported morkit and wait
    go.touch()
    for child in children:
        _, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
    pool = load_pool(saved_pool)
    ids = {q.id for q in pool.questions}
    assert {f"{p}{i}" for p in ("left", "right") for i in range(3)} <= ids and len(pool) == 4 + 6
    assert pool.meta["revision"] == 3 and pool.index.ntotal == 10 and "stacker" not in pool.meta  # retired slot
    assert _listing(tmp_path) == ["go", "pool"]  # no lock file, no temps left


def test_saving_a_stale_revision_fails_instead_of_losing_questions(saved_pool):
    one, two = load_pool(saved_pool), load_pool(saved_pool)
    add_questions(one, _queries("one", 2), HashEmbedder()).save(saved_pool)
    with pytest.raises(InputError, match="another process saved this pool after it was loaded"):
        add_questions(two, _queries("two", 2), HashEmbedder()).save(saved_pool)
    assert {"one0", "one1"} <= {q.id for q in load_pool(saved_pool).questions}
    fresh = build_pool(_queries("new", 2), HashEmbedder())
    fresh.save(saved_pool)  # a new build replaces whatever is there
    grown = add_questions(fresh, _queries("more", 2), HashEmbedder())
    grown.save(saved_pool)  # saved from the revision this process wrote: no conflict
    assert len(load_pool(saved_pool)) == 4


HOLD = """
    import sys, time
    from pathlib import Path
    from morkit.question_pool.lock import pool_lock
    with pool_lock(sys.argv[1]):
        Path(sys.argv[2]).touch()
        time.sleep(120)
"""


def test_a_held_lock_times_out_naming_the_pool_and_dies_with_its_holder(saved_pool, tmp_path):
    held = tmp_path / "held"
    child = _child(HOLD, str(saved_pool), str(held))
    try:
        _wait_for(held)
        started = time.monotonic()
        where = re.escape(str(lock.canonical(saved_pool)))
        with pytest.raises(InputError, match=rf"^{where}: another process is writing this pool \(waited 0.3 s"):
            with lock.pool_lock(saved_pool, timeout=0.3):
                pass
        assert 0.3 <= time.monotonic() - started < 5
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with lock.pool_lock(saved_pool, timeout=5):  # a killed holder's flock is gone with it
        with lock.pool_lock(saved_pool, timeout=0):  # re-entrant in one process
            pass


def test_a_file_system_without_locks_is_an_error_naming_the_lock_file(saved_pool, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    pool = load_pool(saved_pool)
    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.raises(InputError, match="cannot lock the pool's lock file") as caught:
        pool.save(saved_pool)
    assert caught.value.path == str(lock.lock_path(saved_pool)) and load_pool(saved_pool).questions == pool.questions
    assert str(caught.value).endswith("(build it on a local disk, then move it)")


# ---- 4. atomic replacement ---------------------------------------------------------------------------

WATCH = """
    import os, sys
    path, stop, ready = sys.argv[1], sys.argv[2], sys.argv[3]
    open(ready, "w").close()
    missing = 0
    while not os.path.exists(stop):
        if not os.path.exists(path):
            missing += 1
    print(missing)
"""


def test_the_pool_never_disappears_while_it_is_replaced(saved_pool, tmp_path, monkeypatch):
    """A reader polling pool.json during repeated saves always finds it (renameat2 RENAME_EXCHANGE)."""
    real_replace, real_rename = os.replace, os.rename

    def slow(move):
        def moved(src, dst, *args, **kwargs):
            move(src, dst, *args, **kwargs)
            if str(tmp_path) in str(dst):
                time.sleep(0.003)  # widen any moment between two renames so a reader surely sees it
        return moved

    monkeypatch.setattr(os, "replace", slow(real_replace))
    monkeypatch.setattr(os, "rename", slow(real_rename))
    pool = load_pool(saved_pool)
    stop, ready = tmp_path / "stop", tmp_path / "ready"
    watcher = _child(WATCH, str(saved_pool / "pool.json"), str(stop), str(ready), stdout=subprocess.PIPE, text=True)
    try:
        _wait_for(ready)
        for _ in range(20):
            pool.save(saved_pool)
    finally:
        stop.touch()
        out, _ = watcher.communicate(timeout=60)
    assert int(out) == 0
    assert load_pool(saved_pool).questions == pool.questions


def test_exchange_swaps_two_directories_and_the_fallback_still_replaces(saved_pool, tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "x").write_text("a"), (b / "x").write_text("b")
    assert staging.exchange(a, b)
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"
    monkeypatch.setattr(staging, "exchange", lambda one, two: False)  # a file system without RENAME_EXCHANGE
    pool = load_pool(saved_pool)
    grown = add_questions(pool, _queries("n", 1), HashEmbedder())
    grown.save(saved_pool)
    assert len(load_pool(saved_pool)) == len(grown)
    assert _listing(tmp_path) == ["a", "b", "pool"]


def test_a_save_interrupted_between_its_two_renames_is_restored(saved_pool, tmp_path):
    """Where the exchange is not supported, a writer killed between its two renames leaves the old pool
    moved aside and none at the target: the next reader (or writer) puts it back, before any sweep."""

    before = load_pool(saved_pool)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    aside = tmp_path / f".pool.{staging._host()}-{int(gone.stdout)}.k1ll3d.old"
    aside.mkdir()
    os.rename(saved_pool, aside / "pool")
    assert load_pool(saved_pool).questions == before.questions
    assert _listing(tmp_path) == ["pool"]


@pytest.mark.parametrize("make", [lambda p: p.write_text("my notes"), lambda p: p.symlink_to(p.parent / "nowhere")])
def test_save_never_replaces_a_file_or_a_link(tmp_path, make):
    target = tmp_path / "target"
    make(target)
    with pytest.raises(InputError, match="exists and is not a pool directory"):
        build_pool(_queries(), HashEmbedder()).save(target)
    assert os.path.lexists(target) and not target.is_dir()


# ---- 5. the temps of killed writers ------------------------------------------------------------------

WRITE_AND_HANG = """
    import sys, time
    from morkit.data.jsonl import atomic_path
    with atomic_path(sys.argv[1]) as tmp:
        tmp.write_bytes(b"x" * 1_000_000)
        print(tmp, flush=True)
        time.sleep(120)
"""

SAVE_AND_HANG = """
    import sys, time
    from morkit.question_pool import store
    from morkit.question_pool.pool import load_pool
    def hang(index, path):
        print(path.parent, flush=True)
        time.sleep(120)
    store.write_index = hang
    load_pool(sys.argv[1]).save(sys.argv[2])
"""


def _killed(code: str, *args: str) -> Path:
    """Run a writer until it reports its temp, SIGKILL it, and return the temp it left."""
    child = _child(code, *args, stdout=subprocess.PIPE, text=True)
    try:
        left = Path(child.stdout.readline().strip())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert left.exists() and left.name.startswith(".") and left.name.endswith(".tmp")
    return left


def test_a_killed_writers_temp_file_is_removed_by_the_next_write(tmp_path):
    from morkit.data.jsonl import write_jsonl

    target = tmp_path / "out.jsonl"
    left = _killed(WRITE_AND_HANG, str(target))
    other = tmp_path / ".other.jsonl.a1b2c3d4-1.zzzz.tmp"  # another target's temp: not ours to remove
    other.write_text("")
    write_jsonl(target, [{"id": "x"}])
    assert not left.exists()
    assert _listing(tmp_path) == [other.name, "out.jsonl"]


def test_a_killed_pool_writers_staging_directory_is_removed_by_the_next_save(saved_pool, tmp_path):
    target = tmp_path / "copy"
    left = _killed(SAVE_AND_HANG, str(saved_pool), str(target))
    assert left.is_dir() and left.parent == tmp_path
    load_pool(saved_pool).save(target)
    assert not left.exists()
    assert _listing(tmp_path) == ["copy", "pool"]


def test_sweep_keeps_live_and_recent_temps_and_removes_old_ones(tmp_path):
    target = tmp_path / "out.jsonl"
    live = staging.make_temp(target)  # this process's: alive
    old_dir = tmp_path / f".out.jsonl.{staging._host()}-{os.getpid()}.q1w2e3.old"  # ours but two days old
    lookalike = tmp_path / ".out.jsonl.backup"  # not a temp name
    lookalike.write_text("")
    old_dir.mkdir()
    (old_dir / "pool").mkdir()
    two_days = time.time() - 2 * 24 * 3600
    for path in (old_dir, lookalike):
        os.utime(path, (two_days, two_days))
    assert staging.sweep(target) == 1
    assert _listing(tmp_path) == sorted([live.name, lookalike.name])


# ---- 6. embedder names from pool.json do not reach the hub -------------------------------------------

class _Recorder(BaseHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        type(self).requests.append(self.path)
        self.send_response(404)
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def hub():
    _Recorder.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.requests
    server.shutdown()
    server.server_close()


def _online_env(tmp_path, endpoint):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                                                            "MORKIT_ALLOW_DOWNLOADS")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf-home"), NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    return env


@pytest.mark.slow
def test_select_with_an_embedder_named_by_pool_json_makes_no_hub_request(saved_pool, tmp_path, hub, monkeypatch):
    endpoint, requests = hub
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    _edit(saved_pool, lambda h: h["embedder"].update(name="someone/evil-model"))
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"id": "x", "question": "What is 2+2?", "candidates": [
        {"text": "4", "scores": {"a": 1.0, "b": 0.5}}, {"text": "5", "scores": {"a": 0.0, "b": 0.1}}]}) + "\n")
    out = tmp_path / "selected.jsonl"
    done = subprocess.run([sys.executable, "-m", "morkit.cli", "select", str(queries), "--pool", str(saved_pool),
                           "-o", str(out), "--device", "cpu", "-q"], env=_online_env(tmp_path, endpoint),
                          capture_output=True, text=True, timeout=300)
    assert requests == []
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "'someone/evil-model'" in done.stderr
    assert "MORKIT_ALLOW_DOWNLOADS=1" in done.stderr
    assert not out.exists()


@pytest.mark.slow
def test_the_download_opt_in_lets_a_load_reach_the_hub(tmp_path, hub, monkeypatch):
    """The other side of the rule: with MORKIT_ALLOW_DOWNLOADS=1 the (recording) hub is asked."""
    endpoint, requests = hub
    code = """
        import sys
        from morkit.core.errors import UnavailableError
        from morkit.question_pool.embed import load_embedder
        try:
            load_embedder("someone/evil-model", "cpu")
        except UnavailableError as exc:
            print(exc)
    """
    env = {**_online_env(tmp_path, endpoint), "MORKIT_ALLOW_DOWNLOADS": "1"}
    child = _child(code, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    assert "cannot load embedder 'someone/evil-model'" in out and requests
