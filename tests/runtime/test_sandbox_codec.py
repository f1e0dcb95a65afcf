"""The codec between the sandbox harness's two processes: values round-trip, and the tests' side rebuilds
only built-in values from whatever the candidate's side sends."""

from __future__ import annotations

import collections
import datetime
import decimal
import fractions
import math
import re

import pytest

from morkit.runtime.sandbox_codec import AnswerRefused, decode, encode

VALUES = [None, True, False, 0, -5, 10 ** 5000, 1.5, float("-inf"), 1 + 2j, "h\u00e9llo\udc80", b"\x00\xff",
          bytearray(b"ab"), [1, [2, (3,)]], (1,), [1.5, 2.5], ["a", "b"], {1, 2}, frozenset({3}), {"a": 1, (1, 2): [3]},
          collections.Counter("abca"), collections.OrderedDict(a=1), collections.defaultdict(list, {1: [2]}),
          collections.deque([1, 2], maxlen=3), decimal.Decimal("1.10"), fractions.Fraction(3, 4), range(1, 10, 2),
          datetime.date(2024, 2, 29), datetime.timedelta(days=1, seconds=3)]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_values_round_trip_with_their_type(value):
    back = decode(encode(value))
    assert back == value and type(back) is type(value)


def test_subclasses_cross_as_plain_values_and_nan_stays_nan():
    class Agreeable(int):
        def __eq__(self, other):
            return True

    assert type(decode(encode(Agreeable(3)))) is int and decode(encode(Agreeable(3))) != 4
    assert math.isnan(decode(encode(float("nan"))))
    match = decode(encode(re.search("b+", "abbc")))
    assert match and match.group() == "bb" and match.span() == (1, 3)


@pytest.mark.parametrize("tree", [
    "x", 5, [], ["?"], ["i", 5], ["i", "0x1", "0x2"], ["li", [1, True]], ["lf", [1]], ["ls", [1]],
    ["dd", "eval", []], ["dd", "__import__", []], ["dd", "breakpoint", []], ["d", [[["N"]]]], ["it", 0],
    ["S", [["l", []]]], ["r", "0x1"], ["m", ["s", "a"], "0", 1], ["D", 3], ["l", "notalist"],
])
def test_malformed_trees_are_refused(tree):
    with pytest.raises(AnswerRefused):
        decode(tree)


def test_functions_objects_and_unasked_iterators_are_refused():
    for value in (len, object(), iter([1]), lambda: 0):
        with pytest.raises(AnswerRefused):
            encode(value)
    handles = []
    assert encode(iter([1]), handles) == ["it", 0] and len(handles) == 1
