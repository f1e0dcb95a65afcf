"""Model families and cards: one card per RM, one family building it on every placement; the vLLM classes and
engine recipes come from them, and the page's "Add a model architecture" example runs and prints what it shows."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from morkit.core.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "extending.md"


def test_every_model_card_names_a_family_and_no_plain_rm_does():
    from morkit.reward_models.catalog import REWARD_MODELS
    from morkit.reward_models.family import Family, family_of

    for entry in REWARD_MODELS:
        card = entry.spec
        assert card.name == entry.name
        if card.runs == "transformers":
            assert isinstance(family_of(card), Family), entry.name
        else:
            assert card.family is None, entry.name
            with pytest.raises(InputError, match="no model family"):
                family_of(card)


def test_listing_and_resolving_families_imports_no_torch_or_vllm():
    import subprocess

    code = ("import sys\nfrom morkit.reward_models.catalog import list_rms, REWARD_MODELS\n"
            "from morkit.reward_models.family import family_of\nlist_rms()\n"
            "[family_of(e.spec) for e in REWARD_MODELS if e.spec.family]\n"
            "from morkit.reward_models.ctts.vllm_plugin import architectures\narchitectures()\n"
            "print(sorted(m for m in ('torch', 'vllm', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_the_vllm_plugin_registers_what_the_families_bring():
    from morkit.reward_models.ctts.vllm_plugin import architectures

    assert architectures() == {
        "MorkitINFORMForSequenceClassification": "morkit.reward_models.ctts.vllm_models:InfOrmForVLLM",
        "MorkitLDLRewardModel": "morkit.reward_models.ctts.vllm_models:LDLRewardForVLLM",
        "MorkitAceCodeRM": "morkit.reward_models.ctts.vllm_models:AceCodeRMForVLLM",
        "MorkitQRMGemma2RewardModel": "morkit.reward_models.ctts.vllm_models:QRMGemmaForVLLM",
    }


def test_a_vllm_architecture_finds_its_card():
    from morkit.reward_models.catalog import REWARD_MODELS
    from morkit.reward_models.family import card_for_architecture

    cards = [entry.spec for entry in REWARD_MODELS]
    assert card_for_architecture("MorkitQRMGemma2RewardModel", cards).name == "qrm-gemma-2-27b"
    with pytest.raises(InputError, match="'Nope'"):
        card_for_architecture("Nope", cards)


def test_no_rm_name_is_written_outside_its_card():
    """The engine recipes, the vLLM plugin and classes, the adapters, the embedded RMs, the reusable families and
    the catalog hold no model RM's name: the cards do."""
    from morkit.reward_models.ctts import CTTS_CARDS
    from morkit.reward_models.embedded.cards import EMBEDDED_CARDS

    package = ROOT / "morkit" / "reward_models"
    sources = [*sorted((package / "families").glob("*.py")), *sorted((package / "ctts").glob("*.py")),
               package / "embedded" / "models.py", package / "catalog.py"]
    assert package / "families" / "adapter.py" in sources and package / "families" / "checkpoint.py" in sources
    for path in sources:
        if path.parent.name == "ctts" and path.name == "__init__.py":  # the cards themselves
            continue
        text = path.read_text(encoding="utf-8")
        for card in (*CTTS_CARDS, *EMBEDDED_CARDS):
            assert f'"{card.name}"' not in text, f"{path.name} names {card.name}"
    assert not (package / "ctts" / "engine.py").exists()


def test_an_embedded_rm_takes_its_name_head_and_window_from_its_card(tmp_path, monkeypatch):
    """Bound as the adapters are: the classes callers construct are the cards' bound classes, and another card
    of the same family (its own name, window) gets them in this process and in its vLLM recipe."""
    from dataclasses import replace

    from fakes.ctts_checkpoints import make_tokenizer

    from morkit.reward_models.catalog import REWARD_MODELS
    from morkit.reward_models.embedded import models
    from morkit.reward_models.family import family_of
    from morkit.runtime import assets

    for name, cls in (("smollm2-orm", models.SmolLM2ORM), ("minilm-probe", models.MiniLMProbe),
                      ("smollm2-judge", models.SmolLM2Judge)):
        card = REWARD_MODELS.get(name).spec
        assert family_of(card).rm_class(card) is cls
        assert (cls.name, cls.kind, cls.window, cls.card) == (card.name, card.kind, card.window, card)
    assert models.MiniLMProbe.window == 256 and models.MiniLMProbe.card.head == "minilm-probe"
    card = replace(REWARD_MODELS.get("smollm2-orm").spec, name="my-orm", window=1024)
    family = family_of(card)
    bound = family.rm_class(card)
    assert (bound.name, bound.window, bound.card) == ("my-orm", 1024, card) and bound is family.rm_class(card)
    tokenizer, _ = make_tokenizer("llama")
    tokenizer.save_pretrained(str(tmp_path))
    monkeypatch.setattr(assets, "smollm2_checkpoint", lambda: tmp_path)
    spec = family.engine_spec(card, None)
    assert (spec.name, spec.max_context, spec.pooling, spec.architecture) == ("my-orm", 1024, "embed", None)


class _Family:
    """A family as the Family protocol has it, in this process only."""

    pooling = architecture = vllm_class = None

    def load(self, card, **options):
        return ("built", card.name, options)

    def engine_spec(self, card, options):
        raise InputError(f"reward model {card.name!r} runs only in this process")


@pytest.fixture
def registered():
    from morkit.reward_models.catalog import REWARD_MODELS

    before = set(REWARD_MODELS.names())
    yield REWARD_MODELS
    for name in set(REWARD_MODELS.names()) - before:
        REWARD_MODELS.unregister(name)


