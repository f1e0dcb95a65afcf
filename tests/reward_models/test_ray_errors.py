"""How failures that come back from Ray reach the user (morkit.runtime.ray_runs, shared by scoring and embedding):
a morkit error raised in an actor or task as itself, in one line; anything else as one line naming the RM and the
error. No Ray needed: the helpers read the exception chain."""

from __future__ import annotations

import pytest

from morkit.core.errors import InputError, ScoreError
from morkit.runtime.ray_runs import ActorRun, actor_error

WHAT = "reward model 'smollm2-orm' failed on Ray"


class _Mapped:
    """Stands for a mapped Ray dataset: its batches are the given generator's."""

    def __init__(self, batches):
        self.batches = batches

    def iter_batches(self, **kwargs):
        return self.batches


def _failing(err: BaseException):
    yield {"i": [0]}
    raise err


def _stream(err: BaseException, what: str = WHAT):
    return ActorRun("score").blocks(_Mapped(_failing(err)), what, ScoreError)


class RayTaskError(InputError):
    """Shaped as Ray's wrapper of an actor's InputError: a subclass of its class, the original as `cause`, and a
    message of many lines (Ray's own traceback)."""

    def __init__(self, cause):
        super().__init__("ray::MapWorker(MapBatches(_Replica)).submit() (pid=1, ip=127.0.0.1)\n  File ...")
        self.cause = cause


def test_a_foreign_failure_of_a_batch_is_one_score_error_line_naming_the_rm():
    stream = _stream(RuntimeError("actor died\nTraceback (most recent call last): ..."))
    assert next(stream) == {"i": [0]}
    with pytest.raises(ScoreError, match=r"^reward model 'smollm2-orm' failed on Ray: actor died$"):
        next(stream)


def test_a_morkit_error_an_actor_raised_comes_back_as_itself():
    wrapped = RuntimeError("RayTaskError(InputError): ...")
    wrapped.__cause__ = InputError("query 'q1': no tests")
    with pytest.raises(InputError, match="no tests"):
        list(_stream(wrapped, "reward model 'code-tests' failed on Ray"))
    assert isinstance(actor_error(wrapped, "x"), InputError)
    assert str(actor_error(ValueError(""), "reward model 'r': Ray could not work out its cache key", ScoreError)) == (
        "reward model 'r': Ray could not work out its cache key: ValueError")


def test_ray_s_wrapper_gives_the_original_class_and_first_line_without_a_traceback():
    original = InputError("query 'q1': no tests\nRetrying the task (attempt 2 of 4)")
    found = actor_error(RayTaskError(original), WHAT, ScoreError)
    assert type(found) is InputError and str(found) == "query 'q1': no tests"
    assert found.__traceback__ is None and found.__context__ is None and found.__cause__ is None


def test_a_foreign_error_in_an_actor_and_a_dead_actor_are_one_line_saying_what():
    wrapped = RuntimeError("ray::MapWorker(MapBatches(_Replica)).submit() (pid=1)\n  File ...\nValueError: bad")
    wrapped.cause = ValueError("bad batch\nsecond line")
    assert str(actor_error(wrapped, WHAT, ScoreError)) == f"{WHAT}: ValueError: bad batch"
    died = RuntimeError("The actor died unexpectedly before finishing this task.\n\tclass_name: MapWorker\n\tpid: 7\n"
                        "The actor is dead because it was killed by `ray.kill`.")
    assert str(actor_error(died, WHAT, ScoreError)) == (
        f"{WHAT}: The actor died unexpectedly before finishing this task: "
        "the actor is dead because it was killed by `ray.kill`")
    assert isinstance(actor_error(died, WHAT, ScoreError), ScoreError)
