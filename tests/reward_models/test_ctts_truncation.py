"""Windows and truncation of the CTTS-MM adapters on tiny random models: each window comes from the checkpoint's
config (capped by a trained length its card states), a PRM drops whole steps, and a question longer than the
window is cut under every policy. The same truncation is known before loading (the score cache's key)."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from fakes.ctts_checkpoints import PAIRS, build_checkpoints  # noqa: E402

from morkit.core.errors import InputError  # noqa: E402
from morkit.reward_models.truncation import Truncation  # noqa: E402

NAMES = ("qwen2.5-math-prm-7b", "skywork-reward-v2-llama-3.1-8b", "qrm-gemma-2-27b")
SKYWORK_V2 = "skywork-reward-v2-llama-3.1-8b"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return build_checkpoints(tmp_path_factory.mktemp("ctts-windows"), NAMES)


@pytest.fixture(scope="module")
def adapters(checkpoints):
    import torch

    from morkit.reward_models.catalog import load_rm

    with torch.no_grad():
        return {name: load_rm(name, path=checkpoints[name]["root"], device="cpu") for name in NAMES}


def test_context_windows_come_from_the_config_capped_by_the_model_card(adapters, checkpoints):
    from morkit.reward_models.catalog import load_rm
    from morkit.reward_models.catalog import REWARD_MODELS

    def card(name):
        return REWARD_MODELS.get(name).spec

    for rm in adapters.values():  # the tiny configs read 512 positions
        assert rm.truncation.limit == 512 and rm.truncation.policy == "middle"
    assert card(SKYWORK_V2).context_window(131072) == 16384  # trained at 16k
    assert card("inf-orm-llama3.1-70b").context_window(131072) == 131072  # Llama-3.1's 128k
    assert card("qwen2.5-math-rm-72b").context_window(4096) == 4096
    mine = load_rm(SKYWORK_V2, path=checkpoints[SKYWORK_V2]["root"], device="cpu", truncation=Truncation(64, "left"))
    assert (mine.truncation.limit, mine.truncation.policy) == (64, "left")  # --max-tokens and --truncation win


def test_the_truncation_known_before_loading_is_the_one_the_loaded_rm_uses(checkpoints, tmp_path, monkeypatch):
    from morkit.reward_models.backends.engine_rm import EngineRM
    from morkit.reward_models.family import family_of
    from morkit.reward_models.options import ScoringOptions
    from morkit.reward_models.catalog import REWARD_MODELS, resolve_rm

    def truncation_of(name, options):
        return resolve_rm(name, options).truncation

    org = tmp_path / "weights" / "Skywork"
    org.mkdir(parents=True)
    (org / "Skywork-Reward-V2-Llama-3.1-8B-40M").symlink_to(checkpoints[SKYWORK_V2]["root"])
    monkeypatch.setenv("MORKIT_WEIGHTS_DIR", str(tmp_path / "weights"))
    for options in (ScoringOptions(device="cpu"), ScoringOptions(device="cpu", max_tokens=64, truncation="left")):
        assert (truncation_of(SKYWORK_V2, options).signature
                == resolve_rm(SKYWORK_V2, options).load().truncation.signature)
    assert truncation_of(SKYWORK_V2, ScoringOptions()).signature == "middle@window"
    # vLLM: the engine's length bounds every pair; the rm is built as VLLMEngineHandle.load builds it
    options = ScoringOptions.from_flags(placement="vllm", max_model_len=256)
    card = REWARD_MODELS.get(SKYWORK_V2).spec
    engine_rm = EngineRM(family_of(card).spec_at(card, checkpoints[SKYWORK_V2]["root"]), None,
                         options.truncation_for(True))
    assert engine_rm.truncation.limit == 256 and engine_rm.truncation.signature == "middle@window<=256"
    assert truncation_of(SKYWORK_V2, options).signature == "middle@window<=256"
    assert truncation_of(SKYWORK_V2, ScoringOptions.from_flags(urls=("http://h:1",))).signature == "middle@window"
    assert truncation_of("math-consensus", ScoringOptions()) is None  # rules never cut
    assert truncation_of("vllm", ScoringOptions()) is None  # the bare vLLM entry sends prompts as they are


def test_a_model_rm_registered_by_a_user_is_keyed_by_its_truncation_too(monkeypatch):
    from morkit.reward_models.catalog import REWARD_MODELS
    from morkit.reward_models.options import ScoringOptions
    from morkit.reward_models.catalog import resolve_rm

    REWARD_MODELS.register("my-rm", "mypkg.rms:MyRM", "a user's transformers RM", kind="orm", runs="transformers")
    try:
        assert resolve_rm("my-rm", ScoringOptions(max_tokens=512)).truncation.signature == "middle@512"
    finally:
        REWARD_MODELS.unregister("my-rm")


def test_rms_name_shows_the_window_and_where_it_comes_from(capsys, monkeypatch, tmp_path):
    from morkit.cli import main

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("MORKIT_WEIGHTS_DIR", str(tmp_path / "weights"))
    assert main(["rms", SKYWORK_V2, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["context_tokens"] is None and "weights not found here" in record["context"]
    root = tmp_path / "weights" / "Skywork" / "Skywork-Reward-V2-Llama-3.1-8B-40M"
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"max_position_embeddings": 131072}))
    assert main(["rms", SKYWORK_V2]) == 0
    assert "16,384 tokens: max_position_embeddings 131,072 in its config, capped at 16,384" in capsys.readouterr().out
    assert main(["rms", "minilm-probe", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["context_tokens"] == 256


def test_embedded_windows_are_the_same_in_the_catalog_and_the_classes():
    from morkit.reward_models.catalog import REWARD_MODELS
    from morkit.reward_models.embedded.models import MiniLMProbe, SmolLM2Judge, SmolLM2ORM

    for cls in (MiniLMProbe, SmolLM2Judge, SmolLM2ORM):
        assert REWARD_MODELS.get(cls.name).spec.window == cls.window


def test_a_prm_cut_in_the_middle_shows_its_first_and_last_steps(adapters):
    import torch

    prm = adapters["qwen2.5-math-prm-7b"]
    q, a = "x?", "\n\n".join(f"Step {i}: add two and three, then five." for i in range(4))  # 37 tokens + a tag each
    with torch.no_grad():
        whole = prm.score([(q, a)])[0]
        cut = type(prm)(prm.backbone, prm.score_head, truncation=Truncation(len(prm.render(q, a)) - 2 * 38))
        (encoded,) = cut.encode([(q, a)])
        (score,) = cut.score([(q, a)])
    assert encoded.kept_steps == (0, 3) and encoded.ids[-2:] == tuple(prm.render(q, a)[-2:])  # template end kept
    assert score.truncated and score.extra == {"kept_steps": (0, 3)} and len(score.steps) == 2
    assert score.steps[0] == pytest.approx(whole.steps[0], abs=1e-5)  # a causal model: the first step sees the same


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["middle", "right", "left", "error"])
def test_a_question_longer_than_the_window_is_cut_under_every_policy(adapters, policy):
    import torch

    question = "Why is that so? " * 60  # 960 tokens, over the 512 of these configs
    for name in NAMES:
        rm = adapters[name]
        cut = type(rm)(rm.backbone, rm.score_head, truncation=Truncation(policy=policy))
        pairs = [(question, PAIRS[5][1]), (question, PAIRS[2][1])]
        if policy == "error":
            with pytest.raises(InputError, match="over the limit of 512"):
                cut.encode(pairs)
            continue
        for enc in cut.encode(pairs):
            assert enc.truncated and enc.question_cut and len(enc.ids) <= 512
        with torch.no_grad():
            scores = cut.score(pairs)
        assert all(s.truncated and math.isfinite(s.value) for s in scores), name
