"""The score cache's one identity (morkit.reward_models.identity): every option that changes a score changes the key,
so a real RM's cached scores miss; an option that cannot (options.SCORE_NEUTRAL) leaves it, so they hit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from morkit.core.types import Candidate, Query
from morkit.reward_models.cache import ScoreCache
from morkit.reward_models.catalog import REWARD_MODELS, identity_of, resolve_rm
from morkit.reward_models.identity import cache_key, folder_version
from morkit.reward_models.options import FLAGS, SCORE_NEUTRAL, ScoringOptions
from morkit.reward_models.session import ScoringSession

RM = "minilm-probe"  # packaged weights and head, fast on CPU
CTTS = "qwen2.5-math-prm-7b"  # a model RM with Hugging Face weights: it takes the options' dtype and device map
NEUTRAL = {"progress": True, "cache": "elsewhere.sqlite", "chunk": 2, "batch_size": 4, "ray_workers": 2,
           "check_fit": False}


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
    assert _key(CTTS, device="cpu", ray="auto") == here  # Ray replicas compute as this process would
    # the embedded models share the process's backbone in its own dtype: the option does not reach them
    assert _key(RM, device="cpu", dtype="bf16") == _key(RM, device="cpu")
    assert _key("code-tests", max_tokens=512, dtype="bf16") == "code-tests@5"  # a rule computes no tensors


@pytest.mark.parametrize("name", [RM, CTTS, "code-tests"])
@pytest.mark.parametrize("start", [{"device": "cpu"}, {"device": "cpu", "placement": "vllm"},
                                   {"urls": ("http://127.0.0.1:1",)}, {"device": "cpu", "ray": "auto"}])
def test_no_score_neutral_option_enters_any_placements_key(name, start):
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


def test_an_rm_object_passed_as_it_is_keys_by_its_name_version_and_truncation(minilm):
    from morkit.reward_models.embedded.models import MiniLMProbe
    from morkit.reward_models.heads import load_packaged_head
    from morkit.reward_models.truncation import Truncation

    rm = MiniLMProbe(minilm, load_packaged_head(RM), truncation=Truncation(128, "right"))
    assert identity_of(rm) == f"{identity_of(RM)};truncation={rm.truncation.signature}"


def test_the_fill_path_reads_and_writes_the_same_identity(tmp_path, counted):
    path = tmp_path / "scores.sqlite"
    scored, calls = _score(path, counted)
    assert calls == 4
    with ScoringSession(ScoringOptions.from_flags(device="cpu", chunk=1), cache=ScoreCache(path)) as session:
        filled = session.fill(_queries(), [[RM], [RM]])
        assert session.cache.hits == 4 and session.cache.misses == 0
        session.cache.close()
    assert len(counted) == 4 and filled == scored
