"""docs/troubleshooting.md cannot drift from the code: every message its tables quote is a string the package
builds, and every exit code or HTTP status a row states is the one that message ends in (read from the source:
the error class's `exit_code`, main()'s handlers, the server's mapping of errors to statuses)."""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "morkit"
PAGE = ROOT / "docs" / "troubleshooting.md"
HOLE = "\x00"  # a value filled in at run time (an f-string field, %s, {name}), and an elision ("...") on the page
ARGPARSE_EXIT = 2  # morkit.cli.args.Parser.error exits 2 for a flag argparse rejects (checked below)


@dataclass(frozen=True)
class Template:
    """A message the package can print: its text with HOLE for each run-time value, the exception class built
    with it (None for a log line or a plain string), the module and the function it is in."""

    text: str
    raised_by: str | None
    status: int | None  # the first argument of `_Refused(status, message)`, the server's own refusals
    module: str
    span: tuple[int, int] | None  # the lines of the function or class it is in


@dataclass
class Names:
    """What a name in a message stands for: module constants (`VLLM_INSTALL`), and functions that return a message
    (`self._full(n)`) or raise one given as an argument (`_check(ok, path, "no such pool directory")`)."""

    constants: dict[str, list[str]]
    returns: dict[str, list[str]]
    raises: dict[tuple[str, str], dict[str, str]]  # (module, function) -> {parameter: exception class}
    params: dict[tuple[str, str], list[str]]


NO_NAMES = Names({}, {}, {}, {})


def _text(node: ast.AST, names: Names = NO_NAMES) -> list[str]:
    """The texts a string expression can take, with HOLE for run-time values ([] if it is not a string)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [re.sub(r"%[-\d.]*[sdrfg]|\{\w*(?:![rs])?(?::[^}]*)?\}", HOLE, node.value)]
    if isinstance(node, ast.JoinedStr):
        texts = [""]
        for value in node.values:
            inner = value.value if isinstance(value, ast.FormattedValue) else None
            options = ([value.value] if isinstance(value, ast.Constant) else
                       names.constants.get(inner.id, [HOLE]) if isinstance(inner, ast.Name) else [HOLE])
            texts = [t + o for t in texts for o in options]
        return texts
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left, names), _text(node.right, names)
        if left or right:
            return [a + b for a in (left or [HOLE]) for b in (right or [HOLE])]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _text(node.func.value, names)
    if isinstance(node, ast.Call) and _name(node.func) in names.returns:
        return names.returns[_name(node.func)]
    if isinstance(node, ast.Name) and node.id in names.constants:
        return names.constants[node.id]
    return []


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_exception(cls: str | None, bases: dict[str, list[str]]) -> bool:
    """Whether class `cls` (by name) is an exception: a built-in one, or a package class deriving from one."""
    return cls is not None and any(isinstance(getattr(builtins, name, None), type)
                                   and issubclass(getattr(builtins, name), BaseException)
                                   or name == "ArgumentTypeError" for name in ancestry(cls, bases))


def _raised(node: ast.AST, bases: dict[str, list[str]], owner: str | None) -> str | None:
    """The exception class a call builds: `SomeError(...)`, or `super().__init__(...)` inside an exception class."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if (_name(func) == "__init__" and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call)
            and _name(func.value.func) == "super"):
        return owner if _is_exception(owner, bases) else None
    return _name(func) if _is_exception(_name(func), bases) else None


def _arguments(call: ast.Call, params: list[str]) -> list[tuple[str | None, ast.AST]]:
    """(parameter, argument) of a call, positional ones by position (a method's self/cls skipped)."""
    if params[:1] in (["self"], ["cls"]) and isinstance(call.func, ast.Attribute):
        params = params[1:]
    out: list[tuple[str | None, ast.AST]] = [(params[i] if i < len(params) else None, a)
                                             for i, a in enumerate(call.args)]
    return out + [(k.arg, k.value) for k in call.keywords]


