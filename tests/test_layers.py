"""Imports point down the layers of ARCHITECTURE.md: every `morkit.*` import, lazy ones included, is checked."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "morkit"

# Lower numbers are lower layers; pairs at the same level may not import each other.
LEVELS = {
    "core": 0, "runtime": 1, "data": 2, "llm": 3, "reward_models": 3, "question_pool": 4, "selection": 5,
    "verify": 6, "search": 7, "loops": 7, "services": 8, "demo": 9, "integrations": 9, "cli": 10,
}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "morkit" else None


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("morkit."):
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.ImportFrom) and node.module == "morkit":
            found += [(node.lineno, f"morkit.{alias.name}") for alias in node.names if alias.name != "__version__"]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("morkit.")]
    return found


def test_every_module_belongs_to_a_layer():
    tops = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
            if (p.suffix == ".py" or (p / "__init__.py").is_file()) and p.name != "__init__.py"}
    assert tops == set(LEVELS), f"add new top-level modules to LEVELS and ARCHITECTURE.md: {tops ^ set(LEVELS)}"


def test_imports_point_down():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _layer("morkit." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
        if source is None or source == "__init__":
            continue
        for line, module in _imports(path):
            target = _layer(module)
            if target is None or target == source:
                continue
            if LEVELS[target] >= LEVELS[source]:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {source} imports {module}")
    assert not wrong, "imports that point up or across:\n" + "\n".join(wrong)


def test_registry_targets_point_down_from_their_registry():
    """A registry's entries may only name targets in its own layer or below (they are imports too)."""
    from test_registry import REGISTRIES

    from morkit.core.registry import Entry

    wrong = []
    for path in REGISTRIES.values():
        home = _layer(path.split(":")[0])
        for entry in Entry("registry", path).load():
            target = _layer(entry.target_path.split(":")[0])
            if target and LEVELS[target] > LEVELS[home]:
                wrong.append(f"{path} {entry.name!r} -> {entry.target_path}")
    assert not wrong, "registry targets above their registry:\n" + "\n".join(wrong)
