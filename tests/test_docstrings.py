"""Docstrings say what and why in a sentence or two; the specification lives on the docs page of its topic.
Public callables add Google-style sections (Args:, Returns:) that the API reference renders as tables."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import morkit

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "morkit"
MODULE_LINES, DEFINITION_LINES = 3, 4
SECTION = re.compile(r"^\s*(Args|Returns|Yields|Raises|Attributes|Examples?|Note):\s*$")
ENTRY = re.compile(r"^(\s*)(\*{0,2}\w+)(\s*\([^)]*\))?:")


def summary_lines(docstring: str) -> int:
    """The number of lines before the first Google section header (trailing blank lines not counted)."""
    lines = []
    for line in docstring.splitlines():
        if SECTION.match(line):
            break
        lines.append(line)
    while lines and not lines[-1].strip():
        lines.pop()
    return len(lines)


def too_long(path: Path, package: Path = PACKAGE) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = path.relative_to(package.parent)
    found = []
    lines = summary_lines(ast.get_docstring(tree) or "")
    if lines > MODULE_LINES:
        found.append(f"{where}:1 module docstring, {lines} lines (at most {MODULE_LINES})")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            lines = summary_lines(ast.get_docstring(node) or "")
            if lines > DEFINITION_LINES:
                found.append(f"{where}:{node.lineno} {node.name}, {lines} lines (at most {DEFINITION_LINES})")
    return found


def test_docstrings_are_a_sentence_or_two():
    found = [line for path in sorted(PACKAGE.rglob("*.py")) for line in too_long(path)]
    assert not found, "move the detail to the docs page of its topic:\n" + "\n".join(found)


def test_the_check_sees_a_long_docstring(tmp_path):
    module = tmp_path / "morkit" / "long.py"
    module.parent.mkdir()
    module.write_text('"""One.\n\nTwo.\nThree."""\n\ndef f():\n    """a\n    b\n    c\n    d\n    e"""\n'
                      '\n\ndef g(x):\n    """a\n    b\n\n    Args:\n        x: one\n            two\n\n'
                      '    Returns:\n        three\n        four\n    """\n'
                      '\n\ndef h(x):\n    """a\n    b\n    c\n    d\n    e\n\n    Args:\n        x: one\n    """\n')
    assert [line.split(" ", 1)[1] for line in too_long(module, module.parent)] == [
        "module docstring, 4 lines (at most 3)", "f, 5 lines (at most 4)", "h, 5 lines (at most 4)"]


# -- Args:/Returns: on the public API ----------------------------------------------------------------------------


def section(docstring: str, header: str) -> list[str] | None:
    """The entry names of one Google section (None when the docstring has no such section)."""
    lines = docstring.splitlines()
    for at, line in enumerate(lines):
        if line.strip() == header + ":":
            indent = len(line) - len(line.lstrip())
            names, entry_indent = [], None
            for body in lines[at + 1:]:
                if not body.strip():
                    continue
                depth = len(body) - len(body.lstrip())
                if depth <= indent:
                    break
                entry_indent = depth if entry_indent is None else entry_indent
                match = ENTRY.match(body)
                if depth == entry_indent and match:
                    names.append(match.group(2))
            return names
    return None


def public_api() -> Iterator[tuple[str, Any]]:
    """Every exported function and class, and the public methods of exported classes (and their morkit bases)."""
    objects = [(name, getattr(morkit, name)) for name in morkit.__all__ if not name.startswith("_")]
    for line in (ROOT / "docs" / "reference.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("::: "):  # what the reference renders besides the exports (e.g. RoutedReward)
            module, _, name = line[4:].strip().rpartition(".")
            objects.append((name, getattr(importlib.import_module(module), name)))
    seen: set[int] = set()
    for name, obj in objects:
        if inspect.isfunction(obj):
            if id(obj) not in seen:
                seen.add(id(obj))
                yield name, obj
        elif inspect.isclass(obj) and obj.__module__.startswith("morkit.") and id(obj) not in seen:
            seen.add(id(obj))
            yield name, obj
            for klass in obj.__mro__:
                if not klass.__module__.startswith("morkit."):
                    continue
                for member_name, member in vars(klass).items():
                    function = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
                    if member_name.startswith("_") or not inspect.isfunction(function) or id(function) in seen:
                        continue
                    seen.add(id(function))
                    yield f"{klass.__name__}.{member_name}", function


def parameters(obj: Any) -> list[inspect.Parameter]:
    """The parameters a caller passes (self and cls left out); a class's are those of its own __init__."""
    if inspect.isclass(obj):
        if not getattr(obj.__init__, "__module__", "").startswith("morkit."):
            return []  # Exception's or Protocol's __init__: nothing of morkit's to document
        obj = obj.__init__
    found = list(inspect.signature(obj).parameters.values())
    return [p for p in found if p.name not in ("self", "cls")]


def undocumented(name: str, obj: Any) -> list[str]:
    """What the docstring of one public callable lacks: Args entries per parameter, Returns unless it returns None."""
    docstring = inspect.cleandoc(obj.__doc__ or "")  # its own: getdoc would lend a base class's
    wanted = parameters(obj)
    problems = []
    if wanted:
        header = "Args"
        if inspect.isclass(obj) and section(docstring, "Args") is None and section(docstring, "Attributes"):
            header = "Attributes"  # a dataclass may document its fields as attributes
        named = {entry.lstrip("*") for entry in section(docstring, header) or []}
        missing = [p.name for p in wanted if p.name not in named]
        if section(docstring, header) is None:
            problems.append(f"{name}: no Args: section")
        elif missing:
            problems.append(f"{name}: Args: does not name {', '.join(missing)}")
    if not inspect.isclass(obj):
        returns = inspect.signature(obj).return_annotation
        if returns not in (None, "None") and section(docstring, "Returns") is None \
                and section(docstring, "Yields") is None:
            problems.append(f"{name}: no Returns: section")
    return problems


def test_the_public_api_documents_its_parameters():
    api = list(public_api())
    assert len(api) > 80  # the walk reaches the exports and their methods
    found = [problem for name, obj in api for problem in undocumented(name, obj)]
    assert not found, "add Google-style sections:\n" + "\n".join(found)


def test_the_check_sees_a_missing_parameter():
    def documented(path: str, *, tries: int = 3, **extra: Any) -> int:
        """Read a file.

        Args:
            path: Where it is.
            tries (int): How often to try.
            **extra: Passed on.

        Returns:
            Its size.
        """
        return 0

    def lacking(path: str, tries: int = 3) -> int:
        """Read a file.

        Args:
            path: Where it is.
        """
        return 0

    def nothing(path: str) -> None:
        """Read a file."""

    def lines(path: str, **extra: Any) -> Iterator[str]:
        """Read a file's lines.

        Args:
            path: Where it is.

        Yields:
            Its lines.
        """
        yield path

    assert undocumented("documented", documented) == []
    assert undocumented("lacking", lacking) == ["lacking: Args: does not name tries", "lacking: no Returns: section"]
    assert undocumented("nothing", nothing) == ["nothing: no Args: section"]
    assert undocumented("lines", lines) == ["lines: Args: does not name extra"]  # **extra too; Yields: will do
