"""ScoreCache: a persistent (rm, question, answer) -> Score map shared between processes."""

from __future__ import annotations

import pytest

from morkit.core.types import Score
from morkit.reward_models.cache import ScoreCache, text_hash


@pytest.fixture
def cache(tmp_path):
    with ScoreCache(tmp_path / "sub" / "scores.sqlite") as c:
        yield c


def test_round_trip_values_steps_truncated(cache):
    pairs = [("q", "a"), ("q", "b"), ("q2", "a")]
    scores = [Score(0.25), Score(0.5, steps=(0.9, 0.5, 0.7)), Score(0.125, truncated=True)]
    cache.put_many("rm", pairs, scores)
    got = cache.get_many("rm", pairs)
    assert got == scores
    assert got[1].steps == (0.9, 0.5, 0.7) and isinstance(got[1].steps, tuple)
    assert got[0].steps is None and got[0].truncated is False
    assert got[2].truncated is True


def test_misses_return_none_and_counters(cache):
    cache.put_many("rm", [("q", "a")], [Score(1.0)])
    got = cache.get_many("rm", [("q", "a"), ("q", "zzz"), ("other", "a"), ("q", "a")])
    assert got == [Score(1.0), None, None, Score(1.0)]
    assert (cache.hits, cache.misses) == (2, 2)
    assert cache.get_many("rm", []) == []
    assert (cache.hits, cache.misses) == (2, 2)
    cache.get_many("rm", [("x", "y")])
    assert (cache.hits, cache.misses) == (2, 3)


def test_keys_separate_question_and_answer(cache):
    # ("ab", "c") and ("a", "bc") concatenate to the same text but are different pairs.
    cache.put_many("rm", [("ab", "c")], [Score(0.1)])
    assert cache.get_many("rm", [("a", "bc")]) == [None]
    assert text_hash("ab") != text_hash("a")


def test_rm_keys_do_not_collide(cache):
    cache.put_many("rm-a", [("q", "a")], [Score(0.1)])
    cache.put_many("rm-b", [("q", "a")], [Score(0.9, steps=(0.9,))])
    assert cache.get_many("rm-a", [("q", "a")]) == [Score(0.1)]
    assert cache.get_many("rm-b", [("q", "a")]) == [Score(0.9, steps=(0.9,))]
    assert cache.get_many("rm-c", [("q", "a")]) == [None]


def test_put_replaces(cache):
    cache.put_many("rm", [("q", "a")], [Score(0.1)])
    cache.put_many("rm", [("q", "a")], [Score(0.2, truncated=True)])
    assert cache.get_many("rm", [("q", "a")]) == [Score(0.2, truncated=True)]


def test_two_objects_on_one_file_see_each_other(tmp_path):
    path = tmp_path / "scores.sqlite"
    with ScoreCache(path) as one, ScoreCache(path) as two:
        one.put_many("rm", [("q", "a")], [Score(0.3)])
        assert two.get_many("rm", [("q", "a")]) == [Score(0.3)]
        two.put_many("rm", [("q", "b")], [Score(0.4, steps=(0.4, 0.8))])
        assert one.get_many("rm", [("q", "a"), ("q", "b")]) == [Score(0.3), Score(0.4, steps=(0.4, 0.8))]
    with ScoreCache(path) as again:  # persisted after close
        assert again.get_many("rm", [("q", "b")]) == [Score(0.4, steps=(0.4, 0.8))]


def test_many_pairs_beyond_query_chunk(cache):
    # get_many queries in chunks of 400 keys; order must follow the input across chunks.
    pairs = [(f"q{i % 7}", f"answer {i}") for i in range(1000)]
    cache.put_many("rm", pairs, [Score(float(i)) for i in range(1000)])
    wanted = pairs[::-1] + [("q0", "missing")]
    got = cache.get_many("rm", wanted)
    assert [s.value for s in got[:-1]] == [float(i) for i in range(999, -1, -1)]
    assert got[-1] is None
    assert cache.hits == 1000 and cache.misses == 1


def test_unicode_text(cache):
    cache.put_many("rm", [("¿qué?", "答え")], [Score(0.5)])
    assert cache.get_many("rm", [("¿qué?", "答え")]) == [Score(0.5)]


def test_a_path_that_cannot_hold_the_cache_is_an_input_error(tmp_path):
    import sqlite3

    from morkit.core.errors import InputError
    from morkit.reward_models.cache import cache_problem

    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE scores (name TEXT)")
    db.close()
    for path, message in ((text, "is not a SQLite score cache"), (folder, "is a directory"),
                          (text / "c.sqlite", "notes.txt is a file"), (other, "'scores' table has columns name")):
        with pytest.raises(InputError, match=message) as err:
            ScoreCache(path)
        assert err.value.path == str(path)
    assert text.read_text() == "not a database\n" and list(folder.iterdir()) == []
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")  # SQLite makes a new database in an empty file
    assert cache_problem(empty) is None and cache_problem(tmp_path / "new" / "c.sqlite") is None
    with ScoreCache(empty) as cache:
        cache.put_many("rm", [("q", "a")], [Score(0.5)])
        assert cache.get_many("rm", [("q", "a")]) == [Score(0.5)]


