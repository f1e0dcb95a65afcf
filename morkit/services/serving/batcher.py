"""A micro-batcher: concurrent requests queue up, and one worker hands them to the engine in batches.

The queue is bounded (a full queue raises `Overloaded`, which the server answers with 503). The worker
takes the first waiting item, then whatever else arrives within `max_wait_ms` (up to `max_batch`), and runs
the synchronous engine call in one dedicated thread, so models are only ever used by that thread. Items
whose future was cancelled (the client went away, or its request timed out) are dropped before the engine
sees them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from morkit.core import checks
from morkit.core.errors import MorkitError

log = logging.getLogger(__name__)


class Overloaded(MorkitError):
    """The queue is full (or the server is shutting down): come back later."""


@dataclass(frozen=True)
class BatchStats:
    """What one engine call took: items run, items skipped as cancelled, and seconds."""

    size: int
    skipped: int
    seconds: float


@dataclass
class _Item:
    payload: Any
    future: asyncio.Future


class Batcher:
    """Collects submitted payloads into batches for `run(payloads) -> results` (one result or exception each).

    `on_batch(stats)` is told about every batch (for metrics). Start it inside the event loop that submits."""

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
        self._queue: asyncio.Queue[_Item] | None = None
        self._worker: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._closing = False
        self.in_flight = 0  # items handed to the engine and not yet answered
        self.calls = 0  # engine calls made
        self.items_run = 0  # items the engine ran
        self.skipped = 0  # cancelled items dropped before the engine saw them

    @property
    def depth(self) -> int:
        """Items waiting in the queue (not yet taken into a batch)."""
        return self._queue.qsize() if self._queue is not None else 0

    async def start(self) -> None:
        self._queue = asyncio.Queue(self.queue_size)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="morkit-engine")
        self._worker = asyncio.get_running_loop().create_task(self._work(), name="morkit-batcher")

    def submit(self, payload: Any) -> asyncio.Future:
        """Queue one payload; its future gets the engine's result (or exception). Overloaded when full."""
        if self._queue is None or self._closing:
            raise Overloaded("the server is shutting down")
        future = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait(_Item(payload, future))
        except asyncio.QueueFull:
            raise Overloaded(f"the queue is full ({self.queue_size} requests waiting); retry later") from None
        return future

    async def _collect(self) -> list[_Item]:
        assert self._queue is not None
        batch = [await self._queue.get()]
        deadline = time.monotonic() + self.max_wait_s
        while len(batch) < self.max_batch:
            if not self._queue.empty():
                batch.append(self._queue.get_nowait())
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), left))
            except asyncio.TimeoutError:
                break
        return batch

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._collect()
            live = [item for item in batch if not item.future.cancelled()]
            self.skipped += len(batch) - len(live)
            started = time.perf_counter()
            if live:
                self.in_flight = len(live)
                try:
                    results = await loop.run_in_executor(self._executor, self._run, [i.payload for i in live])
                    if len(results) != len(live):
                        raise RuntimeError(f"the engine returned {len(results)} results for {len(live)} items")
                except Exception as exc:  # noqa: BLE001 - every item of the batch gets the failure
                    log.exception("engine call failed")
                    results = [exc] * len(live)
                finally:
                    self.in_flight = 0
                self.calls += 1
                self.items_run += len(live)
                for item, result in zip(live, results):
                    if item.future.done():  # cancelled while running: nobody waits for it
                        continue
                    if isinstance(result, BaseException):
                        item.future.set_exception(result)
                    else:
                        item.future.set_result(result)
            for _ in batch:
                self._queue.task_done()  # type: ignore[union-attr]
            if self._on_batch is not None:
                self._on_batch(BatchStats(len(live), len(batch) - len(live), time.perf_counter() - started))

    async def stop(self) -> None:
        """Refuse new work, finish everything queued or running, then stop the worker and its thread."""
        self._closing = True
        if self._queue is not None and self._worker is not None and not self._worker.done():
            drained = asyncio.ensure_future(self._queue.join())
            await asyncio.wait({drained, self._worker}, return_when=asyncio.FIRST_COMPLETED)  # a dead worker
            drained.cancel()  # drains nothing more: stop anyway
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        if self._executor is not None:
            self._executor.shutdown(wait=True)
