"""What `code-tests` reads from a task's prompt and tests: the prompt's Python code in every form agents send, the
function the candidate writes (never replaced by the prompt's own), and the prompt's helpers the tests rely on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from morkit.core import budget
from morkit.core.errors import InputError
from morkit.core.types import Query

_MAX_PROMPT_CHARS = 100_000  # a longer prompt is not read for code
_MAX_DROPPED_LINES = 400  # instruction lines dropped around a prompt's code, at most
_MAX_PARSED_CHARS = 2_000_000
"""Characters parsed while dropping the lines Python cannot parse, at most (about a second): a prompt's prose costs
a few parses of it; a prompt made of hundreds of bad lines after 100 kB of code would otherwise cost minutes."""
_PROMPT_FENCE = re.compile(r"^[ \t]*```[ \t]*(python3?|py)?[ \t]*\n(.*?)^[ \t]*```",
                           re.DOTALL | re.MULTILINE | re.IGNORECASE)
_DEF_LINE = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)")


@dataclass(frozen=True)
class PromptCode:
    """The Python code in a prompt: its top-level statements, the functions it defines in order, and those it leaves
    to write (a stub's body: a docstring, `pass`, `...` or `raise NotImplementedError`; a header with no body)."""

    body: tuple[Any, ...] = ()
    functions: tuple[str, ...] = ()
    stubs: frozenset[str] = frozenset()


def prompt_code(question: str) -> PromptCode:
    """The Python code in a prompt, in each form agents send: the code alone, the code fenced in ``` inside an
    instruction (each block read on its own), or instruction lines before or after it. Lines Python cannot parse
    are dropped one at a time, where the parser stops (within _MAX_PARSED_CHARS); prose has none."""
    import ast
    import textwrap

    if len(question) > _MAX_PROMPT_CHARS or "def " not in question:
        return PromptCode()
    segments = [textwrap.dedent(code) for _, code in _PROMPT_FENCE.findall(question)]
    try:
        ast.parse(question)
        segments = [question]  # code alone (a fence in a docstring is the docstring's)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        segments = segments or [question]
    body: list[Any] = []
    functions: list[str] = []
    stubs: set[str] = set()
    allowance = [_MAX_PARSED_CHARS]
    for segment in segments:
        statements, header = _parsed_dropping_lines(segment, allowance)
        body += statements
        found = [(node.lineno, node.name, _is_stub(node)) for node in statements if _is_function(node)]
        if header is not None:  # a header with no body yet: the function to write, where it comes last
            found.append((header[0], header[1], True))
        for _, name, stub in sorted(found):
            functions.append(name)
            if stub:
                stubs.add(name)
    return PromptCode(tuple(body), tuple(functions), frozenset(stubs))


def _parsed_dropping_lines(text: str, allowance: list[int]) -> tuple[list[Any], tuple[int, str] | None]:
    """(top-level statements of `text` once the lines the parser stops at are dropped, (line, name) of the last
    function header dropped). `allowance[0]`: characters left to parse, spent here; none left: nothing parsed."""
    import ast

    lines = text.split("\n")
    dropped = None
    bound = budget.current()
    for _ in range(min(len(lines), _MAX_DROPPED_LINES) + 1):
        bound.check()
        source = "\n".join(lines)
        allowance[0] -= len(source)
        if allowance[0] < 0:
            break
        try:
            return ast.parse(source).body, dropped
        except SyntaxError as exc:
            where = min(exc.lineno or 0, len(lines))
            while where > 0 and not lines[where - 1].strip():  # the parser stopped after the line at fault
                where -= 1
            if where == 0:
                break
            header = _DEF_LINE.match(lines[where - 1])
            if header and (dropped is None or where > dropped[0]):
                dropped = (where, header.group(1))
            lines[where - 1] = ""
        except (ValueError, RecursionError, MemoryError):
            break
    return [], dropped


def _is_function(node: Any) -> bool:
    import ast

    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))


