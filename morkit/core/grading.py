"""Grading math answers: final-answer extraction, equivalence (normalisation and exact rationals first, then
`math_verify` under a time guard that also works off the main thread), and the one `is_correct`. Nothing is
ever `eval`ed.
"""

from __future__ import annotations

import bisect
import re
import threading
from fractions import Fraction
from functools import lru_cache
from typing import Hashable, Sequence

from morkit.core import budget
from morkit.core.answer_scan import A_LINE, ANSWER_IS, last_boxed, strip_calc

VERIFY_SECONDS = 5
"""Time guard for one math_verify parse or comparison; past it the answers count as different."""
_MAX_SYMBOLIC_CHARS = 300
_REL_TOL = Fraction(1, 10**6)

_HASHES = re.compile(r"####\s*([^\n]+)")
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_UNWRAP = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_UNITS = re.compile(r"^([-+]?[\d.,/]+)\s*(?:[a-zA-Z]{2,}+\.?\s*)+$")  # possessive: linear
_THOUSANDS = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_DECIMAL = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")
_HUGE_EXPONENT = re.compile(r"[eE][-+]?0*[1-9]\d{3,}$")
_SLASH = re.compile(r"^([-+]?\d+)/(\d+)$")
_FRAC = re.compile(r"^([-+]?)(\d+)?\\frac\{([-+]?\d+(?:\.\d+)?)\}\{([-+]?\d+(?:\.\d+)?)\}$")
_FRAC_SHORT = re.compile(r"^([-+]?)\\frac(\d)(\d)$")
_COSTLY = re.compile(r"\^\s*\{[^{}]*\^|(?:\^|\*\*)\s*\{?\s*\(?\s*\d{4,}|\d{4,}\s*!|\d[eE][-+]?\d{4,}")


def extract_answer(text: str | None, strict: bool = False) -> str | None:
    """The final answer in a solution: last \\boxed{}, GSM8K '#### x', a final 'A: x' line,
    'The answer is x', else (unless `strict`: only a stated answer counts) the last number in the
    text; None when there is none."""
    if text is None or not text.strip():
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip() or None
    for pattern in (_HASHES, A_LINE, ANSWER_IS):
        matches = pattern.findall(text)
        if matches:
            answer = re.split(r"\.\s", matches[-1].strip(), maxsplit=1)[0].strip().rstrip(".").strip()
            if answer:
                return answer
    if strict:
        return None
    numbers = _NUMBER.findall(strip_calc(text))
    return numbers[-1] if numbers else None


def normalize_answer(answer: str) -> str:
    """Strip formatting that never changes the value: $, \\text{}, \\left/\\right, thousands
    commas, spaces, a trailing period, degree/percent signs, units after a number, 'x ='."""
    s = answer.strip()
    boxed = last_boxed(s)
    s = boxed if boxed is not None else s
    for _ in range(3):
        s = _UNWRAP.sub(r"\1", s)
    for old, new in (("\\left", ""), ("\\right", ""), ("\\$", ""), ("$", ""), ("\\%", ""), ("%", ""),
                     ("^\\circ", ""), ("^{\\circ}", ""), ("°", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"),
                     ("{,}", ","), ("\\!", ""), ("\\,", ""), ("\\;", ""), ("\\:", ""), ("\\ ", " ")):
        s = s.replace(old, new)
    s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s.strip())
    s = s.strip().rstrip(".").strip()
    units = _UNITS.match(s)
    if units:
        s = units.group(1)
    s = re.sub(r"\s+", "", s)
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    return s


def as_number(answer: str) -> Fraction | None:
    """The exact value of a normalised plain number, a/b, \\frac{a}{b} or mixed 12\\frac{3}{5}."""
    try:
        if _DECIMAL.match(answer):
            if _HUGE_EXPONENT.search(answer):  # 1e10000000 would take minutes to expand exactly
                return None
            return Fraction(answer)
        if m := _SLASH.match(answer):
            return Fraction(int(m.group(1)), int(m.group(2)))
        if m := _FRAC.match(answer):
            sign, whole, num, den = m.groups()
            value = Fraction(num) / Fraction(den) + int(whole or 0)
            return -value if sign == "-" else value
        if m := _FRAC_SHORT.match(answer):
            value = Fraction(int(m.group(2)), int(m.group(3)))
            return -value if m.group(1) == "-" else value
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return None


def reference_answer(reference: str | None) -> str | None:
    """The final answer in a reference: extracted from a worked solution ('#### 18', \\boxed{}, several
    lines), else the reference itself (a bare answer such as '\\frac{1}{2}' is not mined for numbers)."""
    if reference is None:
        return None
    text = str(reference).strip()
    worked = "\n" in text or "####" in text or "boxed" in text or "answer" in text.lower()
    return extract_answer(text) if worked else (text or None)


