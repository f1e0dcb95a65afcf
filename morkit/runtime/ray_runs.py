"""A Ray Data map over named actors, its blocks streamed back as they finish (Ray embedding and scoring): a failure
in one line, a failed or abandoned run's actors killed at once (Ray Data frees them only at garbage collection, so a
retry waited forever). `ray` is imported only when a run uses it.
"""

from __future__ import annotations

import inspect
import time
import uuid
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from morkit.core.errors import MorkitError

RESTARTS = 3
"""How often an actor is restarted and its batch retried (Ray Data's own default is forever, so a batch that
kills its worker every time, e.g. out of memory, would never end the run)."""
DEAD = "The actor is dead because"
"""How Ray's message on a dead actor starts the line that says why it died."""


def first_line(err: BaseException) -> str:
    """What was raised, in one line (Ray's messages run to many, with tracebacks inside)."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def _morkit_cause(err: BaseException) -> MorkitError | None:
    """The morkit error an actor or task raised, found in the chain Ray wraps it in: a wrapper's `cause` (the
    original, where Ray's wrapper class is itself a subclass of the error's class) before the wrapper."""
    seen: set[int] = set()
    node: BaseException | None = err
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        cause = getattr(node, "cause", None)
        if isinstance(cause, MorkitError):
            return cause
        if isinstance(node, MorkitError) and not isinstance(cause, BaseException):
            return node
        node = node.__cause__ or (cause if isinstance(cause, BaseException) else None) or node.__context__
    return None


def _reason(err: BaseException) -> str:
    """A foreign failure in one line: the error an actor raised (its class and first line), or Ray's first line
    with, for a dead actor, why it died."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {first_line(cause)}"
    lines = str(err).strip().splitlines()
    why = next((line.strip() for line in lines[1:] if line.strip().startswith(DEAD)), "")
    if why:
        return f"{first_line(err).rstrip('.')}: {why.split('. ')[0].rstrip('.').lower()}"
    return first_line(err)


def actor_error(err: BaseException, what: str, kind: type[MorkitError] = MorkitError) -> MorkitError:
    """`err`, as a Ray run raised it, as the one-line error the driver raises: a morkit error an actor raised as
    itself (Ray's retry note on its second line dropped), anything else as `kind(f"{what}: {reason}")`. It carries
    no traceback, cause or context, so nothing it holds keeps the run's objects alive.

    Args:
        err: What Ray raised (a RayTaskError wrapping the actor's error, an ActorDiedError, ...).
        what: The start of the line for a foreign failure, naming what failed (the RM, the embedder).
        kind: The class of that line's error.

    Returns:
        The error to raise.
    """
    found = _morkit_cause(err)
    if found is None:
        found = kind(f"{what}: {_reason(err)}")
    elif found.args and isinstance(found.args[0], str) and "\n" in found.args[0]:
        found.args = (first_line(found), *found.args[1:])
    found.__cause__ = found.__context__ = None
    found.__suppress_context__ = True
    return found.with_traceback(None)


class ActorRun:
    """One map over an actor pool (`map`), each actor named as Ray Data starts it, and its blocks (`blocks`).

    Args:
        label: In every actor's name (morkit-LABEL-RUN-N), e.g. "embed", "score".
    """

    def __init__(self, label: str):
        self.prefix = f"morkit-{label}-{uuid.uuid4().hex[:12]}"
        self.names: list[str] = []  # the run's actors, in the order Ray Data started them
        self.release_s: float | None = None  # how long killing them took, once a failure released them

    def _named(self) -> dict[str, Any]:
        """Ray Data calls it as it starts each actor."""
        self.names.append(f"{self.prefix}-{len(self.names)}")
        return {"name": self.names[-1]}

    def map(self, ray: Any, data: Any, actor: type, args: Sequence[Any], *, batch_size: int, size: int,
            resources: dict[str, float]) -> Any:
        """`data` mapped by batches of `batch_size` rows over `size` actors of class `actor`, each built from
        `args` once, with `resources` each (num_gpus, num_cpus); restarts bounded by RESTARTS.

        Returns:
            The mapped dataset (lazy: nothing runs before `blocks`).
        """
        data.context.raise_original_map_exception = True  # an actor's error is the wrapper's `cause` as itself
        named = {"ray_remote_args_fn": self._named}  # deprecated in Ray 2.60, gone in 2.64: actors then go unnamed
        if "ray_remote_args_fn" not in inspect.signature(data.map_batches).parameters:
            named = {}
        with warnings.catch_warnings():  # Ray 2.60 has no named parameter for restarts yet (2.64 drops this form)
            warnings.simplefilter("ignore", DeprecationWarning)
            return data.map_batches(actor, fn_constructor_args=tuple(args), batch_size=batch_size,
                                    batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=size),
                                    max_restarts=RESTARTS, max_task_retries=RESTARTS, **named, **resources)

    def blocks(self, mapped: Any, what: str, kind: type[MorkitError] = MorkitError) -> Iterator[dict[str, Any]]:
        """`mapped`'s output blocks (dicts of numpy columns) as they finish, in any order. A failure is raised as
        `actor_error(err, what, kind)`; on a failure, or when the caller stops early (closes this generator, as
        its own error or a killed driver does), the run's actors are killed before anything else happens.
        A caller that may stop early closes it in a `finally`, so its error never holds the run alive."""
        batches = mapped.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=0)
        iterator = iter(batches)
        failure: BaseException | None = None
        finished = False
        try:
            while True:
                block, failure = _next(iterator, what, kind)
                if block is None:
                    break
                yield block
            finished = failure is None
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
            iterator = batches = block = None
            if not finished:
                self.release()
        if failure is not None:
            raise failure

    def release(self) -> None:
        """Kill the run's actors still alive, so their resources are free at once (`release_s`: how long)."""
        if not self.names:
            return
        import ray

        started = time.perf_counter()
        for name in self.names:
            try:
                ray.kill(ray.get_actor(name), no_restart=True)
            except ValueError:  # never started, or gone already
                continue
        self.release_s = time.perf_counter() - started


def _next(iterator: Iterator[Any], what: str, kind: type[MorkitError]) -> tuple[Any, BaseException | None]:
    """(next block, None), (None, None) at the end, or (None, the error in one line); returned, not raised, so
    no traceback keeps the run alive."""
    try:
        return next(iterator), None
    except StopIteration:
        return None, None
    except Exception as err:  # noqa: BLE001 - Ray wraps the actor's error
        return None, actor_error(err, what, kind)


def cluster(ray: Any) -> dict[str, float]:
    """The cluster's resources, and "nodes": how many of its nodes are alive."""
    resources = dict(ray.cluster_resources())
    resources["nodes"] = float(sum(1 for n in ray.nodes() if n.get("Alive")))
    return resources