def _file_templates(path: Path, tree: ast.Module, names: Names, bases: dict[str, list[str]]) -> list[Template]:
    """The message templates of one module (see `package`)."""
    module = str(path.relative_to(ROOT))
    templates: list[Template] = []
    claimed: set[int] = set()

    def claim(arg: ast.AST, cls: str | None, status: int | None, span: tuple[int, int] | None) -> None:
        texts = _text(arg, names)
        if texts:
            claimed.update(id(sub) for sub in ast.walk(arg))
        templates.extend(Template(text, cls, status, module, span) for text in texts)

    def visit(node: ast.AST, span: tuple[int, int] | None, owner: str | None) -> None:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return  # a docstring: never printed
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            span = (node.lineno, node.end_lineno or node.lineno)
        if isinstance(node, ast.ClassDef):
            owner = node.name
        cls = _raised(node, bases, owner)
        if cls:
            args = list(node.args)
            status = None
            if cls == "_Refused" and args and isinstance(args[0], ast.Constant):
                status, args = args[0].value, args[1:]
            for arg in [*args, *(k.value for k in node.keywords)]:
                claim(arg, cls, status, span)
        elif isinstance(node, ast.Call) and (str(path), _name(node.func)) in names.raises:
            raising = names.raises[str(path), _name(node.func)]  # a helper of this module's
            for param, arg in _arguments(node, names.params[str(path), _name(node.func)]):
                if param in raising:
                    claim(arg, raising[param], None, span)
        elif id(node) not in claimed and isinstance(node, (ast.Constant, ast.JoinedStr, ast.BinOp)):
            templates.extend(Template(text, None, None, module, span) for text in _text(node))
        for child in ast.iter_child_nodes(node):
            visit(child, span, owner)

    visit(tree, None, None)
    return templates


@lru_cache(maxsize=1)
def package() -> tuple[list[Template], dict[str, list[str]]]:
    """Every message template of the package, and each class's base classes (by name)."""
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in sorted(PACKAGE.rglob("*.py"))}
    names = Names({}, {}, {}, {})
    bases: dict[str, list[str]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b for b in map(_name, node.bases) if b]
    for path, tree in trees.items():
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                names.constants.setdefault(node.targets[0].id, []).extend(_text(node.value))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = [a.arg for a in function.args.args]
            names.params[str(path), function.name] = params
            for node in ast.walk(function):
                if isinstance(node, ast.Return) and node.value is not None and _text(node.value):
                    names.returns.setdefault(function.name, []).extend(_text(node.value))
                cls = _raised(node, bases, None)
                if cls:
                    for arg in [*node.args, *(k.value for k in node.keywords)]:
                        if isinstance(arg, ast.Name) and arg.id in params:
                            names.raises.setdefault((str(path), function.name), {})[arg.id] = cls
    templates: list[Template] = []
    for path, tree in trees.items():
        templates.extend(_file_templates(path, tree, names, bases))
    return templates, bases


@lru_cache(maxsize=1)
def exit_codes() -> dict[str, int]:
    """Each class's `exit_code`, as set in its body or inherited (morkit.core.errors: InputError 2, others 1)."""
    own: dict[str, int] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if (isinstance(stmt, ast.Assign) and [_name(t) for t in stmt.targets] == ["exit_code"]
                            and isinstance(stmt.value, ast.Constant)):
                        own[node.name] = stmt.value.value
    return own


def ancestry(cls: str, bases: dict[str, list[str]]) -> list[str]:
    """`cls` and its base classes, nearest first (breadth first over the package's classes)."""
    order, queue = [], [cls]
    while queue:
        name = queue.pop(0)
        if name not in order:
            order.append(name)
            queue.extend(bases.get(name, []))
    return order


def exit_code_of(cls: str) -> int | None:
    """What the CLI exits with when `cls` is raised: a MorkitError's exit_code, 2 for argparse's, None otherwise."""
    if cls == "ArgumentTypeError":
        return ARGPARSE_EXIT
    _, bases = package()
    chain = ancestry(cls, bases)
    if "MorkitError" not in chain:
        return None
    own = exit_codes()
    return next(own[name] for name in chain if name in own)


@lru_cache(maxsize=1)
def server_statuses() -> dict[str, int]:
    """The HTTP status each error class becomes in `morkit serve`, read from the handlers in serving/app.py."""
    source = (PACKAGE / "services" / "serving" / "app.py").read_text(encoding="utf-8")
    return {cls: int(code) for cls, code in
            reversed(re.findall(r"except (\w+) as exc:\s*\n\s*raise _Refused\((\d+)", source))}


def status_of(template: Template) -> int | None:
    if template.status is not None:
        return template.status
    if template.raised_by is None:  # a reply built by hand, e.g. the 401 of the API-key middleware
        if template.span is None:
            return None
        lines = (ROOT / template.module).read_text(encoding="utf-8").splitlines()
        codes = set(re.findall(r'"status": (\d{3})', "\n".join(lines[template.span[0] - 1:template.span[1]])))
        return int(codes.pop()) if len(codes) == 1 else None
    statuses = server_statuses()
    _, bases = package()
    return next((statuses[name] for name in ancestry(template.raised_by, bases) if name in statuses), None)


