"""Shared fixtures: real embedded models load once per test session; caches go to a temp dir.
The fakes themselves live in tests/fakes/; this file only hands them out as fixtures."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from fakes.embedder import HashEmbedder

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# morkit caches scores (and embeddings beside them) by default, in $MORKIT_CACHE_DIR: the suite sets it to a folder
# of its own for the session (each test then gets its own, below), so no test reads or writes the user's cache.
# Only the converted model checkpoints of the real cache folder are shared, through a link (they are slow to make).
from morkit.core.settings import cache_dir  # noqa: E402 (reads the environment when called: nothing at import)

REAL_MODELS = cache_dir() / "models"
SESSION_CACHE = Path(tempfile.mkdtemp(prefix="morkit-test-cache-"))
atexit.register(shutil.rmtree, SESSION_CACHE, ignore_errors=True)
REAL_MODELS.mkdir(parents=True, exist_ok=True)
(SESSION_CACHE / "models").symlink_to(REAL_MODELS, target_is_directory=True)
os.environ["MORKIT_CACHE_DIR"] = str(SESSION_CACHE)

# The public data sets: $MORKIT_DATA_DIR, else the shared/ folder beside this checkout (the project's layout).
DATA_DIR = Path(os.environ.get("MORKIT_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")
if DATA_DIR.is_dir():
    os.environ.setdefault("MORKIT_DATA_DIR", str(DATA_DIR))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA_DIR.is_dir():
        pytest.skip(f"shared data not found at {DATA_DIR}")
    return DATA_DIR


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray (127.0.0.1, 2 CPUs) for every embedding and scoring test on Ray: started once, as a second
    start costs half a minute. A test module shipping its own classes to the actors registers itself by value."""
    ray = pytest.importorskip("ray")
    from morkit.reward_models.backends.ray import connect

    if ray.is_initialized():
        ray.shutdown()
    os.environ.pop("RAY_ADDRESS", None)
    connect("auto", num_cpus=2, _node_ip_address="127.0.0.1")
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True)
def _isolated_score_cache(tmp_path, monkeypatch):
    """Keep score caches per test, but share the converted model checkpoint (it is slow to make)."""
    monkeypatch.setenv("MORKIT_CACHE_DIR", str(tmp_path / "morkit-cache"))
    (tmp_path / "morkit-cache").mkdir()
    (tmp_path / "morkit-cache" / "models").symlink_to(REAL_MODELS, target_is_directory=True)


@pytest.fixture(scope="session")
def smollm2():
    from morkit.reward_models.embedded.models import load_smollm2

    return load_smollm2("cpu")


@pytest.fixture(scope="session")
def minilm():
    from morkit.reward_models.embedded.models import load_minilm

    return load_minilm("cpu")


@pytest.fixture(scope="session")
def gsm8k_pairs(data_dir) -> list[tuple[str, str, bool]]:
    """Real (question, answer, correct) triples from held-out GSM8K questions, of varied length."""
    from morkit.data.datasets import gsm8k_model_solutions

    queries = gsm8k_model_solutions(data_dir)[700:703]
    return [(q.question, c.text, bool(c.correct)) for q in queries for c in q.candidates]


@pytest.fixture(scope="session")
def embedder():
    """The real default question embedder (all-MiniLM-L6-v2 via sentence-transformers)."""
    from morkit.question_pool.embed import load_embedder

    return load_embedder(None, "cpu")


@pytest.fixture
def hash_embedder():
    return HashEmbedder()


# The papers' texts, for the quote checks: $MORKIT_PAPERS_DIR, else the shared/ folder beside this checkout.
PAPERS_DIR = Path(os.environ.get("MORKIT_PAPERS_DIR") or Path(__file__).resolve().parents[2] / "shared" / "papers")


@pytest.fixture(scope="session")
def papers_dir() -> Path:
    """The folder of the papers' texts (ctts-mm.txt, tmas.txt, ...); a quote check fails, never skips, without it."""
    if not PAPERS_DIR.is_dir():
        pytest.fail(f"paper texts not found at {PAPERS_DIR}: set MORKIT_PAPERS_DIR to the folder of the papers' .txt",
                    pytrace=False)
    return PAPERS_DIR


@pytest.fixture(scope="session")
def paper_text(papers_dir):
    """`paper_text("tmas")` -> the text of papers_dir/tmas.txt, whitespace runs as one space and curly quotes
    straight; a missing file fails."""

    def read(name: str) -> str:
        path = papers_dir / (name if name.endswith(".txt") else f"{name}.txt")
        if not path.is_file():
            pytest.fail(f"paper text not found: {path}", pytrace=False)
        text = path.read_text(encoding="utf-8").translate(str.maketrans("\u201c\u201d\u2018\u2019", "\"\"''"))
        return " ".join(text.split())

    return read
