"""How failures that come back from Ray reach the user: a morkit error raised in an actor or task as itself,
anything else as one ScoreError line naming the RM (no Ray needed: the helpers read the exception chain)."""

from __future__ import annotations

import pytest

from morkit.core.errors import InputError, ScoreError
from morkit.reward_models.backends.ray import _as_error, _unwrapped


def _failing(err: BaseException):
    yield {"i": [0]}
    raise err


def test_a_foreign_failure_of_a_batch_is_one_score_error_line_naming_the_rm():
    stream = _unwrapped("smollm2-orm", _failing(RuntimeError("actor died\nTraceback (most recent call last): ...")))
    assert next(stream) == {"i": [0]}
    with pytest.raises(ScoreError, match=r"^reward model 'smollm2-orm' failed on Ray: actor died$"):
        next(stream)


def test_a_morkit_error_an_actor_raised_comes_back_as_itself():
    wrapped = RuntimeError("RayTaskError(InputError): ...")
    wrapped.__cause__ = InputError("query 'q1': no tests")
    with pytest.raises(InputError, match="no tests"):
        list(_unwrapped("code-tests", _failing(wrapped)))
    assert isinstance(_as_error(wrapped, "x"), InputError)
    assert str(_as_error(ValueError(""), "reward model 'r': Ray could not work out its cache key")) == (
        "reward model 'r': Ray could not work out its cache key: ValueError")
