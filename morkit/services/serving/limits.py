"""What one `morkit serve` may take: `ServeLimits` (batching, sizes, deadlines) and `ByteBudget`, the request
bodies it holds at once (memory is bounded by bytes, not requests: a body over the budget is a 503, never queued).
"""

from __future__ import annotations

from dataclasses import dataclass

from morkit.core import checks
from morkit.core.errors import InputError, MorkitError

MIB = 2**20


class Overloaded(MorkitError):
    """The server cannot take this request now (queue or byte budget full, or shutting down): come back later."""


@dataclass(frozen=True)
class ServeLimits:
    """Micro-batching, the request limits and the shutdown grace of one server.

    Args:
        max_batch: Requests per engine call (1 turns micro-batching off).
        max_wait_ms: Milliseconds the first request of a batch waits for company.
        queue_size: Requests waiting at most; more are answered 503.
        timeout_s: Seconds per request, queueing included; then 504.
        max_body_bytes: Bytes of one request body at most (413).
        max_items: Queries of a /v1/rank body, items of a /get_reward body, at most.
        max_candidates: Candidates of one request, all its queries together (413).
        max_text_chars: Characters of text in one request: questions, candidates, references (413).
        max_json_values: JSON values (objects, lists, strings, numbers) in one request body (413).
        max_inflight_bytes: Bytes of request bodies held at once, read, queued or running (503); at least
            `max_body_bytes`.
        body_timeout_s: Seconds a body may take to arrive; then 408.
        max_connections: Open connections and requests at once; more are answered 503.
        grace_s: Seconds to finish the work in flight after SIGTERM before exiting anyway.

    Raises:
        InputError: A limit is not positive, or `max_inflight_bytes` is below `max_body_bytes`.
    """

    max_batch: int = 32  # requests per engine call (1 turns micro-batching off)
    max_wait_ms: float = 5.0  # how long the first request of a batch waits for company
    queue_size: int = 256  # requests waiting at most; more get 503
    timeout_s: float = 120.0  # per request, queueing included; then 504
    max_body_bytes: int = 16 * MIB
    max_items: int = 4096  # queries of a /v1/rank body, items of a /get_reward body
    max_candidates: int = 4096  # candidates of one request, all its queries together (413)
    max_text_chars: int = 8 * MIB  # characters of text in one request: questions, candidates, references (413)
    max_json_values: int = 256 * 1024  # JSON values (objects, lists, strings, numbers) in one request body (413)
    max_inflight_bytes: int = 256 * MIB  # request bodies held at once, read, queued or running (503)
    body_timeout_s: float = 30.0  # a body still arriving after this long is a 408 (slow senders hold no budget)
    max_connections: int = 1024  # open connections and requests at once; more are answered 503 by uvicorn
    grace_s: float = 30.0  # after SIGTERM: finish what is in flight for this long, then exit anyway

    def __post_init__(self) -> None:
        checks.non_negative(self.max_wait_ms, "max_wait_ms")
        for name in ("timeout_s", "body_timeout_s", "grace_s"):
            checks.positive(getattr(self, name), name)
        for name in ("max_batch", "queue_size", "max_body_bytes", "max_items", "max_candidates", "max_text_chars",
                     "max_json_values", "max_inflight_bytes", "max_connections"):
            checks.positive_int(getattr(self, name), name)
        if self.max_inflight_bytes < self.max_body_bytes:
            raise InputError(f"max_inflight_bytes (--max-inflight-bytes {self.max_inflight_bytes}) must be at least "
                             f"max_body_bytes (--max-body-bytes {self.max_body_bytes}), or the largest body could "
                             "never be taken")


def port_number(value: object, what: str = "--port", *, any_free: bool = False) -> int:
    """A TCP port, 1-65535 (0 too, with `any_free`: the system picks one); InputError naming `what`."""
    low = 0 if any_free else 1
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 65535:
        raise InputError(f"{what} must be a port number from {low} to 65535, got {value!r}")
    return value


def size_text(n: int) -> str:
    """A byte count for messages: '16.0 MiB', '1.5 MiB', '900 bytes'."""
    return f"{n / MIB:.1f} MiB" if n >= MIB else f"{n} bytes"


class ByteBudget:
    """Bytes that request bodies may hold at once; `reserve` hands out a `Reservation` or raises Overloaded.

    Used from the event loop's thread only (the engine thread never touches it), so it needs no lock."""

    def __init__(self, capacity: int):
        self.capacity = checks.positive_int(capacity, "capacity")
        self.used = 0

    def check_room(self, n: int) -> None:
        """Overloaded unless `n` more bytes fit now; nothing is taken (the bytes are, as they arrive)."""
        if self.used + n > self.capacity:
            raise Overloaded(self._full(n))

    def reserve(self, n: int) -> Reservation:
        reservation = Reservation(self)
        reservation.grow(n)
        return reservation

    def _take(self, n: int) -> None:
        if self.used + n > self.capacity:
            raise Overloaded(self._full(n))
        self.used += n

    def _full(self, n: int) -> str:
        return (f"the server holds {size_text(self.used)} of request bodies and this one needs {size_text(n)} "
                f"more, over its budget of {size_text(self.capacity)} (--max-inflight-bytes); retry later")


class Reservation:
    """Bytes held for one request. Whoever keeps the body alive `hold()`s it (the handler from the start, the
    batcher while the job waits or runs) and `release()`s it when done; the bytes return at the last release."""

    def __init__(self, budget: ByteBudget):
        self._budget = budget
        self.bytes = 0
        self._holders = 1

    def grow(self, n: int) -> None:
        """Take `n` more bytes (a body read in chunks); Overloaded when the budget cannot give them."""
        if self._holders <= 0:
            raise RuntimeError("grow() after the last release()")
        self._budget._take(n)
        self.bytes += n

    def hold(self) -> None:
        self._holders += 1

    def release(self) -> None:
        self._holders -= 1
        if self._holders == 0:
            self._budget.used -= self.bytes
            self.bytes = 0
