"""The scoring engine's lifecycle on real (tiny) CTTS-MM checkpoints: model RMs are loaded one at a time
and really freed, cached pairs load nothing, a model too big for the device is refused before loading,
backends are chosen by name (servers included: real HTTP to a fake vLLM pooling server), and question-prefix
reuse changes no score.
"""

from __future__ import annotations

import gc
import json
import weakref

import pytest

torch = pytest.importorskip("torch")

from fakes.ctts_checkpoints import MODELS, PAIRS, build_checkpoint  # noqa: E402
from fakes.http_server import FakeServer  # noqa: E402

from morkit.core.errors import PartialScoreError, UnavailableError  # noqa: E402
from morkit.core.types import Candidate, Query  # noqa: E402
from morkit.reward_models.options import ScoringOptions  # noqa: E402

BIG_TWO = ("qwen2.5-math-rm-72b", "inf-orm-llama3.1-70b")


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    from morkit.reward_models.catalog import REWARD_MODELS

    base = tmp_path_factory.mktemp("weights")
    for name in MODELS:
        build_checkpoint(name, base / REWARD_MODELS.get(name).spec.model_id)
    return base


@pytest.fixture(autouse=True)
def _weights_dir(weights, monkeypatch):
    monkeypatch.setenv("MORKIT_WEIGHTS_DIR", str(weights))


def queries() -> list[Query]:
    by_question: dict[str, list[str]] = {}
    for q, a in PAIRS:
        by_question.setdefault(q, []).append(a)
    by_question["Compute 7*6, showing the work carefully."] += ["42.", "It is 41.\n\nNo, 42."]
    return [Query(f"q{i}", q, tuple(Candidate(a) for a in answers)) for i, (q, answers) in enumerate(by_question.items())]


@pytest.mark.slow
def test_two_big_rms_are_never_resident_together_and_their_memory_is_freed(monkeypatch):
    import morkit
    from morkit.reward_models.backends.transformers import TransformersHandle

    alive: list[weakref.ref] = []
    resident_at_load: list[int] = []
    real_load = TransformersHandle.load

    def load(handle):
        gc.collect()
        resident_at_load.append(sum(ref() is not None for ref in alive))
        rm = real_load(handle)
        alive.append(weakref.ref(rm.backbone.model))
        return rm

    monkeypatch.setattr(TransformersHandle, "load", load)
    scored = morkit.score(queries(), list(BIG_TWO), device="cpu")
    gc.collect()
    assert resident_at_load == [0, 0]  # the first model was gone before the second loaded
    assert all(ref() is None for ref in alive)  # and the last is gone once the call returns
    assert all(set(BIG_TWO) <= set(c.scores) for q in scored for c in q.candidates)


def test_cached_pairs_load_no_model(tmp_path, monkeypatch):
    import morkit
    from morkit.reward_models.backends.transformers import TransformersHandle

    cache = tmp_path / "scores.sqlite"
    first = morkit.score(queries(), ["skywork-reward-v2-llama-3.1-8b"], device="cpu", cache=cache)
    monkeypatch.setattr(TransformersHandle, "load", lambda *a, **k: pytest.fail("a model was loaded for cached pairs"))
    again = morkit.score(queries(), ["skywork-reward-v2-llama-3.1-8b"], device="cpu", cache=cache)
    assert [c.scores for q in again for c in q.candidates] == [c.scores for q in first for c in q.candidates]


def test_a_model_too_big_for_the_device_is_refused_before_loading(monkeypatch):
    import morkit
    from morkit.reward_models import memory
    from morkit.reward_models.backends import transformers

    monkeypatch.setattr(memory, "devices_free", lambda device, spread: [2**20])  # 1 MiB free
    monkeypatch.setattr(transformers, "build", lambda *a, **k: pytest.fail("loaded a model that cannot fit"))
    with pytest.raises(UnavailableError) as err:
        morkit.score(queries(), ["qwen2.5-math-rm-72b"], device="cpu")
    message = str(err.value)
    assert "does not fit" in message and "GiB" in message
    assert "--tensor-parallel-size" in message and "--device-map" in message and "--url" in message


def test_the_memory_estimate_counts_the_checkpoint(weights):
    from morkit.reward_models import memory
    from morkit.reward_models.catalog import REWARD_MODELS

    root = weights / REWARD_MODELS.get("skywork-reward-v2-llama-3.1-8b").spec.model_id
    model = __import__("transformers").LlamaForSequenceClassification.from_pretrained(root)
    assert memory.checkpoint_parameters(root) == sum(p.numel() for p in model.state_dict().values())
    need = memory.estimate(root, "bfloat16", devices=2)
    assert need.weights == 2 * memory.checkpoint_parameters(root) and need.per_device > need.weights / 2


