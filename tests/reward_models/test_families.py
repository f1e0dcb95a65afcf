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
    """The engine recipes, the vLLM plugin and classes, and the adapters hold no RM name: the cards do."""
    from morkit.reward_models.ctts import CTTS_CARDS

    package = ROOT / "morkit" / "reward_models"
    sources = [package / "families" / "adapter.py", *sorted((package / "ctts").glob("*.py"))]
    for path in sources:
        if path.name == "__init__.py":  # the cards themselves
            continue
        text = path.read_text(encoding="utf-8")
        for card in CTTS_CARDS:
            assert f'"{card.name}"' not in text, f"{path.name} names {card.name}"
    assert not (package / "ctts" / "engine.py").exists()


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
