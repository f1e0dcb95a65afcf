"""Conformance of the eight CTTS-MM adapters on tiny random models of the real architectures.

Each checkpoint (tests/fakes/ctts_checkpoints.py) is written the way the real one is laid out (backbone `model.*` or bare, head
tensors under their real names, LDL heads as .pt files), with a character-level tokenizer carrying
the family's special tokens and a compact chat template of that family. Expected token ids are
built by hand here; expected scores come from a plain backbone forward plus the head math written
out in this file, never from the adapter's own modules.
"""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from fakes.ctts_checkpoints import (  # noqa: E402
    BOS,
    H,
    MODELS,
    PAIRS,
    QWEN_DEFAULT_SYSTEM,
    build_checkpoints,
    save_tensors,
)

from morkit.core.errors import UnavailableError  # noqa: E402
from morkit.reward_models.backends.hf import Batching  # noqa: E402


class S(str):
    """A special token in a hand-built rendering."""


def hand_ids(vocab: dict[str, int], pieces: list[str]) -> list[int]:
    out: list[int] = []
    for piece in pieces:
        out += [vocab[piece]] if isinstance(piece, S) else [vocab[c] for c in piece]
    return out


def hand_render(family: str, name: str, q: str, a: str) -> list[str]:
    if family == "qwen":
        system = ("Please reason step by step, and put your final answer within \\boxed{}." if "math" in name
                  else QWEN_DEFAULT_SYSTEM)
        if name == "qwen2.5-math-prm-7b":
            steps = [s.strip() for s in a.split("\n\n") if s.strip()]
            body: list[str] = []
            for step in steps:
                body += [step, S("<extra_0>")]
        else:
            body = [a]
        return [S("<|im_start|>"), "system\n" + system, S("<|im_end|>"), "\n", S("<|im_start|>"), "user\n" + q,
                S("<|im_end|>"), "\n", S("<|im_start|>"), "assistant\n", *body, S("<|im_end|>"), "\n"]
    if family == "llama":
        return [S("<|begin_of_text|>"), S("<|start_header_id|>"), "user", S("<|end_header_id|>"), "\n\n" + q.strip(),
                S("<|eot_id|>"), S("<|start_header_id|>"), "assistant", S("<|end_header_id|>"), "\n\n" + a.strip(),
                S("<|eot_id|>")]
    return [S("<bos>"), S("<start_of_turn>"), "user\n" + q.strip(), S("<end_of_turn>"), "\n", S("<start_of_turn>"),
            "model\n" + a.strip(), S("<end_of_turn>"), "\n"]


# -- manual score math, independent of morkit's head modules ------------------------------------

def manual_score(name: str, ref: dict, hidden, ids: list[int]):
    """The model's score from one sequence's hidden states (L, h) and ids, written out by hand."""
    h = hidden[-1]
    if name in ("qwen2.5-math-rm-72b", "inf-orm-llama3.1-70b", "skywork-reward-gemma-2-27b",
                "skywork-reward-v2-llama-3.1-8b", "acecoderm-32b"):
        return float(ref["head"](h)[0])
    if name == "qwen2.5-math-prm-7b":
        step = ref["vocab"]["<extra_0>"]
        rows = hidden[[i for i, t in enumerate(ids) if t == step]]
        return torch.softmax(ref["head"](rows), dim=-1)[:, 1].tolist()
    if name == "ldl-reward-gemma-2-27b":
        dists = torch.softmax(ref["reg"](h).view(22, 10), dim=-1)
        mix = ref["gate"](h) @ dists
        return float((mix * torch.linspace(0, 1, 10)).sum())
    t = ref["qrm"]
    x = _gating_state(ref, hidden, ids)
    for i in range(3):
        bn = f"gating.layers.{3 * i + 2}"
        x = torch.relu(x @ t[f"gating.layers.{3 * i}.weight"].T)
        x = (x - t[f"{bn}.running_mean"]) / torch.sqrt(t[f"{bn}.running_var"] + 1e-5) * t[f"{bn}.weight"] + t[f"{bn}.bias"]
    gate = torch.softmax((x @ t["gating.layers.9.weight"].T + t["gating.layers.9.bias"]) / 10, dim=0) * 1.5
    rewards = (t["regression_layer.weight"] @ h).view(5, ref["n_q"])
    expectation = rewards.mean(dim=1) @ t["reward_transform_matrix"]
    quantiles = (rewards.T @ t["reward_transform_matrix"]) @ gate
    return float((gate * expectation).sum()), quantiles.tolist()


