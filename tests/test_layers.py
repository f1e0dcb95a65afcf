"""Imports point down the layers of ARCHITECTURE.md: every `morkit.*` import, lazy ones included, is checked."""

from __future__ import annotations

import ast
import re
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


def _registry_targets() -> list[tuple[str, str, str]]:
    """(registry "module:NAME", entry name, "module:attribute") for every built-in entry's target, and for the
    "module:attribute" strings of its metadata (a loop's config and critic, an RM's engine factory): imports made
    when an entry loads."""
    from test_registry import registry_paths

    from morkit.core.registry import Entry

    found = []
    for path in registry_paths():
        for entry in Entry("registry", path).load():
            found.append((path, entry.name, entry.target_path))
            found += [(path, entry.name, value) for value in entry.meta.values()
                      if isinstance(value, str) and TARGET.match(value)]
    return [(path, name, target) for path, name, target in found if target.startswith("morkit.")]


TARGET = re.compile(r"^morkit(\.\w+)+:\w[\w.]*$")
"""A lazy import written as text, "morkit.module:attribute" (Entry.load imports the module when asked)."""


def test_registry_targets_point_down_from_their_registry():
    """A registry's entries may only name targets in its own layer or below (they are imports too)."""
    wrong = []
    for path, name, target_path in _registry_targets():
        home, target = _layer(path.split(":")[0]), _layer(target_path.split(":")[0])
        if target and LEVELS[target] > LEVELS[home]:
            wrong.append(f"{path} {name!r} -> {target_path}")
    assert not wrong, "registry targets above their registry:\n" + "\n".join(wrong)


def _import_graph() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """module -> the modules it imports (every import, lazy ones included; `from a import b` is a.b when b is a
    module; importing a.b.c also runs the packages a and a.b), plus the lazy edges: a registry's module -> each
    target's module, and a module -> each "morkit.module:attribute" string it holds. Returns (graph, lazy edges)."""
    from test_registry import module_name

    paths = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}

    def resolve(module: str) -> set[str]:
        parts = module.split(".")
        return {".".join(parts[:i]) for i in range(2, len(parts) + 1)} & set(paths)

    graph: dict[str, set[str]] = {module: set() for module in paths}
    lazy: set[tuple[str, str]] = set()
    for module, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "morkit":
                graph[module] |= resolve(node.module)
                graph[module] |= {m for alias in node.names for m in resolve(f"{node.module}.{alias.name}")}
            elif isinstance(node, ast.Import):
                graph[module] |= {m for alias in node.names for m in resolve(alias.name)}
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and TARGET.match(node.value):
                lazy |= {(module, target) for target in resolve(node.value.split(":")[0])}
    for path, _, target in _registry_targets():
        lazy |= {(path.split(":")[0], module) for module in resolve(target.split(":")[0])}
    lazy = {(a, b) for a, b in lazy if a != b}
    for a, b in lazy:
        graph[a].add(b)
    for module in graph:
        graph[module].discard(module)
    return graph, lazy


def _path(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """The shortest import chain from start to goal, or None."""
    previous: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        module = queue.pop(0)
        if module == goal:
            chain = [module]
            while previous[chain[-1]] is not None:
                chain.append(previous[chain[-1]])
            return chain[::-1]
        for nxt in sorted(graph[module]):
            if nxt not in previous:
                previous[nxt] = module
                queue.append(nxt)
    return None


KNOWN_CIRCLES = {
    # A registry's target imports its base class or helpers back from the registry's module. Each goes when the
    # shared names move below both (the registry in a module of its own, or the helpers in one).
    "morkit.data.datasets -> morkit.data.benchmarks -> morkit.data.datasets",
    "morkit.data.sources -> morkit.data.prepare -> morkit.data.sources",
    "morkit.question_pool.graders -> morkit.question_pool.ifeval -> morkit.question_pool.graders",
    # A Ray replica places its RM on the local placement, so the ray placement looks up the registry it is in.
    "morkit.reward_models.placement -> morkit.reward_models.backends.ray -> morkit.reward_models.placement",
}
"""The circles through a registry found when this check came in; the list may only shrink."""


def test_no_new_import_circle_goes_through_a_registry():
    """The registries' lazy imports (Entry targets, "module:attribute" strings) are invisible to a reading of the
    import statements; with them as edges, no circle may pass through one beyond KNOWN_CIRCLES."""
    graph, lazy = _import_graph()
    assert any(a == "morkit.loops.registry" for a, _ in lazy)  # the registries' targets are in the graph
    circles = set()
    for source, target in sorted(lazy):
        chain = _path(graph, target, source)
        if chain:
            circles.add(" -> ".join([source, *chain]))
    new = sorted(circles - KNOWN_CIRCLES)
    assert not new, "import circles through a lazy (registry) import:\n" + "\n".join(new)
    gone = sorted(KNOWN_CIRCLES - circles)
    assert not gone, "circles now gone: remove them from KNOWN_CIRCLES:\n" + "\n".join(gone)


def test_the_circle_check_sees_a_registry_circle():
    graph = {"morkit.a": {"morkit.b"}, "morkit.b": {"morkit.c"}, "morkit.c": {"morkit.a"}}
    assert _path(graph, "morkit.b", "morkit.a") == ["morkit.b", "morkit.c", "morkit.a"]
    assert _path({"morkit.a": set(), "morkit.b": set()}, "morkit.b", "morkit.a") is None
