r"""Linear-time scanners behind answer extraction (`core.grading`): the last balanced \boxed{}, 'A: x' lines, 'the
answer is x', calculator annotations `<<...>>`. Each gives exactly what the regex it replaces gave, without that
regex's quadratic (or exponential) time on long runs.
"""

from __future__ import annotations

import re

# `(?im)^\s*A\s*:\s*(.+?)\s*$`, rewritten to match the same: the whitespace before 'A' may not cross a line
# (a match from an earlier line start finds the same 'A'), and the answer is the rest of its line up to its last
# non-space (or, with only whitespace to the end of the text, its last non-newline character, as the lazy
# form found): linear, where the original retried every line start of a blank run and every split of a space run
A_LINE = re.compile(r"(?im)^[^\S\n]*A\s*:\s*(\S(?:.*\S)?|[^\S\n](?=\s*\Z))\s*$")
_ANSWER_HEAD = re.compile(r"(?i)(?:final answer|the answer)\s*+(?:is|:|=)")
_SPACE = re.compile(r"\s*")


class _AnswerIs:
    """`re.compile(r"(?i)(?:final answer|the answer)\\s*(?:is|:|=)\\s*:?\\s*([^\\n]+)").findall`, computed in linear
    time: the regex splits a whitespace run to the end of the text between its two `\\s*` in every way before
    it gives up (quadratic); here each case is settled by one look at the run."""

    @staticmethod
    def findall(text: str) -> list[str]:
        found, pos, n = [], 0, len(text)
        while (head := _ANSWER_HEAD.search(text, pos)) is not None:
            start = _AnswerIs._group_start(text, head.end(), n)
            if start is None:  # only newlines to the end: no match at this keyword
                pos = head.start() + 1
                continue
            end = text.find("\n", start)
            end = n if end < 0 else end
            found.append(text[start:end])
            pos = end
        return found

    @staticmethod
    def _group_start(text: str, q: int, n: int) -> int | None:
        w = _SPACE.match(text, q).end()  # type: ignore[union-attr]
        if w < n and text[w] != ":":
            return w
        if w < n:  # the optional colon: the answer starts after it and its whitespace
            after = _SPACE.match(text, w + 1).end()  # type: ignore[union-attr]
            if after < n:
                return after
            last = len(text.rstrip("\n")) - 1  # whitespace to the end: its last non-newline character
            return last if last > w else w  # else the colon itself
        last = len(text.rstrip("\n")) - 1
        return last if last >= q else None


ANSWER_IS = _AnswerIs()


def strip_calc(text: str) -> str:
    """`re.sub(r"<<[^>]*>>", " ", text)` in linear time: when '<<' at s finds no '>>' at the first '>' after it,
    no start before that '>' can (the regex retried each, scanning to the same '>')."""
    out, pos, i = [], 0, 0
    while (start := text.find("<<", i)) >= 0:
        close = text.find(">", start + 2)
        if close < 0:
            break
        if text.startswith(">>", close):
            out.append(text[pos:start])
            out.append(" ")
            pos = i = close + 2
        else:
            i = close + 1
    out.append(text[pos:])
    return "".join(out)


_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")
_BOXED_TOKEN = re.compile(r"[^\s$]+")
_BRACE = re.compile(r"[{}]")


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} / \\fbox{...} with balanced (nested) braces.

    Each '{' is paired with its '}' in one pass first, so many unclosed boxes cost linear time, not a scan
    to the end of the text per box."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    closing: dict[int, int] = {}
    opened: list[int] = []
    for brace in _BRACE.finditer(text):
        if brace.group() == "{":
            opened.append(brace.start())
        elif opened:
            closing[opened.pop()] = brace.start()
    for i in reversed(starts):
        if i < len(text) and text[i] != "{":
            token = _BOXED_TOKEN.match(text, i)  # \\boxed 5
            if token:
                return token.group(0)
            continue
        j = closing.get(i)
        if j is not None:
            return text[i + 1 : j]
    return None