def _gating_state(ref: dict, hidden, ids: list[int]):
    v = ref["vocab"]
    pattern = [v["<end_of_turn>"], v["\n"], v["<start_of_turn>"], v["m"], v["o"], v["d"], v["e"], v["l"], v["\n"]]
    starts = [j for j in range(len(ids) - len(pattern) + 1) if ids[j:j + len(pattern)] == pattern]
    return hidden[starts[-1]]


def forward_padded(backbone, seqs: list[list[int]], side: str) -> list:
    """Hidden states of each sequence from one padded batch (left padding uses mask-derived positions)."""
    width = max(map(len, seqs))
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(seqs):
        span = slice(width - len(seq), width) if side == "left" else slice(0, len(seq))
        ids[row, span] = torch.tensor(seq)
        mask[row, span] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        hidden = backbone(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
    return [hidden[r, width - len(s):] if side == "left" else hidden[r, : len(s)] for r, s in enumerate(seqs)]


def close(a, b, tol=1e-4) -> bool:
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(close(x, y, tol) for x, y in zip(a, b))
    return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(b)))


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return build_checkpoints(tmp_path_factory.mktemp("ctts"), MODELS)


@pytest.fixture(scope="module")
def adapters(checkpoints):
    from morkit.reward_models.catalog import load_rm

    out = {}
    for name in MODELS:  # through the catalog: the registered target is what is tested
        out[name] = load_rm(name, path=checkpoints[name]["root"], device="cpu", batching=Batching(max_batch=8))
    return out


@pytest.fixture(autouse=True)
def _no_grad():
    with torch.no_grad():
        yield


NAMES = list(MODELS)


@pytest.mark.parametrize("name", NAMES)
def test_token_ids_match_hand_rendering_with_one_bos(name, adapters, checkpoints):
    rm, ref = adapters[name], checkpoints[name]
    bos = BOS[ref["family"]]
    for q, a in PAIRS:
        ids = rm.render(q, a)
        assert ids == hand_ids(ref["vocab"], hand_render(ref["family"], name, q, a)), (q, a)
        if bos:
            assert ids[0] == ref["vocab"][bos] and ids.count(ref["vocab"][bos]) == 1
    # what actually reaches the model is the same: capture the backbone's inputs
    seen = []
    hook = rm.backbone.model.register_forward_pre_hook(lambda m, args, kw: seen.append(kw["input_ids"].clone()),
                                                       with_kwargs=True)
    try:
        rm.score([PAIRS[0]])
    finally:
        hook.remove()
    assert seen[0][0].tolist() == rm.render(*PAIRS[0])


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_scores_equal_manual_head_math_at_any_batch_size_and_padding_side(name, adapters, checkpoints):
    rm, ref = adapters[name], checkpoints[name]
    pairs = [p for p in PAIRS if rm.empty_score is None or p[1].strip()]
    seqs = [rm.render(q, a) for q, a in pairs]
    single = [forward_padded(ref["backbone"], [s], "right")[0] for s in seqs]
    expected = [manual_score(name, ref, hid, s) for hid, s in zip(single, seqs)]
    for side in ("left", "right"):
        padded = forward_padded(ref["backbone"], seqs, side)
        assert all(close(manual_score(name, ref, hid, s), e) for hid, s, e in zip(padded, seqs, expected)), side
    batched = rm.score(pairs)
    rm.batching = Batching(max_batch=1)
    try:
        one_by_one = rm.score(pairs)
    finally:
        rm.batching = Batching(max_batch=8)
    for got, alone, want in zip(batched, one_by_one, expected):
        if name == "qwen2.5-math-prm-7b":
            assert close(list(got.steps), want) and close(list(alone.steps), want)
            assert close(got.value, min(want))
        elif name == "qrm-gemma-2-27b":
            assert close(got.value, want[0]) and close(alone.value, want[0])
            assert close(list(got.extra["quantiles"]), want[1]) and len(got.extra["quantile_levels"]) == ref["n_q"]
        else:
            assert close(got.value, want) and close(alone.value, want)
        assert not got.truncated


def test_sequence_classifier_checkpoints_agree_with_transformers_own_class(adapters, checkpoints):
    for name in ("skywork-reward-gemma-2-27b", "skywork-reward-v2-llama-3.1-8b"):
        rm, full = adapters[name], checkpoints[name]["full"]
        q, a = PAIRS[2]
        with torch.no_grad():
            want = full(input_ids=torch.tensor([rm.render(q, a)])).logits[0, 0]
        assert close(rm.score([(q, a)])[0].value, want)