def test_a_family_is_written_once_as_the_registered_target(registered):
    from morkit.reward_models.catalog import load_rm
    from morkit.reward_models.family import Family, family_of

    family = _Family()
    assert isinstance(family, Family)
    registered.register("test-family", family, "a family as target", kind="orm", runs="transformers")
    entry = registered.get("test-family")
    assert entry.target is family and entry.spec.family is family and family_of(entry.spec) is family
    assert entry.meta["family"] is family
    assert load_rm("test-family", device="cpu") == ("built", "test-family", {"device": "cpu"})
    registered.register("test-lazy", "mypkg.cosine:COSINE", "a family in a package", runs="transformers")
    assert registered.get("test-lazy").spec.family == "mypkg.cosine:COSINE"  # resolved when built


def test_a_family_given_twice_or_amiss_is_a_one_line_error(registered):
    from morkit.core.registry import Entry
    from morkit.reward_models.card import RMCard
    from morkit.reward_models.family import family_of

    family = _Family()
    cases = [
        (lambda: registered.register("test-x", family, "x", runs="transformers", family=family), "drop family="),
        (lambda: registered.register("test-x", "nowhere:thing", "x", runs="transformers", family="a.b:C"),
         "drop family="),
        (lambda: registered.register("test-x", family, "x", runs="python"),
         "is a model family, so its card needs runs='transformers'"),
        (lambda: registered.register("test-x", object(), "x", runs="transformers"),
         "lacks load, engine_spec, pooling, architecture, vllm_class"),
        (lambda: registered.add(Entry("test-x", "nowhere:thing", "x", spec=RMCard(name="test-x", runs="transformers",
                                                                                  family="a.b:C"))),
         "a different target is given"),
        (lambda: registered.add(Entry("test-x", None, "x", spec=RMCard(name="test-x", runs="python"))),
         "has no target"),
        (lambda: registered.add(Entry("test-x", None, "x", spec=RMCard(name="test-x", runs="python", family="a.b:C"))),
         "a card with a family runs as 'transformers'"),
    ]
    for make, message in cases:
        with pytest.raises(InputError, match=message.replace("(", r"\(")) as err:
            make()
        assert "\n" not in str(err.value) and "test-x" in str(err.value)
        assert "test-x" not in registered

    class Old:  # the protocol before `pooling`: refused when registered, naming what it lacks
        architecture = vllm_class = None
        load = engine_spec = _Family.load

    with pytest.raises(InputError, match=r"Old \(an instance\) lacks pooling \(plain code runs as 'python'\)"):
        registered.register("test-x", Old(), "x", runs="transformers")
    registered.register("test-x", "math:sqrt", "a lazy target that is no family", runs="transformers")
    with pytest.raises(InputError, match="its family math:sqrt lacks load, engine_spec, pooling"):
        family_of(registered.get("test-x").spec)


def test_an_adapter_is_bound_to_its_card_once():
    from morkit.reward_models.catalog import REWARD_MODELS
    from morkit.reward_models.family import family_of

    card = REWARD_MODELS.get("qwen2.5-math-prm-7b").spec
    bound = family_of(card).adapter_class(card)
    assert bound is family_of(card).adapter_class(card)
    assert (bound.name, bound.kind, bound.model_id, bound.card) == (card.name, "prm", card.model_id, card)
    assert family_of(card).pooling == "step"


def test_a_card_checks_its_fields():
    from morkit.reward_models.card import RMCard

    assert RMCard.of("x", kind="orm", runs="python", packages=["a"]).packages == ("a",)
    with pytest.raises(InputError, match="runs must be one of"):
        RMCard.of("x", runs="gpu")
    with pytest.raises(InputError, match="unknown card field 'backend'"):
        RMCard.of("x", backend="python")
    with pytest.raises(InputError, match="its family is its registry target"):
        RMCard.of("x", runs="transformers", family="a.b:C")


def test_an_rm_without_an_engine_recipe_refuses_vllm():
    from morkit.reward_models.backends.engine_rm import engine_spec
    from morkit.reward_models.catalog import REWARD_MODELS
    from morkit.reward_models.options import ScoringOptions

    for name in ("minilm-probe", "math-consensus"):
        with pytest.raises(InputError, match="runs only on transformers; drop --placement vllm"):
            engine_spec(REWARD_MODELS.get(name).spec, ScoringOptions())


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_the_add_a_model_architecture_example_prints_what_the_page_shows(tmp_path, monkeypatch, capsys):
    """Runs the page's first example (the queries it reads) and the section's, and compares each print with
    the text block after it."""
    from test_docs import FENCE

    import morkit
    from morkit.demo import sample_path

    rows = [json.loads(line) for line in sample_path().read_text(encoding="utf-8").splitlines() if line.strip()]
    plain = [{**r, "candidates": [{k: v for k, v in c.items() if k != "correct"} for c in r["candidates"]]}
             for r in rows if r.get("domain") == "math"]
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plain))
    monkeypatch.chdir(tmp_path)
    text = PAGE.read_text(encoding="utf-8")
    examples = [_section(text, "Add a reward model"), _section(text, "Add a model architecture")]
    namespace: dict = {"__name__": "docs"}
    registered = set(morkit.REWARD_MODELS.names())
    try:
        for example in examples:
            found = [(m.group(3), m.group(4)) for m in FENCE.finditer(example)]
            pairs = [(body, shown) for (lang, body), (after, shown) in zip(found, found[1:])
                     if lang == "python" and after == "text"]
            assert pairs
            for body, shown in pairs:
                exec(compile(body, str(PAGE), "exec"), namespace)
                assert capsys.readouterr().out == shown
    finally:
        for name in set(morkit.REWARD_MODELS.names()) - registered:
            morkit.REWARD_MODELS.unregister(name)
    assert re.search(r'register\("qa-cosine", COSINE', text)
