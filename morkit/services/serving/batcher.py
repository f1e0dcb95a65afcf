"""A micro-batcher: concurrent requests wait in a bounded queue, and one daemon thread runs them on the engine
in batches. A cancelled item leaves the queue at once; the engine is told each item's deadline (`core.budget`
parts), drops an item at its own, and stops at the batch's latest.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from morkit.core import checks
from morkit.core.budget import latest, work_bounded
from morkit.services.serving.limits import Overloaded, Reservation

log = logging.getLogger(__name__)

__all__ = ["BatchStats", "Batcher", "Overloaded"]


@dataclass(frozen=True)
class BatchStats:
    """What one engine call took: items run, items skipped as cancelled, and seconds (an item dropped from the
    queue is reported alone, as size 0 with one skipped)."""

    size: int
    skipped: int
    seconds: float


@dataclass(eq=False)
class _Item:
    payload: Any
    future: asyncio.Future
    reservation: Reservation | None
    deadline: float | None  # time.monotonic() after which nobody waits for the result
    state: str = "queued"  # queued -> taken (in a batch) -> done


class _EngineThread:
    """One daemon thread running engine calls in order (models are used by one thread only)."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="morkit-engine", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[Any], Any], arg: Any,
               deadlines: tuple[float | None, ...]) -> concurrent.futures.Future:
        """Run `fn(arg)` under the latest of `deadlines`, each payload's own given as the bound's `parts`."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((future, fn, arg, deadlines))
        return future

    def _loop(self) -> None:
        while (call := self._calls.get()) is not None:
            future, fn, arg, deadlines = call
            if future.set_running_or_notify_cancel():
                try:
                    with work_bounded(latest(deadlines), parts=deadlines):
                        future.set_result(fn(arg))
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting batch
                    future.set_exception(exc)
            del call, future, fn, arg  # hold no batch (its bodies) while waiting for the next one

    def stop(self) -> None:
        """Let the thread end after its current call (never waits for it)."""
        self._calls.put(None)


class Batcher:
    """Collects submitted payloads into batches for `run(payloads) -> results` (one result or exception each).

    `on_batch(stats)` is told about every batch and every item dropped from the queue (for metrics). Start it
    inside the event loop that submits."""

    def __init__(self, run: Callable[[Sequence[Any]], Sequence[Any]], *, max_batch: int = 32,
                 max_wait_ms: float = 5.0, queue_size: int = 256,
                 on_batch: Callable[[BatchStats], None] | None = None):
        checks.positive_int(max_batch, "max_batch")
        checks.non_negative(max_wait_ms, "max_wait_ms")
        checks.positive_int(queue_size, "queue_size")
        self._run = run
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000
        self.queue_size = queue_size
        self._on_batch = on_batch
        self._queue: deque[_Item] = deque()
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._engine: _EngineThread | None = None
        self._closing = False
        self.in_flight = 0  # items handed to the engine and not yet answered
        self.busy_since: float | None = None  # time.monotonic() when the running engine call began
        self.abandoned = False  # stop() gave up on an engine call that did not return in time
        self.calls = 0  # engine calls made
        self.items_run = 0  # items the engine ran
        self.skipped = 0  # cancelled items dropped before the engine saw them

    @property
    def depth(self) -> int:
        """Items waiting in the queue (not yet taken into a batch)."""
        return len(self._queue)

    async def start(self) -> None:
        self._wakeup = asyncio.Event()
        self._engine = _EngineThread()
        self._worker = asyncio.get_running_loop().create_task(self._work(), name="morkit-batcher")

    def submit(self, payload: Any, reservation: Reservation | None = None,
               deadline: float | None = None) -> asyncio.Future:
        """Queue one payload; its future gets the engine's result (or exception). Overloaded when full.

        The batcher holds `reservation` while the item waits or runs; cancelling the future drops the item.
        `deadline` (time.monotonic()) is when its caller stops waiting (it must cancel the future then)."""
        if self._wakeup is None or self._closing:
            raise Overloaded("the server is shutting down")
        if len(self._queue) >= self.queue_size:
            raise Overloaded(f"the queue is full ({self.queue_size} requests waiting); retry later")
        item = _Item(payload, asyncio.get_running_loop().create_future(), reservation, deadline)
        if reservation is not None:
            reservation.hold()
        item.future.add_done_callback(lambda _: self._cancelled(item))
        self._queue.append(item)
        self._wakeup.set()
        return item.future

    def _cancelled(self, item: _Item) -> None:
        """A queued item whose future ended (only a cancel can end it there) leaves the queue now."""
        if item.state == "queued" and item.future.cancelled():
            self._queue.remove(item)
            self._finish(item)
            self.skipped += 1
            if self._on_batch is not None:
                self._on_batch(BatchStats(0, 1, 0.0))

    @staticmethod
    def _finish(item: _Item) -> None:
        item.state = "done"
        if item.reservation is not None:
            item.reservation.release()
        item.payload = None

    async def _next_item(self, timeout: float | None) -> _Item | None:
        assert self._wakeup is not None
        while not self._queue:
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout)
            except asyncio.TimeoutError:
                return None
        item = self._queue.popleft()
        item.state = "taken"
        return item

    async def _collect(self) -> list[_Item]:
        first = await self._next_item(None)
        assert first is not None
        batch = [first]
        deadline = time.monotonic() + self.max_wait_s
        while len(batch) < self.max_batch:
            left = deadline - time.monotonic()
            if left <= 0 and not self._queue:
                break
            item = await self._next_item(max(left, 0.0))
            if item is None:
                break
            batch.append(item)
        return batch

    async def _work(self) -> None:
        assert self._engine is not None
        while True:
            batch = await self._collect()
            live = [item for item in batch if not item.future.done()]
            skipped = len(batch) - len(live)
            self.skipped += skipped
            started = time.perf_counter()
            try:
                if live:
                    await self._run_batch(live)
            finally:
                for item in batch:
                    self._finish(item)
            if self._on_batch is not None:
                self._on_batch(BatchStats(len(live), skipped, time.perf_counter() - started))

    async def _run_batch(self, live: list[_Item]) -> None:
        assert self._engine is not None
        self.in_flight, self.busy_since = len(live), time.monotonic()
        try:
            call = self._engine.submit(self._run, [i.payload for i in live], tuple(i.deadline for i in live))
            results = await asyncio.wrap_future(call)
            if len(results) != len(live):
                raise RuntimeError(f"the engine returned {len(results)} results for {len(live)} items")
        except Exception as exc:  # noqa: BLE001 - every item of the batch gets the failure
            log.exception("engine call failed")
            results = [exc] * len(live)
        finally:
            self.in_flight, self.busy_since = 0, None
        self.calls += 1
        self.items_run += len(live)
        for item, result in zip(live, results):
            if item.future.done():  # cancelled while running: nobody waits for it
                continue
            if isinstance(result, BaseException):
                item.future.set_exception(result)
            else:
                item.future.set_result(result)

    async def stop(self, timeout_s: float = 30.0) -> bool:
        """Refuse new work, let what is queued or running finish for up to `timeout_s`, then stop; anything
        left is failed with Overloaded. True when everything finished; False when an engine call was still
        running (`abandoned`: its daemon thread is left behind, and nobody waits for it)."""
        self._closing = True
        deadline = time.monotonic() + timeout_s
        while ((self._queue or self.in_flight) and self._worker is not None and not self._worker.done()
               and time.monotonic() < deadline):
            await asyncio.sleep(0.02)
        self.abandoned = self.in_flight > 0
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            except Exception:  # noqa: BLE001 - a worker that died has nothing more to give back
                log.exception("the batcher's worker failed")
        while self._queue:
            item = self._queue.popleft()
            if not item.future.done():
                item.future.set_exception(Overloaded("the server is shutting down"))
            self._finish(item)
        if self._engine is not None:
            self._engine.stop()
        return not self.abandoned