def test_prm_steps_and_reductions(adapters, checkpoints):
    from morkit.reward_models.ctts.qwen_math import QwenMathPRM

    rm = adapters["qwen2.5-math-prm-7b"]
    answer = PAIRS[5][1]
    score = rm.score([PAIRS[5]])[0]
    assert len(score.steps) == 4 == len(QwenMathPRM.steps(answer))
    assert score.value == min(score.steps) and all(0.0 <= s <= 1.0 for s in score.steps)
    assert score.to_json() == list(score.steps)
    last = type(rm)(rm.backbone, rm.score_head, reduction="last").score([PAIRS[5]])[0]  # type: bound to its card
    assert last.value == pytest.approx(score.steps[-1])
    empty = rm.score([("q", "  ")])[0]
    assert empty.value == 0.0 and empty.steps == (0.0,)
    assert rm.step_id == checkpoints["qwen2.5-math-prm-7b"]["vocab"]["<extra_0>"]


def test_truncation_marks_scores_and_keeps_whole_steps(adapters):
    from morkit.reward_models.truncation import Truncation

    prm = adapters["qwen2.5-math-prm-7b"]
    q, a = PAIRS[5]
    full = len(prm.render(q, a))
    cut = type(prm)(prm.backbone, prm.score_head, truncation=Truncation(max_tokens=full - 12)).score([(q, a)])[0]
    assert cut.truncated and 1 <= len(cut.steps) < 4
    orm = adapters["skywork-reward-v2-llama-3.1-8b"]
    limit = len(orm.render(*PAIRS[1]))
    short = type(orm)(orm.backbone, orm.score_head, truncation=Truncation(max_tokens=limit))
    assert short.score([PAIRS[2]])[0].truncated and len(short.encode([PAIRS[2]])[0].ids) <= limit
    assert not short.score([PAIRS[1]])[0].truncated


def test_raw_logit_models_score_empty_answers_through_the_model(adapters):
    rm = adapters["skywork-reward-v2-llama-3.1-8b"]
    assert rm.empty_score is None
    alone = rm.score([("Hi", "")])[0].value
    assert close(alone, rm.score([("Hi", ""), ("Hi", "x")])[0].value)
    assert adapters["ldl-reward-gemma-2-27b"].score([("Hi", " ")])[0].value == 0.0  # [0, 1] scale: floor


DROP = {
    "qwen2.5-math-rm-72b": ("model.safetensors", "score.2.bias"),
    "qwen2.5-math-prm-7b": ("model.safetensors", "score.0.weight"),
    "skywork-reward-gemma-2-27b": ("model.safetensors", "score.weight"),
    "inf-orm-llama3.1-70b": ("model.safetensors", "score.2.weight"),
    "acecoderm-32b": ("value_head.safetensors", "v_head.summary.bias"),
    "qrm-gemma-2-27b": ("model.safetensors", "gating.layers.3.weight"),
    "skywork-reward-v2-llama-3.1-8b": ("model.safetensors", "score.weight"),
    "ldl-reward-gemma-2-27b": ("regression_layer.pt", "network.4.bias"),
}


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_missing_a_head_tensor_is_an_error_naming_it(name, checkpoints, tmp_path):
    from safetensors.torch import load_file

    from morkit.reward_models.catalog import load_rm

    src = checkpoints[name]["root"]
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    file, tensor = DROP[name]
    if file.endswith(".pt"):
        state = torch.load(dst / file, weights_only=True)
        del state[tensor]
        torch.save(state, dst / file)
    else:
        state = load_file(str(dst / file))
        del state[tensor]
        save_tensors(dst / file, state)
    with pytest.raises(UnavailableError) as info:
        load_rm(name, path=dst, device="cpu")
    assert tensor.split(".")[-2] in str(info.value) and tensor.split(".")[-1] in str(info.value)