@lru_cache(maxsize=1)
def main_handler_codes() -> dict[str, int]:
    """The lines main() prints itself (not an error's message) and the code its handler returns with them."""
    tree = ast.parse((PACKAGE / "cli" / "main.py").read_text(encoding="utf-8"))
    main = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "main")
    out = {}
    for handler in (h for n in ast.walk(main) if isinstance(n, ast.Try) for h in n.handlers):
        returns = [n.value.value for n in ast.walk(handler) if isinstance(n, ast.Return)
                   and isinstance(n.value, ast.Constant)]
        for node in ast.walk(handler):
            for text in _text(node):
                if returns and isinstance(node, (ast.Constant, ast.JoinedStr)):
                    out[text] = returns[0]
    return out


# ---- matching a quoted message against the templates ---------------------------------------------------------


def normal(text: str) -> str:
    return " ".join(text.split())


def page_pattern(message: str) -> str:
    """A quoted message with its elisions ("...", "…") as HOLE."""
    return normal(message.replace("...", HOLE).replace("…", HOLE))


def aligned(page: str, template: str) -> int:
    """How many literal characters of `template` line up with literal characters of `page` in the best way both
    can be read as one text, HOLE standing for any text on either side; -1 when they cannot (a HOLE of the page
    may swallow template text, which is why the count, not just the fit, decides)."""
    a, b = re.sub(HOLE + "+", HOLE, page), re.sub(HOLE + "+", HOLE, template)
    la, lb = len(a), len(b)
    # best[i][j]: the most aligned characters over a[i:] and b[j:], or -1; filled from the ends
    best = [[-1] * (lb + 2) for _ in range(la + 2)]
    best[la][lb] = 0
    for i in range(la, -1, -1):
        row, below = best[i], best[i + 1]
        hole_a = i < la and a[i] == HOLE
        for j in range(lb, -1, -1):
            if i == la and j == lb:
                continue
            value = -1
            if hole_a:  # the page's HOLE takes nothing more, or b[j] too
                value = max(below[j], row[j + 1] if j < lb else -1)
            if j < lb and b[j] == HOLE:  # the template's HOLE takes nothing more, or a[i] too
                value = max(value, row[j + 1], below[j] if i < la else -1)
            if i < la and j < lb and a[i] == b[j] != HOLE and below[j + 1] >= 0:
                value = max(value, below[j + 1] + 1)
            row[j] = value
    return best[0][0]


LOCATED = HOLE + ": "  # "FILE: " or "FILE:LINE: " (InputError(path=, line=)), "argument --flag: " (argparse)
HELP = " (see " + HOLE + " --help)"  # what morkit.cli.args.Parser.error adds to a flag's refusal


@lru_cache(maxsize=1)
def prepared() -> list[tuple[Template, str, list[str], int]]:
    """Each template with its normalised text, its literal parts of 4 characters or more, and its literal length."""
    out = []
    for template in package()[0]:
        text = normal(template.text)
        parts = text.split(HOLE)
        out.append((template, text, [p for p in parts if len(p) >= 4], sum(map(len, parts))))
    return out


@cache
def matches(message: str) -> tuple[list[Template], list[Template]]:
    """The templates a quoted message is an instance of, allowing a FILE:LINE: or argparse prefix and suffix:
    those of which it shows 12 literal characters or more and at least half, then the wrappers it shows whole
    (`f"query {id!r}: {exc}"` around another error's message), which say how the message ends but not that
    it exists."""
    pattern = page_pattern(message)
    literal = max(pattern.split(HOLE), key=len)
    assert len(literal) >= 12, f"{message!r}: quote more of the message than {literal!r}"
    specific, wrappers = [], []
    for template, text, parts, length in prepared():
        shown = sum(len(part) for part in parts if part in pattern)
        if shown < 6 or 5 * shown < 2 * length:
            continue  # too little of the template on the page to be it (the alignment below is the real test)
        for form in (text, LOCATED + text, text + HELP, LOCATED + text + HELP):
            shown, length = aligned(pattern, form), len(form.replace(HOLE, ""))
            if shown >= 12 and 2 * shown >= length:
                specific.append(template)
                break
            if shown >= 6 and shown == length:
                wrappers.append(template)
                break
    return specific, wrappers


# ---- the page's tables ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    line: int
    message: str
    code: int | None  # the exit code or HTTP status the row states; None for "-"
    kind: str  # "exit" or "status", from the table's header