def is_correct(answer: str | None, reference: str | None, strict: bool = False) -> bool | None:
    r"""The one grading rule: whether the answer's final value is equivalent to the reference's. With `strict`
    the answer must state its final answer (\boxed{x}, '#### x', 'The answer is x', 'Final answer: x', a final
    'A: x' line), else its last number counts. None without a reference; an empty answer is never correct."""
    if reference is None:
        return None
    return answers_equivalent(extract_answer(answer, strict=strict), reference_answer(reference))


SERVER_SYMBOLIC_CLASSES = 16
"""What the routing engine (`morkit serve`, the TRL reward) passes to `core.budget.work_bounded`: the classes a
new answer is compared with symbolically (math_verify, 10-50 ms a comparison), the first ones met that can be;
past them an answer joins a class only by its normalised text or its exact value. Elsewhere every class is
compared."""
SERVER_SYMBOLIC_PAIR_S = 1.0
"""The routing engine's time for one symbolic comparison (in a process it can end: `runtime.symbolic`); a pair
not decided in it counts as different, and both answers are grouped by text and exact value from then on."""
SERVER_SYMBOLIC_QUERY_S = 2.0
"""The routing engine's time for the symbolic comparisons of one request: this much for each query it holds, and
at most half the time the request has left when the engine starts it; once spent, the request's answers are
grouped by text and exact value."""


def equivalence_classes(answers: Sequence[str | None]) -> list[int | None]:
    """Group final answers by value: each answer's class index (0, 1, ... in order of first appearance), None for
    a missing one. The classes of comparing with each class's representative in turn (within `work_bounded`'s
    bounds; once its SymbolicBudget is spent, by normalised text and exact value alone), found by normalised text,
    a sorted index of exact values, and symbolic comparison only where it could join."""
    try:
        return _classes(answers, budget.current().symbolic_classes)
    except budget.SymbolicSpent:
        return _classes(answers, 0)


def _classes(answers: Sequence[str | None], cap: int | None) -> list[int | None]:
    """`equivalence_classes` comparing symbolically with at most `cap` classes (0: none, None: all)."""
    by_norm: dict[str, int] = {}
    numbers = _NumberIndex()
    symbolic: list[tuple[int, str]] = []  # (class, normalised representative) math_verify may compare
    symbolic_non_numbers: list[tuple[int, str]] = []  # the same, less exact numbers (two numbers never go there)
    classes: list[int | None] = []
    count = 0
    for answer in answers:
        if answer is None:
            classes.append(None)
            continue
        norm = normalize_answer(answer)
        index = by_norm.get(norm)
        if index is None:
            value = as_number(norm) if norm else None
            index = _first_equivalent(norm, value, numbers, symbolic_non_numbers if value is not None else symbolic)
            if index is None:
                index, count = count, count + 1
                if value is not None:
                    numbers.add(value, index)
                if norm and _symbolic_candidate(norm):
                    for found in (symbolic,) if value is not None else (symbolic, symbolic_non_numbers):
                        if cap is None or len(found) < cap:
                            found.append((index, norm))
            by_norm[norm] = index
        classes.append(index)
    return classes


def _symbolic_candidate(norm: str) -> bool:
    """Whether `_symbolic_equal` could ever find `norm` equal to another answer (it refuses these at once)."""
    return len(norm) <= _MAX_SYMBOLIC_CHARS and not _COSTLY.search(norm)


def _first_equivalent(norm: str, value: Fraction | None, numbers: _NumberIndex,
                      symbolic: list[tuple[int, str]]) -> int | None:
    """The first class (lowest index) whose representative is equivalent to a new normalised answer, or None.

    An empty answer is equivalent to none; two exact numbers are equivalent only within _REL_TOL (no
    symbolic comparison); any other pair only by math_verify, tried in class order below the numeric match."""
    if not norm:
        return None
    best = numbers.first_close(value) if value is not None else None
    if _symbolic_candidate(norm):
        for index, rep in symbolic:
            if best is not None and index >= best:
                break
            if _symbolic_equal(rep, norm):
                return index
    return best


class _NumberIndex:
    """Exact values of the numeric class representatives, sorted, to find the classes within _REL_TOL of a
    value in logarithmic time (all of them lie within 2 * _REL_TOL * max(1, |value|) of it)."""

    def __init__(self) -> None:
        self._values: list[Fraction] = []
        self._classes: list[int] = []

    def add(self, value: Fraction, index: int) -> None:
        at = bisect.bisect_right(self._values, value)
        self._values.insert(at, value)
        self._classes.insert(at, index)

    def first_close(self, value: Fraction) -> int | None:
        """The lowest class whose value is equivalent to `value` (as `answers_equivalent` compares numbers)."""
        reach = 2 * _REL_TOL * max(1, abs(value))
        low = bisect.bisect_left(self._values, value - reach)
        high = bisect.bisect_right(self._values, value + reach)
        close = [self._classes[i] for i in range(low, high)
                 if abs(self._values[i] - value) <= _REL_TOL * max(1, abs(self._values[i]), abs(value))]
        return min(close) if close else None