def test_unexpected_head_tensor_is_an_error(checkpoints, tmp_path):
    from safetensors.torch import load_file

    from morkit.reward_models.catalog import load_rm

    dst = tmp_path / "ckpt"
    shutil.copytree(checkpoints["inf-orm-llama3.1-70b"]["root"], dst)
    state = load_file(str(dst / "model.safetensors"))
    state["score.4.weight"] = torch.zeros(1, H)
    state["value_head.weight"] = torch.zeros(1, H)
    save_tensors(dst / "model.safetensors", state)
    with pytest.raises(UnavailableError, match="value_head.weight"):
        load_rm("inf-orm-llama3.1-70b", path=dst, device="cpu")
    del state["value_head.weight"]
    save_tensors(dst / "model.safetensors", state)
    with pytest.raises(UnavailableError, match=r"unexpected head tensor\(s\) score.4.weight"):
        load_rm("inf-orm-llama3.1-70b", path=dst, device="cpu")
    del state["score.4.weight"], state["model.norm.weight"]
    save_tensors(dst / "model.safetensors", state)
    with pytest.raises(UnavailableError, match="lacks backbone tensor.*norm.weight"):
        load_rm("inf-orm-llama3.1-70b", path=dst, device="cpu")


def test_missing_weights_name_model_and_every_place_looked(tmp_path, monkeypatch):
    from morkit.reward_models.catalog import REWARD_MODELS, load_rm, missing
    from morkit.reward_models.weights import locate_weights

    monkeypatch.setenv("MORKIT_WEIGHTS_DIR", str(tmp_path / "weights"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(UnavailableError) as info:
        load_rm("qrm-gemma-2-27b", path=tmp_path / "nowhere", device="cpu")
    text = str(info.value)
    assert "nicolinho/QRM-Gemma-2-27B" in text and str(tmp_path / "nowhere") in text
    assert str(tmp_path / "weights" / "nicolinho" / "QRM-Gemma-2-27B") in text and "Hugging Face cache" in text
    reason = missing(REWARD_MODELS.get("acecoderm-32b"))
    assert reason and "TIGER-Lab/AceCodeRM-32B" in reason
    with pytest.raises(UnavailableError, match="acecoderm-32b"):
        load_rm("acecoderm-32b")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    with pytest.raises(UnavailableError, match="lacks regression_layer.pt"):
        locate_weights("x/y", tmp_path / "half", required=("config.json", "regression_layer.pt"))


def test_weights_dir_env_makes_a_model_available_and_buildable(checkpoints, tmp_path, monkeypatch):
    from morkit.reward_models.catalog import REWARD_MODELS, load_rm, missing

    org = tmp_path / "weights" / "Skywork"
    org.mkdir(parents=True)
    (org / "Skywork-Reward-V2-Llama-3.1-8B-40M").symlink_to(checkpoints["skywork-reward-v2-llama-3.1-8b"]["root"])
    monkeypatch.setenv("MORKIT_WEIGHTS_DIR", str(tmp_path / "weights"))
    entry = REWARD_MODELS.get("skywork-reward-v2-llama-3.1-8b")
    assert missing(entry) is None
    rm = load_rm(entry.name, device="cpu")
    assert rm.name == entry.name and rm.kind == "orm"


def test_an_explicit_path_loads_without_weights_in_the_default_places(checkpoints, tmp_path, monkeypatch):
    from morkit.reward_models.catalog import load_rm

    monkeypatch.setenv("MORKIT_WEIGHTS_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    rm = load_rm("skywork-reward-v2-llama-3.1-8b", path=checkpoints["skywork-reward-v2-llama-3.1-8b"]["root"],
                 device="cpu")
    assert rm.kind == "orm" and rm.score([("q", "a")])[0].value == rm.score([("q", "a")])[0].value


def test_gemma_template_rejects_a_system_role_and_adapters_send_none(adapters):
    for name in ("skywork-reward-gemma-2-27b", "ldl-reward-gemma-2-27b", "qrm-gemma-2-27b",
                 "skywork-reward-v2-llama-3.1-8b"):
        assert [m["role"] for m in adapters[name].messages("q", "a")] == ["user", "assistant"]


def test_rms_lists_all_eight_as_unavailable_here(capsys, monkeypatch, tmp_path):
    from morkit.cli import main
    from morkit.reward_models.catalog import REWARD_MODELS, rm_status
    from morkit.reward_models.ctts import CTTS_CARDS

    monkeypatch.delenv("MORKIT_WEIGHTS_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert main(["rms"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert len(CTTS_CARDS) == 8
    for m in CTTS_CARDS:
        assert m.name in lines and "no: weights" in lines[m.name] and "GiB" in lines[m.name]
        info = rm_status(REWARD_MODELS.get(m.name)).to_json()
        assert "GiB GPU memory in bf16" in info["needs"] and m.model_id in info["missing"]
        assert info["runs"] == "transformers" and info["kind"] == m.kind and info["model_id"] == m.model_id
