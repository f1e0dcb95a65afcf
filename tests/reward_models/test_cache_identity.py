"""The score cache's one identity (morkit.reward_models.identity): every option that changes a score changes the key,
so a real RM's cached scores miss; an option that cannot (options.SCORE_NEUTRAL) leaves it, so they hit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from morkit.core.types import Candidate, Query
from morkit.reward_models.cache import ScoreCache
from morkit.reward_models.catalog import REWARD_MODELS, identity_of, resolve_rm
from morkit.reward_models import identity
from morkit.reward_models.identity import cache_key, folder_version
from morkit.reward_models.options import FLAGS, SCORE_NEUTRAL, ScoringOptions
from morkit.reward_models.session import ScoringSession

RM = "minilm-probe"  # packaged weights and head, fast on CPU
CTTS = "qwen2.5-math-prm-7b"  # a model RM with Hugging Face weights: it takes the options' dtype and device map
SKYWORK = "skywork-reward-v2-llama-3.1-8b"  # one whose tiny checkpoint the fakes build
NEUTRAL = {"progress": True, "cache": "elsewhere.sqlite", "chunk": 2, "batch_size": 4, "ray_workers": 2,
           "check_fit": False}


@pytest.fixture(autouse=True)
def _no_weights_here(tmp_path, monkeypatch):
    """No model's weights are found unless a test puts them in $MORKIT_WEIGHTS_DIR: every key here is the same on
    every machine (found weights add their version and window)."""
    from morkit.reward_models import weights

    monkeypatch.setenv("MORKIT_WEIGHTS_DIR", str(tmp_path / "no-weights"))
    monkeypatch.setattr(weights, "_hf_cache", lambda model_id: (None, "the Hugging Face cache (not read in tests)"))


def _queries() -> list[Query]:
    return [Query("q1", "What is 2+2?", (Candidate(text="4"), Candidate(text="It is five, I think."))),
            Query("q2", "Name a prime.", (Candidate(text="7"), Candidate(text="9 is prime")))]


@pytest.fixture
def counted(minilm, monkeypatch):
    """The pairs the real MiniLM probe is asked to score, whichever session loads it."""
    from morkit.reward_models.embedded.models import MiniLMProbe

    seen: list[tuple[str, str]] = []
    score = MiniLMProbe.score

    def counting(self, pairs):
        seen.extend(pairs)
        return score(self, pairs)

    monkeypatch.setattr(MiniLMProbe, "score", counting)
    return seen


def _score(path, counted, **flags) -> tuple[list[Query], int]:
    """The queries scored by the real probe with a session of these flags on the cache at `path`, and how many pairs
    reached the model."""
    before = len(counted)
    with ScoringSession(ScoringOptions.from_flags(device="cpu", **flags), cache=ScoreCache(path)) as session:
        out = session.score(_queries(), [RM])
        session.cache.close()
    return out, len(counted) - before


def test_a_real_rm_hits_under_harmless_options_and_misses_under_each_that_changes_a_score(tmp_path, counted):
    path = tmp_path / "scores.sqlite"
    first, calls = _score(path, counted)
    assert calls == 4
    for name in ("batch_size", "chunk", "progress", "check_fit"):  # harmless: every pair from the cache
        again, calls = _score(path, counted, **{name: NEUTRAL[name]})
        assert (calls, again) == (0, first), name
    for flags in ({"truncation": "right"}, {"max_tokens": 64}, {"max_tokens": 64, "truncation": "left"}):
        _, calls = _score(path, counted, **flags)
        assert calls == 4, flags  # scored again: the cached ones were made under another truncation
        _, calls = _score(path, counted, **flags)
        assert calls == 0, flags  # ... and cached under this one


def test_a_retrained_head_rescored(tmp_path, counted, monkeypatch):
    from morkit.reward_models import heads

    path = tmp_path / "scores.sqlite"
    _score(path, counted)
    head = heads.load_packaged_head(RM)
    retrained = tmp_path / f"{RM}.safetensors"
    replace(head, bias=head.bias + 1.0, info={**head.info, "sha256": "retrained"}).save(retrained)
    monkeypatch.setattr(heads, "packaged_head_path", lambda name: retrained)
    out, calls = _score(path, counted)
    assert calls == 4 and resolve_rm(RM, ScoringOptions(device="cpu")).cache_key.startswith(f"{RM};head=retrained;")


def _key(name: str, **flags) -> str:
    return resolve_rm(name, ScoringOptions.from_flags(**flags)).cache_key


def test_every_placement_keys_the_engine_dtype_device_map_and_truncation():
    here = _key(CTTS, device="cpu")
    assert here == f"{identity_of(CTTS)};engine=transformers;dtype=float32;truncation=middle@window"
    assert _key(CTTS, device="cpu", dtype="bf16") == here.replace("float32", "bfloat16")
    assert _key(CTTS, device="cpu", device_map="auto") == here.replace(";truncation", ";device_map=auto;truncation")
    assert _key(CTTS, device="cpu", max_tokens=512, truncation="left") == here.replace("middle@window", "left@512")
    engine = _key(CTTS, placement="vllm", max_model_len=1024)
    assert "engine=vllm;" in engine and engine.endswith("truncation=middle@window<=1024")
    assert _key(CTTS, urls=("http://127.0.0.1:1",)) == (
        f"{identity_of(CTTS)};engine=vllm;dtype=served;truncation=middle@window")  # the servers' own dtype
    # the embedded models share the process's backbone in its own dtype: the option does not reach them
    assert _key(RM, device="cpu", dtype="bf16") == _key(RM, device="cpu")
    assert _key("code-tests", max_tokens=512, dtype="bf16") == "code-tests@5"  # a rule computes no tensors


@pytest.mark.parametrize("name", [RM, CTTS, "code-tests"])
@pytest.mark.parametrize("start", [{"device": "cpu"}, {"device": "cpu", "placement": "vllm"},
                                   {"urls": ("http://127.0.0.1:1",)}])
def test_no_score_neutral_option_enters_any_placements_key(name, start):  # on Ray: test_ray.py
    assert set(NEUTRAL) == set(SCORE_NEUTRAL)
    base = _key(name, **start)
    for flag, value in NEUTRAL.items():
        if flag == "ray_workers" and "ray" not in start or flag == "batch_size" and start.get("placement") == "vllm":
            continue  # the flag does not apply there
        assert _key(name, **start, **{flag: value}) == base, flag


def test_the_options_that_enter_a_key_are_the_scoring_flags_that_are_not_neutral():
    changing = {"truncation": "right", "max_tokens": 512, "dtype": "bf16", "device_map": "auto", "placement": "vllm"}
    assert set(changing) <= set(FLAGS) - set(SCORE_NEUTRAL)
    for flag, value in changing.items():
        assert _key(CTTS, device="cpu", **{flag: value}) != _key(CTTS, device="cpu"), flag


def test_the_card_keys_its_version_head_and_weights(tmp_path, monkeypatch):
    card = REWARD_MODELS.get(CTTS).spec
    assert cache_key("x", replace(card, model_id=None, version="1")) == "x@1"
    assert cache_key("x", replace(card, model_id=None, version="2")) == "x@2"
    assert cache_key(RM, REWARD_MODELS.get(RM).spec).startswith(f"{RM};head=")
    weights = tmp_path / "weights"
    folder = weights / "org" / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"hidden_size": 8}')
    (folder / "model.safetensors").write_bytes(b"0" * 10)
    monkeypatch.setenv("MORKIT_WEIGHTS_DIR", str(weights))
    mine = replace(card, model_id="org/model", required=("config.json",))
    first = cache_key("x", mine)
    assert first == f"x;weights={folder_version(folder)}"
    (folder / "model.safetensors").write_bytes(b"0" * 11)  # new weights in place
    assert cache_key("x", mine) != first
    (folder / "model.safetensors").write_bytes(b"0" * 10)
    (folder / "config.json").write_text('{"hidden_size": 9}')  # same size, another config
    assert cache_key("x", mine) != first
    assert cache_key("x", replace(mine, model_id="org/absent")) == "x"  # no weights here: nothing to version
    snapshot = tmp_path / "hub" / "models--org--m" / "snapshots" / "0123456789abcdef0123"
    snapshot.mkdir(parents=True)
    assert folder_version(snapshot) == "0123456789ab"  # a Hugging Face snapshot: its commit


def test_the_pipeline_versions_rules_without_building_them(monkeypatch):
    from morkit.reward_models.rules.code_tests import CodeTests
    from morkit.services.pipeline.keys import rm_versions

    def refuse(self, *args, **kwargs):
        raise AssertionError("built")

    monkeypatch.setattr(CodeTests, "__init__", refuse)
    assert rm_versions(["code-tests", RM, "given"]) == {
        "code-tests": "code-tests@5", RM: identity_of(RM), "given": "given"}
    assert identity_of(RM) == cache_key(RM, REWARD_MODELS.get(RM).spec)  # the handle's key without the options


def test_an_rm_object_passed_as_it_is_keys_by_what_it_loaded(minilm, tmp_path):
    from morkit.reward_models import heads
    from morkit.reward_models.catalog import load_rm
    from morkit.reward_models.embedded.models import MiniLMProbe
    from morkit.reward_models.truncation import Truncation

    rm = MiniLMProbe(minilm, heads.load_packaged_head(RM), truncation=Truncation(128, "right"))
    assert identity_of(rm) == f"{identity_of(RM)};engine=transformers;dtype=float32;truncation=right@128"
    # built as the handle builds it, it keys as the handle does: their scores are shared
    assert identity_of(MiniLMProbe(minilm, heads.load_packaged_head(RM))) == _key(RM, device="cpu")
    mine = tmp_path / "mine.safetensors"  # a head of its own: keyed by that head's hash, not the packaged one's
    replace(heads.load_packaged_head(RM), bias=0.5, info={"sha256": "mine"}).save(mine)
    built = load_rm(RM, head=str(mine), device="cpu")
    assert identity_of(built) == _key(RM, device="cpu").replace(f"head={identity.head_hash(RM)}", "head=mine")


def test_a_ctts_rm_loaded_from_a_folder_keys_by_that_folder(tmp_path, monkeypatch):
    from fakes.ctts_checkpoints import build_checkpoint

    from morkit.reward_models.catalog import load_rm

    card = REWARD_MODELS.get(SKYWORK).spec
    root = build_checkpoint(SKYWORK, tmp_path / "ckpt")["root"]
    monkeypatch.setenv("MORKIT_WEIGHTS_DIR", str(tmp_path / "empty"))  # nothing at the default location
    built = load_rm(SKYWORK, path=root, device="cpu")
    assert identity_of(built) == (f"{SKYWORK};weights={folder_version(root)};engine=transformers;dtype=float32;"
                                  "truncation=middle@window=512")  # the tiny config's 512 positions
    (tmp_path / "weights" / card.model_id).parent.mkdir(parents=True)
    (tmp_path / "weights" / card.model_id).symlink_to(root)
    monkeypatch.setenv("MORKIT_WEIGHTS_DIR", str(tmp_path / "weights"))  # found there: the handle keys it the same
    assert _key(SKYWORK, device="cpu") == identity_of(built)


def test_the_key_holds_the_resolved_window(tmp_path, monkeypatch):
    from fakes.ctts_checkpoints import build_checkpoint

    from morkit.reward_models.truncation import Truncation

    assert identity.truncation_part(Truncation(), 2048) == "middle@window=2048"
    assert identity.truncation_part(Truncation(ceiling=1024), 2048) == "middle@window=1024"  # max_model_len bounds it
    assert identity.truncation_part(Truncation(ceiling=1024)) == "middle@window<=1024"  # window unknown here
    assert identity.truncation_part(Truncation(512, "left"), 2048) == "left@512"  # a given limit is the limit
    assert identity.truncation_part(Truncation().within(256)) == "middle@window=256"  # a built RM's own window
    assert identity.truncation_part(None) is None
    assert _key(RM, device="cpu").endswith(";truncation=middle@window=256")  # its card's window
    card = REWARD_MODELS.get(SKYWORK).spec
    (tmp_path / "weights" / card.model_id).parent.mkdir(parents=True)
    build_checkpoint(SKYWORK, tmp_path / "weights" / card.model_id)
    monkeypatch.setenv("MORKIT_WEIGHTS_DIR", str(tmp_path / "weights"))
    assert _key(SKYWORK, device="cpu").endswith(";truncation=middle@window=512")  # its config's, no model loaded
    assert _key(SKYWORK, placement="vllm", max_model_len=256).endswith(";truncation=middle@window=256")
    assert identity.card_window(replace(card, trained_context=128)) == 128  # a new trained length: a new key
    REWARD_MODELS.register("my-rm", "mypkg.rms:MyRM", "a user's transformers RM", kind="orm", runs="transformers",
                           window=1024)
    try:
        assert _key("my-rm", device="cpu").endswith(";truncation=middle@window=1024")
    finally:
        REWARD_MODELS.unregister("my-rm")


def test_without_a_cache_no_key_is_worked_out():
    from morkit.core.types import Score
    from morkit.reward_models.scoring import score_queries

    class Built:
        name = "built"

        @property
        def cache_key(self):
            raise AssertionError("keyed without a cache")

        def score(self, pairs):
            return [Score(1.0) for _ in pairs]

    out = score_queries(_queries(), [Built()], cache=None)
    assert [c.scores["built"] for q in out for c in q.candidates] == [1.0] * 4


# -- Ray: replicas are keyed by their own device, never the driver's ------------------------------------------------

@pytest.fixture
def no_cuda_probe(monkeypatch):
    """Any look at CUDA in this process fails the test: a Ray driver must not resolve the replicas' device."""
    torch = pytest.importorskip("torch")

    def probe(*args, **kwargs):
        raise AssertionError("the driver looked at torch.cuda")

    monkeypatch.setattr(torch.cuda, "is_available", probe)
    monkeypatch.setattr(torch.cuda, "device_count", probe)