def test_backend_vllm_without_vllm_says_how_to_install(monkeypatch):
    import importlib.util

    from morkit.reward_models.catalog import resolve_rm

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(UnavailableError, match="pip install vllm"):
        resolve_rm("skywork-reward-v2-llama-3.1-8b", ScoringOptions(placement="vllm")).load()


class TokenServer(FakeServer):
    """A vLLM /pooling server that scores token-id prompts by their length; long prompts fail with 500."""

    fail_over = 10**9

    def pooling(self, req):
        inputs = req["input"] if isinstance(req["input"][0], list) else [req["input"]]
        if any(len(ids) > self.fail_over for ids in inputs):
            return 500, b'{"error": "internal"}'
        data = [{"index": i, "data": [len(ids) / 10.0]} for i, ids in enumerate(inputs)]
        return 200, json.dumps({"data": data}).encode()


@pytest.mark.slow
def test_servers_by_name_get_the_adapters_own_prompts_and_failures_keep_successes(tmp_path):
    import morkit
    from morkit.reward_models.catalog import load_rm, resolve_rm
    from morkit.reward_models.options import ScoringOptions

    name = "skywork-reward-v2-llama-3.1-8b"
    adapter = load_rm(name, device="cpu")
    server = TokenServer()
    try:
        scored = morkit.score(queries(), [name, "math-consensus"], urls=(f"{name}={server.url}",))
        for query in scored:
            for c in query.candidates:
                assert c.scores[name] == pytest.approx(len(adapter.render(query.question, c.text)) / 10)
        assert {p["model"] for p in server.payloads} <= {name}
        lengths = sorted(len(adapter.render(q.question, c.text)) for q in queries() for c in q.candidates)
        server.fail_over = lengths[len(lengths) // 2]
        cache = tmp_path / "partial.sqlite"
        with pytest.raises(PartialScoreError) as err:
            morkit.score(queries(), [name], urls=(server.url,), cache=cache, batch_size=1)
        assert server.url in str(err.value)
        pairs = [(q.question, c.text) for q in queries() for c in q.candidates]
        key = resolve_rm(name, ScoringOptions.from_flags(urls=(server.url,))).cache_key
        assert key.startswith(f"{name};") and ";engine=vllm;dtype=served;" in key  # what the servers compute
        kept = [s for s in morkit.ScoreCache(cache).get_many(key, pairs) if s is not None]
        assert 0 < len(kept) < len(pairs)  # the successes were cached before the run failed
    finally:
        server.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_question_prefix_reuse_changes_no_score(name):
    from morkit.reward_models.backends import prefix
    from morkit.reward_models.catalog import load_rm

    pairs = [(q.question, c.text) for q in queries() for c in q.candidates]
    plain = load_rm(name, device="cpu", prefix_reuse=False).score(pairs)
    calls = []
    real = prefix.run_with_prefix
    prefix.run_with_prefix = lambda *a, **k: calls.append(len(a[2])) or real(*a, **k)
    try:
        shared = load_rm(name, device="cpu").score(pairs)
    finally:
        prefix.run_with_prefix = real
    assert calls  # the shared path ran
    for a, b in zip(plain, shared):
        assert abs(a.value - b.value) <= 1e-4 and a.truncated == b.truncated
        if a.steps:
            assert max(abs(x - y) for x, y in zip(a.steps, b.steps)) <= 1e-4


@pytest.mark.parametrize("verb", [["score", "in.jsonl", "-o", "o"], ["pool", "build", "in.jsonl", "-o", "p"],
                                  ["pool", "add", "p", "in.jsonl"], ["rank", "in.jsonl", "--pool", "p", "-o", "o"],
                                  ["search", "in.jsonl", "--pool", "p", "--agents", "a.toml", "-o", "o"],
                                  ["loop", "tmas", "in.jsonl", "--agents", "a.toml", "-o", "o"]])
def test_every_scoring_verb_takes_the_backend_flags(verb):
    from morkit.cli.args import scoring_options
    from morkit.cli.main import build_parser

    # servers bound to two RMs (an unbound URL would send every model RM there, and the engine flags would not apply)
    flags = ["--placement", "vllm", "--url", "inf-orm-llama3.1-70b=http://127.0.0.1:9/",
             "--url", "qrm-gemma-2-27b=http://h:1", "--dtype", "bf16", "--tensor-parallel-size", "4", "--max-model-len", "4096",
             "--gpu-memory-utilization", "0.8", "--no-prefix-reuse"]
    options = scoring_options(build_parser().parse_args(verb + flags))
    assert (options.placement, options.dtype, options.vllm.tensor_parallel_size, options.vllm.max_model_len,
            options.vllm.gpu_memory_utilization, options.prefix_reuse) == ("vllm", "bf16", 4, 4096, 0.8, False)
    assert options.servers.urls_for("inf-orm-llama3.1-70b") == ["http://127.0.0.1:9"]
    assert options.servers.urls_for("qrm-gemma-2-27b") == ["http://h:1"]