def key_groups(keys: Sequence[Hashable | None]) -> list[list[int]]:
    """Indices of equal keys, one list per key, largest group first and, among equals, the one whose first member
    comes first; a None key abstains. groups[0][0] is the majority's first member, so callers choose the tie
    rule by the order they pass keys in."""
    found: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        if key is not None:
            found.setdefault(key, []).append(i)
    return sorted(found.values(), key=lambda members: (-len(members), members[0]))


def majority_groups(answers: Sequence[str | None]) -> list[list[int]]:
    """`key_groups` of final answers compared by equivalence; a missing (None or empty) answer abstains."""
    return key_groups(equivalence_classes([a or None for a in answers]))


def answers_equivalent(a: str | None, b: str | None) -> bool:
    """Whether two final answers denote the same value (symmetric; None is never equivalent)."""
    if a is None or b is None:
        return False
    na, nb = normalize_answer(a), normalize_answer(b)
    if not na or not nb:
        return False
    if na == nb:
        return True
    xa, xb = as_number(na), as_number(nb)
    if xa is not None and xb is not None:
        return abs(xa - xb) <= _REL_TOL * max(1, abs(xa), abs(xb))
    try:
        return _symbolic_equal(na, nb)
    except budget.SymbolicSpent:  # out of symbolic time: compared by normalised text, which differs
        return False


def _symbolic_equal(a: str, b: str) -> bool:
    """math_verify comparison both ways; too-costly inputs (huge powers/factorials) are refused. Within
    `core.budget.work_bounded` with a SymbolicBudget, compared by it (in a process that can be ended, within its
    times; SymbolicSpent once they are spent). Past the deadline, DeadlinePassed (never a False that would change
    a score)."""
    bound = budget.current()
    bound.check()
    if any(len(s) > _MAX_SYMBOLIC_CHARS or _COSTLY.search(s) for s in (a, b)):
        return False
    if bound.symbolic is not None:
        verdict = bound.symbolic.equal(a, b, bound.deadline)
        bound.check()  # a comparison cut by the deadline is no verdict
        return verdict
    return verify_pair(a, b)


def verify_pair(a: str, b: str) -> bool:
    """math_verify's verdict on two normalised answers, both ways, in this thread under the time guard (the body
    of `_symbolic_equal`; the server's comparison process runs it too)."""
    try:
        from math_verify import verify
    except ImportError:
        return False
    pa, pb = _parse(a), _parse(b)
    if not pa or not pb:
        return False
    pa, pb = list(pa), list(pb)  # verify wants a list (a tuple would be one object)
    return bool(_guarded(lambda t: verify(pa, pb, timeout_seconds=t) or verify(pb, pa, timeout_seconds=t)))


@lru_cache(maxsize=4096)
def _parse(s: str) -> tuple:
    try:
        from math_verify import parse
    except ImportError:
        return ()
    return tuple(_guarded(lambda t: parse(f"${s}$", parsing_timeout=t)) or ())


class _Deadline(BaseException):
    """Raised asynchronously in a worker thread whose math_verify call ran past the guard."""


def _guarded(call):
    """Run `call(timeout)`: on the main thread math_verify's own signal alarm does the guarding;
    elsewhere signals are unavailable, so a timer raises _Deadline in this thread (any exception
    or timeout -> None). A hang inside one C call (no bytecode boundary) is not interruptible."""
    if threading.current_thread() is threading.main_thread():
        try:
            return call(VERIFY_SECONDS)
        except Exception:
            return None
    import ctypes

    tid, lock, state = threading.get_ident(), threading.Lock(), {"done": False}

    def fire() -> None:
        with lock:
            if not state["done"]:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(_Deadline))

    timer = threading.Timer(VERIFY_SECONDS, fire)
    timer.daemon = True
    try:
        timer.start()
        try:
            return call(None)
        finally:
            with lock:
                state["done"] = True
            timer.cancel()
    except (_Deadline, Exception):
        return None


_FENCE = re.compile(r"```[ \t]*(python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_DEFINES = re.compile(r"^(?:async[ \t]+)?(?:def|class)[ \t]+\w", re.MULTILINE)


def program_text(text: str | None, defines: str | None = None) -> str | None:
    """The program in an answer. Of its fenced code blocks (tagged python or untagged): the last that defines the
    function `defines` (the one under test, where known), else the last that defines a function or class at its top
    level (a block showing its use may follow), else the last tagged python (sample input or output may follow a
    stdin/stdout program), else the last; with none, the whole text."""
    if not text:
        return text
    blocks = _FENCE.findall(text)
    wanted = re.compile(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(defines)}\b", re.MULTILINE) if defines else None
    for picked in ([code for _, code in blocks if wanted is not None and wanted.search(code)],
                   [code for _, code in blocks if _DEFINES.search(code)], [code for tag, code in blocks if tag],
                   [code for _, code in blocks]):
        if picked:
            return picked[-1]
    return text