class FakeRay:
    """A Ray cluster with `gpus` GPUs, as the driver sees it: it records the task the cache key is asked of (its
    resources and function) and answers with `key`; nothing runs."""

    def __init__(self, gpus: float, key: str = "the-replicas-key"):
        self.gpus, self.key, self.asked = gpus, key, []

    def cluster_resources(self):
        return {"CPU": 8.0, "GPU": self.gpus} if self.gpus else {"CPU": 8.0}

    def nodes(self):
        return [{"Alive": True}]

    def remote(self, function):
        fake = self

        class Task:
            def options(self, **resources):
                self.resources = resources
                return self

            def remote(self, *args):
                fake.asked.append((self.resources, function, args))
                return "ref"

        return Task()

    def get(self, ref):
        return self.key


def test_a_ray_replica_works_its_key_out_where_it_runs_not_in_the_driver(no_cuda_probe, monkeypatch):
    from morkit.reward_models.backends import ray as ray_backend
    from morkit.reward_models.options import RayOptions

    for gpus, device, share in ((2.0, None, 1.0), (0.0, None, 0.0), (2.0, "cuda", 1.0), (0.0, "cuda", 0.0)):
        fake = FakeRay(gpus)
        monkeypatch.setattr(ray_backend, "connect", lambda address, fake=fake: fake)
        handle = resolve_rm(CTTS, ScoringOptions(ray=RayOptions(), device=device))
        assert identity_of(handle) == identity_of(handle) == "the-replicas-key"  # asked once, of the cluster
        [(resources, function, (key_of,))] = fake.asked
        assert resources["num_gpus"] == share  # a task holding an actor's resources: a GPU share where they get one
        assert function is ray_backend._call and key_of.func is ray_backend.replica_key
        assert key_of.args[1] == handle.local  # the key of the placement each replica loads
        assert handle.local.ray is None and handle.local.cache is None and handle.local.device == device
    with pytest.raises(AssertionError, match="looked at torch.cuda"):  # what the driver must never do itself
        resolve_rm(CTTS, ScoringOptions(device="cuda")).cache_key