def declared_entry_point(query: Query) -> str | None:
    """The query's `entry_point` (HumanEval's field: the name of the function under test), or None."""
    name = query.extra.get("entry_point")
    if name is None:
        return None
    if not (isinstance(name, str) and name.isidentifier()):
        raise InputError(f"query {query.id!r}: 'entry_point' must be the name of a Python function")
    return name


@dataclass(frozen=True)
class TaskCode:
    """What one query's tests run against a candidate: the test code, the prompt's helpers (source run after the
    candidate's names) and the name of the function under test (None: the prompt defines none)."""

    tests: str
    helpers: str
    under_test: str | None


def task_code(query: Query, tests: str) -> TaskCode:
    """The TaskCode of a query with test code. Tests that define HumanEval's `check(candidate)` and never call it get
    the call HumanEval's own harness appends, `check(<entry_point>)`, where the query names its entry point."""
    import ast

    entry = declared_entry_point(query)
    try:
        tree = ast.parse(tests)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # the sandbox reports it
        tree = None
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)] \
        if tree is not None else []
    checked = [c.args[0].id for c in calls if c.func.id == "check" and len(c.args) == 1
               and isinstance(c.args[0], ast.Name)]
    defines_check = tree is not None and any(isinstance(node, ast.FunctionDef) and node.name == "check"
                                             for node in tree.body)
    if entry is not None and defines_check and not any(c.func.id == "check" for c in calls):
        tests = tests.rstrip("\n") + f"\n\n\ncheck({entry})\n"
    code = prompt_code(query.question)
    named = entry or (checked[-1] if checked else None)
    under_test = function_under_test(code, named, (c.func.id for c in calls))
    return TaskCode(tests, prompt_helpers(code, under_test), under_test)


def function_under_test(code: PromptCode, named: str | None = None, called: Iterable[str] = ()) -> str | None:
    """The prompt's function the candidate writes: `named` (the query's entry point, or the name the tests pass to
    `check`), else the last of the prompt's functions the tests call by name, a stub before a finished one (a prompt
    may hold a function to make faster or to fix, then a usage example; the tests may call a finished helper too),
    else the prompt's last stub, else its last function."""
    if named is not None:
        return named
    used = set(called)
    for pick in ([n for n in code.functions if n in used and n in code.stubs], [n for n in code.functions if n in used],
                 [n for n in code.functions if n in code.stubs], list(code.functions)):
        if pick:
            return pick[-1]
    return None


def prompt_helpers(code: PromptCode | str, under_test: str | None = None) -> str:
    """The prompt's code the tests rely on (HumanEval/32's `poly`), run after the candidate's names: its imports
    (each skipped where it cannot be imported), literal constants and finished functions, never the function under
    test (`under_test`, else `function_under_test`'s) nor a stub. '' for prose."""
    import ast

    code = prompt_code(code) if isinstance(code, str) else code
    under_test = function_under_test(code) if under_test is None else under_test
    kept = []
    for node in code.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "module", None) != "__future__":
            kept.append(f"try:\n    {ast.unparse(node)}\nexcept ImportError:\n    pass\n")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and _literal_names(node):
            kept.append(ast.unparse(node) + "\n")
        elif _is_function(node) and node.name != under_test and not _is_stub(node):
            kept.append(ast.unparse(_without_annotations(node)) + "\n")
    return "".join(kept)


def _literal_names(node: Any) -> bool:
    """An assignment of a literal value (a constant, a tuple of them, ...) to plain names."""
    import ast

    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if node.value is None or not all(isinstance(t, ast.Name) for t in targets):
        return False
    try:
        ast.literal_eval(node.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _without_annotations(function: Any) -> Any:
    """A function's definition without its annotations, which run at definition (a prompt's `np.ndarray` would
    fail where numpy cannot be imported) and change nothing it does."""
    arguments = function.args
    for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg,
                     arguments.kwarg):
        if argument is not None:
            argument.annotation = None
    function.returns = None
    return function


def _is_stub(function: Any) -> bool:
    import ast

    body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                             or isinstance(s, (ast.Import, ast.ImportFrom)))]
    return all(isinstance(s, ast.Pass) or (isinstance(s, ast.Raise) and "NotImplementedError" in ast.dump(s))
               for s in body)
