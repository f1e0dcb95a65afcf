"""Grading math answers: final-answer extraction, equivalence, and the one `is_correct`.

`extract_answer` pulls the final answer out of a worked solution; `answers_equivalent` decides
whether two answers mean the same value: cheap normalisation and exact rational comparison
first, then `math_verify` (sympy) for symbolic forms, under a time guard that also works off
the main thread. Nothing is ever `eval`ed.
"""

from __future__ import annotations

import re
import threading
from fractions import Fraction
from functools import lru_cache
from typing import Hashable, Sequence

VERIFY_SECONDS = 5
"""Time guard for one math_verify parse or comparison; past it the answers count as different."""
_MAX_SYMBOLIC_CHARS = 300
_REL_TOL = Fraction(1, 10**6)

_HASHES = re.compile(r"####\s*([^\n]+)")
_A_LINE = re.compile(r"(?im)^\s*A\s*:\s*(.+?)\s*$")
_ANSWER_IS = re.compile(r"(?i)(?:final answer|the answer)\s*(?:is|:|=)\s*:?\s*([^\n]+)")
_CALC = re.compile(r"<<[^>]*>>")
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_UNWRAP = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_UNITS = re.compile(r"^([-+]?[\d.,/]+)\s*(?:[a-zA-Z]{2,}\.?\s*)+$")
_THOUSANDS = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_DECIMAL = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")
_SLASH = re.compile(r"^([-+]?\d+)/(\d+)$")
_FRAC = re.compile(r"^([-+]?)(\d+)?\\frac\{([-+]?\d+(?:\.\d+)?)\}\{([-+]?\d+(?:\.\d+)?)\}$")
_FRAC_SHORT = re.compile(r"^([-+]?)\\frac(\d)(\d)$")
_COSTLY = re.compile(r"\^\s*\{[^{}]*\^|(?:\^|\*\*)\s*\{?\s*\(?\s*\d{4,}|\d{4,}\s*!")


def extract_answer(text: str | None, strict: bool = False) -> str | None:
    """The final answer in a solution: last \\boxed{}, GSM8K '#### x', a final 'A: x' line,
    'The answer is x', else (unless `strict`: only a stated answer counts) the last number in the
    text; None when there is none."""
    if text is None or not text.strip():
        return None
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip() or None
    for pattern in (_HASHES, _A_LINE, _ANSWER_IS):
        matches = pattern.findall(text)
        if matches:
            answer = re.split(r"\.\s", matches[-1].strip(), maxsplit=1)[0].strip().rstrip(".").strip()
            if answer:
                return answer
    if strict:
        return None
    numbers = _NUMBER.findall(_CALC.sub(" ", text))
    return numbers[-1] if numbers else None


def _last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} / \\fbox{...} with balanced (nested) braces."""
    for match in reversed(list(re.finditer(r"\\(?:boxed|fbox)\s*", text))):
        i = match.end()
        if i < len(text) and text[i] != "{":
            token = re.match(r"[^\s$]+", text[i:])  # \boxed 5
            if token:
                return token.group(0)
            continue
        depth = 0
        for j in range(i, len(text)):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    return text[i + 1 : j]
    return None


def normalize_answer(answer: str) -> str:
    """Strip formatting that never changes the value: $, \\text{}, \\left/\\right, thousands
    commas, spaces, a trailing period, degree/percent signs, units after a number, 'x ='."""
    s = answer.strip()
    boxed = _last_boxed(s)
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
    """The one grading rule: whether the answer's final value is equivalent to the reference's.

    With `strict` the answer must state its final answer (\\boxed{x}, '#### x', 'The answer is x',
    'Final answer: x', a final 'A: x' line); otherwise its last number counts as the answer. None when
    there is no reference to grade against; an empty answer is never correct."""
    if reference is None:
        return None
    return answers_equivalent(extract_answer(answer, strict=strict), reference_answer(reference))


def equivalence_classes(answers: Sequence[str | None]) -> list[int | None]:
    """Group final answers by value: each answer's class index (0, 1, ... in order of first appearance),
    None for a missing answer. Each answer is compared with one representative per class; identical
    normalised answers skip the comparison."""
    reps: list[str] = []
    by_norm: dict[str, int] = {}
    classes: list[int | None] = []
    for answer in answers:
        if answer is None:
            classes.append(None)
            continue
        norm = normalize_answer(answer)
        index = by_norm.get(norm)
        if index is None:
            index = next((i for i, rep in enumerate(reps) if answers_equivalent(rep, answer)), None)
            if index is None:
                index = len(reps)
                reps.append(answer)
            by_norm[norm] = index
        classes.append(index)
    return classes


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
    return _symbolic_equal(na, nb)


def _symbolic_equal(a: str, b: str) -> bool:
    """math_verify comparison both ways; too-costly inputs (huge powers/factorials) are refused."""
    if any(len(s) > _MAX_SYMBOLIC_CHARS or _COSTLY.search(s) for s in (a, b)):
        return False
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


_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def program_text(text: str | None) -> str | None:
    """The program in an answer: its last fenced code block when it has one, else the whole text."""
    if not text:
        return text
    blocks = _FENCE.findall(text)
    return blocks[-1] if blocks else text