def test_a_batch_from_a_replica_under_another_key_is_refused():
    from morkit.core.errors import ScoreError
    from morkit.reward_models.backends.ray import _check_key

    _check_key(RM, "k;dtype=float32", ["k;dtype=float32"] * 3)
    with pytest.raises(ScoreError, match="computes under k;dtype=bfloat16, not under k;dtype=float32"):
        _check_key(RM, "k;dtype=float32", ["k;dtype=float32", "k;dtype=bfloat16"])


def test_a_ray_serve_handle_is_keyed_by_what_its_replicas_report(no_cuda_probe):
    from morkit.services.serving.ray_serve import ServeRMHandle

    asked = []

    class Response:
        def result(self, timeout_s):
            return "reported-by-the-replica"

    class Method:
        def remote(self):
            asked.append(1)
            return Response()

    class Deployment:
        cache_key = Method()

    handle = ServeRMHandle(REWARD_MODELS.get(CTTS), ScoringOptions(device="cuda"), Deployment())
    assert identity_of(handle) == identity_of(handle) == "reported-by-the-replica" and len(asked) == 1


def test_the_fill_path_reads_and_writes_the_same_identity(tmp_path, counted):
    path = tmp_path / "scores.sqlite"
    scored, calls = _score(path, counted)
    assert calls == 4
    with ScoringSession(ScoringOptions.from_flags(device="cpu", chunk=1), cache=ScoreCache(path)) as session:
        filled = session.fill(_queries(), [[RM], [RM]])
        assert session.cache.hits == 4 and session.cache.misses == 0
        session.cache.close()
    assert len(counted) == 4 and filled == scored
