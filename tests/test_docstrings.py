"""Docstrings say what and why in a sentence or two; the specification lives on the docs page of its topic."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "morkit"
MODULE_LINES, DEFINITION_LINES = 3, 4


def too_long(path: Path, package: Path = PACKAGE) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = path.relative_to(package.parent)
    found = []
    lines = len((ast.get_docstring(tree) or "").splitlines())
    if lines > MODULE_LINES:
        found.append(f"{where}:1 module docstring, {lines} lines (at most {MODULE_LINES})")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            lines = len((ast.get_docstring(node) or "").splitlines())
            if lines > DEFINITION_LINES:
                found.append(f"{where}:{node.lineno} {node.name}, {lines} lines (at most {DEFINITION_LINES})")
    return found


def test_docstrings_are_a_sentence_or_two():
    found = [line for path in sorted(PACKAGE.rglob("*.py")) for line in too_long(path)]
    assert not found, "move the detail to the docs page of its topic:\n" + "\n".join(found)


def test_the_check_sees_a_long_docstring(tmp_path):
    module = tmp_path / "morkit" / "long.py"
    module.parent.mkdir()
    module.write_text('"""One.\n\nTwo.\nThree."""\n\ndef f():\n    """a\n    b\n    c\n    d\n    e"""\n')
    assert [line.split(" ", 1)[1] for line in too_long(module, module.parent)] == [
        "module docstring, 4 lines (at most 3)", "f, 5 lines (at most 4)"]
