"""vLLM conformance of every model RM: the eight CTTS-MM architectures (tiny random checkpoints, width 128
so vLLM's CPU attention runs them) and the embedded SmolLM2 ORM and judge (real weights), each through
`--placement vllm` (the real CPU engine, morkit's plugin classes for INF-ORM, LDL, QRM and AceCode), must
match the transformers adapter. Several candidates share a question, so vLLM's prefix caching is
exercised where the model allows it. One engine at a time: the ScoringSession releases each before the next.
"""

from __future__ import annotations

import pytest

try:
    import vllm  # noqa: F401

    VLLM_ERROR = None
except Exception as err:  # noqa: BLE001 - any import failure means "cannot run here"
    VLLM_ERROR = f"vllm is not importable here: {type(err).__name__}: {err}"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(VLLM_ERROR is not None, reason=VLLM_ERROR or "")]

from fakes.ctts_checkpoints import MODELS, PAIRS, build_checkpoint  # noqa: E402

SHARED = "Compute 7*6, showing the work carefully."
CANDIDATES = PAIRS + [(SHARED, a) for a in ("42.", "7*6 = 42.\n\nSo 42.", "It is 41.\n\nNo, 42.", "6*7 is 42")]


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    from morkit.reward_models.catalog import REWARD_MODELS

    base = tmp_path_factory.mktemp("weights")
    for name in MODELS:
        build_checkpoint(name, base / REWARD_MODELS.get(name).spec.model_id, hidden=128)
    mp = pytest.MonkeyPatch()
    mp.setenv("MORKIT_WEIGHTS_DIR", str(base))
    yield base
    mp.undo()


@pytest.fixture(scope="module")
def engines():
    from morkit.reward_models.options import ScoringOptions
    from morkit.reward_models.session import ScoringSession

    models = ScoringSession(ScoringOptions.from_flags(placement="vllm", max_model_len=512, gpu_memory_utilization=0.1))
    yield models
    models.close()


def values(score) -> list[float]:
    extra = score.extra or {}
    return [score.value, *(score.steps or ()), *extra.get("quantiles", ()), *extra.get("rewards", ())]


@pytest.mark.parametrize("name", list(MODELS))
def test_vllm_matches_the_transformers_adapter(name, weights, engines):
    from morkit.reward_models.catalog import load_rm

    want = load_rm(name, device="cpu", prefix_reuse=False).score(CANDIDATES)
    got = engines[name].score(CANDIDATES)
    assert engines.resident == name and engines.loads[-1] == name
    for pair, w, g in zip(CANDIDATES, want, got):
        assert len(values(g)) == len(values(w)), (name, pair)
        diff = max(abs(a - b) for a, b in zip(values(w), values(g)))
        assert diff <= 1e-4, (name, pair, values(w), values(g))


def test_engines_were_loaded_one_at_a_time(engines):
    assert len(engines.loads) == len(set(engines.loads))  # each engine started once, never two together


@pytest.fixture(scope="module")
def smollm2_engines(engines):
    from morkit.reward_models.options import ScoringOptions
    from morkit.reward_models.session import ScoringSession

    engines.close()  # one engine at a time
    models = ScoringSession(ScoringOptions.from_flags(placement="vllm", max_model_len=512, gpu_memory_utilization=0.3))
    yield models
    models.close()


@pytest.mark.parametrize("name", ["smollm2-orm", "smollm2-judge"])
def test_embedded_rms_score_the_same_on_vllm(name, smollm2_engines):
    from morkit.reward_models.catalog import identity_of, load_rm, resolve_rm
    from morkit.reward_models.options import ScoringOptions

    engines = smollm2_engines
    pairs = [("What is 2+3?", "2+3 = 5. The answer is 5."), ("What is 2+3?", "It is 6."),
             ("Name a prime above 10.", "11 is prime."), ("What is 2+3?", "")]
    want = load_rm(name, device="cpu").score(pairs)
    got = engines[name].score(pairs)
    here = resolve_rm(name, ScoringOptions(device="cpu")).cache_key
    assert engines[name].cache_key != here  # another engine computes it: its scores are cached apart
    assert engines[name].cache_key.startswith(identity_of(name) + ";") and here.startswith(identity_of(name) + ";")
    assert max(abs(w.value - g.value) for w, g in zip(want, got)) <= 1e-3