def rows() -> list[Row]:
    """Every table row of the page whose first column quotes a message and whose second gives exit or status."""
    out: list[Row] = []
    kind = None
    for number, line in enumerate(PAGE.read_text(encoding="utf-8").splitlines(), start=1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        if len(cells) >= 2 and cells[0].lower() in ("message", "you see"):
            kind = {"exit": "exit", "status": "status"}.get(cells[1].lower())
            continue
        if not cells or set("".join(cells)) <= set("-: "):
            if not cells:
                kind = None
            continue
        quoted = re.fullmatch(r"(`+) ?(.+?) ?\1", cells[0])  # `text`, or ``text with `backticks` ``
        if kind and quoted:
            code = re.match(r"\d+", cells[1])
            out.append(Row(number, quoted.group(2), int(code.group(0)) if code else None, kind))
    return out


ROWS = rows()


def test_the_page_quotes_messages():
    assert len(ROWS) >= 30 and {r.kind for r in ROWS} == {"exit", "status"}


@pytest.mark.parametrize("row", ROWS, ids=[f"line {r.line}" for r in ROWS])
def test_each_quoted_message_is_built_by_the_package(row):
    assert matches(row.message)[0], (f"docs/troubleshooting.md:{row.line}: no string in morkit/ prints "
                                     f"{row.message!r}; quote the message as the code builds it")


def stated_codes(row: Row) -> set[int]:
    """The exit codes (or HTTP statuses) the code gives the row's message: the message's own templates decide;
    where none of them is an error with a code (a LookupError, say), the wrappers around it do."""
    handled = main_handler_codes()
    for found in matches(row.message):
        if row.kind == "status":
            codes = {status_of(t) for t in found}
        else:
            codes = {exit_code_of(t.raised_by) for t in found if t.raised_by}
            pattern = page_pattern(row.message)
            codes |= {code for text, code in handled.items()
                      if aligned(pattern, normal(text)) == len(normal(text).replace(HOLE, ""))}
            codes |= {0 for t in found if t.raised_by is None and row.code == 0}  # a warning: the run goes on
        codes.discard(None)
        if codes:
            return codes
    return set()


@pytest.mark.parametrize("row", [r for r in ROWS if r.code is not None], ids=lambda r: f"line {r.line}")
def test_each_stated_code_is_the_one_the_message_ends_in(row):
    codes = stated_codes(row)
    assert row.code in codes, (f"docs/troubleshooting.md:{row.line}: {row.message!r} states {row.kind} {row.code}, "
                               f"but the code gives {sorted(codes) or 'none'}")


def test_argparse_refusals_exit_2():
    source = (PACKAGE / "cli" / "args.py").read_text(encoding="utf-8")
    assert f"raise SystemExit({ARGPARSE_EXIT})" in source


@pytest.mark.parametrize("message, expected", [
    ("data set spec 'gsm8k:0': N in NAME:N must be a whole number >= 1", True),
    ("data set spec 'gsm8k:0': N in NAME:N must be a number >= 1", False),  # drifted wording
    ("/data: data folder not found", True),
    ("dup.jsonl:2: duplicate id 'q1' (first on line 1)", True),
    ("unknown reward model 'x'; known: a, b", True),
    ("unknown reward model 'x' (known: a, b)", False),
])
def test_the_matcher_tells_a_quoted_message_from_a_drifted_one(message, expected):
    assert bool(matches(message)[0]) is expected


@pytest.mark.parametrize("row, expected", [
    (Row(0, "dup.jsonl:2: duplicate id 'q1' (first on line 1)", 2, "exit"), {2}),
    (Row(0, "device 'cuda': torch sees no CUDA device here", 1, "exit"), {1}),
    (Row(0, "the queue is full (256 requests waiting); retry later", 503, "status"), {503}),
    (Row(0, "queries[0]: query 'q1': 'candidates' is empty; send at least one candidate to rank", 400, "status"),
     {400}),
])
def test_the_codes_of_known_messages(row, expected):
    assert stated_codes(row) == expected


def test_the_codes_read_from_the_source():
    assert exit_code_of("InputError") == 2 and exit_code_of("UnknownRewardModel") == 2
    assert exit_code_of("UnavailableError") == 1 and exit_code_of("RemoteScoringError") == 1
    assert exit_code_of("TooFewMixed") is None
    assert server_statuses()["TooLarge"] == 413 and server_statuses()["InputError"] == 400
    assert 130 in main_handler_codes().values()
