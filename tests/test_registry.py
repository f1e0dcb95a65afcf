"""The one registry pattern: every registered target imports, listing loads nothing, register() works any time."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from morkit.core.errors import InputError, UnknownName
from morkit.core.registry import Entry, Registry

REGISTRIES = {
    "reward model": "morkit.reward_models.catalog:REWARD_MODELS",
    "selection method": "morkit.selection.methods:SELECTION_METHODS",
    "learner": "morkit.selection.learners:LEARNERS",
    "search method": "morkit.search.methods:SEARCH_METHODS",
    "aggregator": "morkit.search.aggregators:AGGREGATORS",
    "loop": "morkit.loops.registry:LOOPS",
    "verifier": "morkit.verify.kinds:VERIFIERS",
    "LLM backend": "morkit.llm.backends:LLM_BACKENDS",
    "data set": "morkit.data.datasets:DATASETS",
    "data source": "morkit.data.sources:SOURCES",
    "aggregator prompt": "morkit.search.aggregate:AGGREGATOR_PROMPTS",
    "placement": "morkit.reward_models.placement:PLACEMENTS",
    "grader": "morkit.question_pool.graders:GRADERS",
}
VALUE_REGISTRIES = {  # registries of values rather than factories: name -> (registry, the type of each value)
    "agent preset": ("morkit.llm.presets:AGENT_PRESETS", "morkit.llm.presets:AgentPreset"),
    "agent prompt": ("morkit.llm.presets:AGENT_PROMPTS", "morkit.llm.presets:AgentPrompt"),
}


def registry_paths() -> list[str]:
    """Every registry of the package, "module:NAME": REGISTRIES, then VALUE_REGISTRIES."""
    return [*REGISTRIES.values(), *(path for path, _ in VALUE_REGISTRIES.values())]


def _registry(path: str) -> Registry:
    return Entry("registry", path).load()


@pytest.mark.parametrize("what", sorted(REGISTRIES))
def test_every_registered_target_imports_and_is_callable(what):
    registry = _registry(REGISTRIES[what])
    assert registry.what == what and len(registry) > 0
    for entry in registry:
        target = entry.load()
        if what == "reward model" and entry.spec.family is not None:  # a model family builds it: the target is it
            from morkit.reward_models.family import Family, family_of

            assert isinstance(target, Family) and target is family_of(entry.spec), entry.name
        else:
            assert callable(target), f"{what} {entry.name!r}: {entry.target_path} is not callable"
        assert entry.summary, f"{what} {entry.name!r} has no summary"


@pytest.mark.parametrize("what", sorted(VALUE_REGISTRIES))
def test_every_registered_value_imports_and_has_its_type(what):
    path, kind = VALUE_REGISTRIES[what]
    registry, kind = _registry(path), Entry("type", kind).load()
    assert registry.what == what and len(registry) > 0
    for entry in registry:
        assert isinstance(entry.load(), kind), f"{what} {entry.name!r}: {entry.target_path} is not a {kind}"
        assert entry.summary, f"{what} {entry.name!r} has no summary"


def test_listing_every_registry_imports_no_heavy_module():
    code = ("import sys\n"
            + "".join(f"from {p.split(':')[0]} import {p.split(':')[1]} as r{i}; r{i}.names(); list(r{i})\n"
                      for i, p in enumerate(registry_paths()))
            + "from morkit.reward_models.catalog import list_rms; list_rms()\n"
            + "heavy = ('torch', 'transformers', 'vllm', 'sentence_transformers', 'faiss')\n"
            + "heavy = [m for m in heavy if m in sys.modules]\n"
            + "print(','.join(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"listing imported {out.stdout.strip()}"


@pytest.mark.slow
def test_exports_stay_what_they_are_after_every_submodule_is_imported():
    """A subpackage import must not rebind an exported name (`morkit.search` once became the package)."""
    import importlib
    import pkgutil
    import types

    import morkit

    exported = {name: getattr(morkit, name) for name in morkit.__all__ if name != "__version__"}
    for info in pkgutil.walk_packages(morkit.__path__, "morkit."):
        if not info.name.startswith(("morkit.cli", "morkit.runtime.sandbox_launcher")):
            importlib.import_module(info.name)
    for name, value in exported.items():
        assert getattr(morkit, name) is value and not isinstance(value, types.ModuleType), name


def test_import_morkit_does_no_work_and_exports_resolve():
    code = ("import sys, morkit\n"
            "loaded = [m for m in sys.modules if m.startswith('morkit.')]\n"
            "print(len(loaded))\n"
            "missing = [n for n in morkit.__all__ if n != '__version__' and getattr(morkit, n, None) is None]\n"
            "print(','.join(missing))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert first == "0", "import morkit imported submodules"
    assert second == "", f"public names that do not resolve: {second}"


def test_register_before_and_after_listing_keeps_the_builtins():
    registry = Registry("widget", [Entry("a", "math:sqrt", "built in")])
    registry.register("mine", "math:floor", "added before listing")
    assert registry.names() == ["a", "mine"] and registry.load("mine")(2.5) == 2
    registry.register("later", lambda: 3, "an object target")
    assert registry.names() == ["a", "mine", "later"] and registry.load("later")() == 3
    with pytest.raises(ValueError, match="already registered"):
        registry.register("a", "math:ceil")
    registry.register("a", "math:ceil", replace=True)
    assert registry.load("a")(1.2) == 2
    registry.unregister("mine")
    assert registry.names() == ["a", "later"] and "mine" not in registry


def test_registering_an_rm_before_the_catalog_is_listed_keeps_every_builtin():
    code = ("from morkit.reward_models.catalog import REWARD_MODELS\n"
            "REWARD_MODELS.register('my-rm', 'morkit.reward_models.rules.consensus:MathConsensus', 'test', kind='rule')\n"
            "from morkit.reward_models.catalog import list_rms\n"
            "names = [r.name for r in list_rms()]\n"
            "print(len(names), 'my-rm' in names, 'smollm2-orm' in names)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    count, mine, builtin = out.stdout.split()
    assert int(count) > 10 and mine == "True" and builtin == "True"


def test_unknown_name_is_an_input_error_listing_the_known_ones():
    registry = Registry("widget", [Entry("a", "math:sqrt", "x"), Entry("b", "math:floor", "y")])
    with pytest.raises(UnknownName, match=r"unknown widget 'c'; known: a, b") as info:
        registry.get("c")
    assert isinstance(info.value, InputError) and info.value.exit_code == 2


def test_ctts_cards_agree_with_their_adapter_classes():
    from morkit.reward_models.catalog import REWARD_MODELS
    from morkit.reward_models.ctts import CTTS_CARDS
    from morkit.reward_models.ctts.common import CttsRM
    from morkit.reward_models.family import family_of

    for card in CTTS_CARDS:
        entry = REWARD_MODELS.get(card.name)
        adapter = family_of(card).adapter_class(card)
        assert issubclass(adapter, CttsRM) and entry.load() is family_of(card) and entry.spec is card
        assert (adapter.name, adapter.model_id, adapter.kind, adapter.required_files, adapter.card) == \
            (card.name, card.model_id, card.kind, card.required, card)
        assert (entry.spec.model_id, entry.spec.kind, entry.spec.required) == \
            (card.model_id, card.kind, card.required)
    ldl = Entry("ldl", "morkit.reward_models.ctts.ldl:HEAD_FILES").load()
    assert set(ldl) <= set(REWARD_MODELS.get("ldl-reward-gemma-2-27b").spec.required)


def test_load_rm_names_the_missing_options():
    from morkit.reward_models.catalog import load_rm

    with pytest.raises(InputError, match=r"reward model 'remote' needs option\(s\) name, urls, model"):
        load_rm("remote")
    with pytest.raises(InputError, match=r"needs option\(s\) model_dir"):
        load_rm("vllm")


def test_the_remote_backend_builds_from_the_registry_without_connecting():
    from morkit.reward_models.catalog import load_rm

    rm = load_rm("remote", name="served", urls=["http://127.0.0.1:9"], model="m", render=lambda q, a: q + a)
    assert rm.name == "served" and rm.kind == "orm"


def test_a_reward_model_entry_is_typed():
    from morkit.reward_models.catalog import REWARD_MODELS

    judge = REWARD_MODELS.get("smollm2-judge")
    assert judge.spec.kind == "judge" and judge.meta["kind"] == "judge"  # meta: a read-only view of the card
    with pytest.raises(InputError, match="unknown card field 'kindd'"):
        REWARD_MODELS.register("test-typo", "math:sqrt", "x", kindd="orm")


PACKAGE = Path(__file__).resolve().parents[1] / "morkit"


def module_name(path: Path) -> str:
    """morkit/a/b.py -> morkit.a.b; a package's __init__.py -> the package."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def registries_in_source() -> dict[str, int]:
    """Every `Registry(...)` call in the package, "module:NAME" -> line; a call not assigned to a module-level
    name is "module:<line N>", so it cannot pass as listed."""
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        named: set[int] = set()
        for node in tree.body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if _is_registry_call(value):
                named.add(id(value))
                for target in targets:
                    if isinstance(target, ast.Name):
                        found[f"{module_name(path)}:{target.id}"] = node.lineno
        for node in ast.walk(tree):
            if _is_registry_call(node) and id(node) not in named:
                found[f"{module_name(path)}:<line {node.lineno}>"] = node.lineno
    return found


def _is_registry_call(node: ast.AST | None) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == "Registry") or \
        (isinstance(func, ast.Attribute) and func.attr == "Registry")


def test_every_registry_in_the_package_is_listed_here():
    """A new `Registry(...)` must be added to REGISTRIES or VALUE_REGISTRIES, so these tests and test_layers check
    it; a listed one must still exist."""
    in_source = registries_in_source()
    listed = registry_paths()
    assert len(listed) == len(set(listed)), "a registry is listed twice"
    unlisted = sorted(set(in_source) - set(listed))
    assert not unlisted, "registries missing from REGISTRIES / VALUE_REGISTRIES: " + ", ".join(unlisted)
    stale = sorted(set(listed) - set(in_source))
    assert not stale, "listed registries not found in the source: " + ", ".join(stale)