@pytest.mark.parametrize("fit", [False, True])
def test_a_cache_of_an_older_morkit_opens_and_its_rows_under_older_keys_simply_miss(tmp_path, fit):
    import sqlite3

    path = tmp_path / "scores.sqlite"
    with sqlite3.connect(path) as db:  # before scores kept their truncation; then beside them, in a `fit` column
        db.execute("CREATE TABLE scores (rm TEXT, q TEXT, a TEXT, value REAL, steps TEXT, truncated INTEGER, "
                   + ("fit TEXT, " if fit else "") + "PRIMARY KEY (rm, q, a))")
        db.execute("INSERT INTO scores (rm, q, a, value, truncated) VALUES (?, ?, ?, 0.7, 0)",
                   ("smollm2-orm@oldhead", text_hash("q"), text_hash("a")))
    db.close()
    with ScoreCache(path) as cache:
        assert cache.get_many("smollm2-orm;head=new;engine=transformers", [("q", "a")]) == [None]
        assert cache.get_many("smollm2-orm@oldhead", [("q", "a")]) == [Score(0.7)]
        cache.put_many("rm", [("q", "a")], [Score(0.5, truncated=True)])
        assert cache.get_many("rm", [("q", "a")]) == [Score(0.5, truncated=True)]
    with sqlite3.connect(path) as db:  # its layout is kept
        assert [row[1] for row in db.execute("PRAGMA table_info(scores)")][-1] == ("fit" if fit else "truncated")
    db.close()


def test_a_corrupt_sqlite_file_is_an_input_error(tmp_path):
    from morkit.core.errors import InputError

    path = tmp_path / "scores.sqlite"
    with ScoreCache(path) as cache:
        cache.put_many("rm", [("q", "a")], [Score(0.5)])
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # keep the header, wreck the schema page
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match="unusable score cache"):
        ScoreCache(path)


_WRITER = """
import sys
from morkit.core.types import Score
from morkit.reward_models.cache import ScoreCache
path, writer = sys.argv[1], int(sys.argv[2])
with ScoreCache(path) as cache:
    for batch in range(20):  # many small commits, interleaved with the other writers'
        pairs = [(f"q{writer}-{batch}", f"a{i}") for i in range(25)] + [("shared", f"a{batch}")]
        cache.put_many("rm", pairs, [Score(writer + i / 100) for i in range(25)] + [Score(float(batch))])
"""


def test_several_writer_processes_lose_nothing(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "scores.sqlite"
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(w)], stderr=subprocess.PIPE, text=True)
               for w in range(4)]
    errors = [(w.wait(timeout=120), w.stderr.read()) for w in writers]
    assert all(code == 0 for code, _ in errors), errors
    with ScoreCache(path) as cache:
        for w in range(4):
            pairs = [(f"q{w}-{b}", f"a{i}") for b in range(20) for i in range(25)]
            assert cache.get_many("rm", pairs) == [Score(w + i / 100) for _ in range(20) for i in range(25)]
        assert cache.get_many("rm", [("shared", f"a{b}") for b in range(20)]) == [Score(float(b)) for b in range(20)]


class CountingRM:
    """A real pair RM (answer length / 100) that counts the pairs it is asked to score."""

    name, kind = "counting-length", "orm"

    def __init__(self):
        self.pairs = 0

    def score(self, pairs):
        self.pairs += len(pairs)
        return [Score(len(answer) / 100) for _, answer in pairs]


def _queries():
    from morkit.core.types import Candidate, Query

    return [Query("q1", "What is 2+2?", (Candidate(text="4"), Candidate(text="five"))),
            Query("q2", "Name a prime", (Candidate(text="7"), Candidate(text="9")))]


def test_the_python_api_caches_by_default_in_the_clis_file(tmp_path, monkeypatch):
    import morkit
    from morkit.cli.args import scoring_options
    from morkit.cli.main import build_parser
    from morkit.reward_models.options import DEFAULT_CACHE, ScoringOptions, default_cache_path

    options = ScoringOptions()
    assert options.cache is DEFAULT_CACHE
    monkeypatch.setenv("MORKIT_CACHE_DIR", str(tmp_path / "later"))  # read when the cache opens, not when made
    assert options.cache_file() == default_cache_path() == tmp_path / "later" / "scores.sqlite"
    cli = scoring_options(build_parser().parse_args(["score", "in.jsonl", "-o", "out.jsonl"]))
    assert cli.cache is DEFAULT_CACHE and cli.cache_file() == options.cache_file()

    rm = CountingRM()
    first = morkit.score(_queries(), rms=[rm])
    assert rm.pairs == 4 and (tmp_path / "later" / "scores.sqlite").is_file()
    again = CountingRM()
    assert morkit.score(_queries(), rms=[again]) == first and again.pairs == 0  # every pair from the cache


def test_none_turns_the_cache_off(tmp_path, monkeypatch):
    import morkit
    from morkit.cli.args import scoring_options
    from morkit.cli.main import build_parser
    from morkit.reward_models.options import ScoringOptions

    monkeypatch.setenv("MORKIT_CACHE_DIR", str(tmp_path / "cache"))
    for run in (lambda rm: morkit.score(_queries(), rms=[rm], cache=None),
                lambda rm: morkit.score(_queries(), rms=[rm], options=ScoringOptions(cache=None))):
        rm = CountingRM()
        run(rm)
        assert rm.pairs == 4
    assert not (tmp_path / "cache" / "scores.sqlite").exists()
    assert ScoringOptions(cache=None).open_cache() is None
    cli = scoring_options(build_parser().parse_args(["score", "in.jsonl", "-o", "out.jsonl", "--no-cache"]))
    assert cli.cache is None


def test_the_default_survives_pickling_to_a_worker():
    import pickle

    from morkit.reward_models.options import DEFAULT_CACHE, ScoringOptions

    assert pickle.loads(pickle.dumps(ScoringOptions())).cache is DEFAULT_CACHE
    assert pickle.loads(pickle.dumps(ScoringOptions(cache="x.sqlite"))).cache_file().name == "x.sqlite"
