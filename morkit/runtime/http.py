"""HTTP plumbing shared by the remote RM client and the OpenAI-compatible LLM client: failures, malformed replies
included (`json_document`, `by_index`), are `Retryable` or `Fatal`, and each fails its own request alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Iterator

RETRY_STATUS = {408, 429}
"""Besides 5xx: request timeout and rate limiting are worth another try."""


class Retryable(Exception):
    """A failure another attempt may fix: timeout, connection error, 5xx/408/429, malformed reply."""


class Fatal(Exception):
    """A failure retrying cannot fix (other 4xx, or an error the server reports)."""


def httpx_module() -> Any:
    """The httpx API: `httpx2` is what requirements.lock pins (via huggingface_hub); plain httpx also works."""
    try:
        import httpx2 as httpx
    except ImportError:  # pragma: no cover - depends on the environment
        import httpx
    return httpx


def run_sync(coro: Any) -> Any:
    """Run a coroutine to completion, also from inside a running event loop (e.g. a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def check_content_type(url: str, content_type: str | None, expected: str) -> None:
    """Retryable unless a 200 reply's media type is `expected` (a `+json` suffix counts as JSON): a proxy's
    or a login page's HTML is not an answer, even when it parses."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == expected or (expected == "application/json" and media.endswith("+json")):
        return
    raise Retryable(f"{url} answered 200 with Content-Type {content_type or 'none'!r}, not {expected}")


async def post_json(client: Any, url: str, payload: Any, headers: dict[str, str], timeout: float) -> bytes:
    """POST a JSON body and return the 200 JSON response's bytes; failures are Retryable or Fatal.

    httpx's timeout is per phase (connect, each read); wait_for bounds the whole request."""
    httpx = httpx_module()
    try:
        resp = await asyncio.wait_for(client.post(url, json=payload, headers=headers, timeout=timeout), timeout)
    except (httpx.TimeoutException, asyncio.TimeoutError):
        raise Retryable(f"timed out after {timeout:.3g}s") from None
    except httpx.TransportError as err:
        raise Retryable(f"connection error: {type(err).__name__}: {err}") from None
    if resp.status_code >= 500 or resp.status_code in RETRY_STATUS:
        raise Retryable(f"HTTP {resp.status_code}: {resp.text[:200]}")
    if resp.status_code != 200:
        raise Fatal(f"HTTP {resp.status_code}: {resp.text[:200]}")
    check_content_type(url, resp.headers.get("content-type"), "application/json")
    return resp.content


# -- reading replies ------------------------------------------------------------------------------

def json_document(body: bytes | str) -> dict[str, Any]:
    """The reply's top-level JSON object; Retryable when it is not JSON or not an object."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise Retryable(f"response is not JSON: {str(err)[:120]}") from None
    if not isinstance(doc, dict):
        raise Retryable(f"response is a JSON {type(doc).__name__}, not an object: {str(doc)[:120]}")
    return doc


def by_index(items: list[Any], what: str, size: int | None = None) -> list[dict[str, Any]]:
    """`items` (JSON objects) in the order of their `index`; Retryable unless every item is an object and the
    indices are distinct non-negative integers (all absent: the order given), exactly 0..size-1 when `size`."""
    if not all(isinstance(item, dict) for item in items):
        raise Retryable(f"malformed {what}: expected objects, got {str(items)[:120]}")
    indices = [item.get("index") for item in items]
    if all(i is None for i in indices):
        return list(items)
    if not all(type(i) is int and i >= 0 for i in indices) or len(set(indices)) != len(indices):
        raise Retryable(f"malformed {what}: index values {str(indices)[:120]} are not distinct integers >= 0")
    if size is not None and sorted(indices) != list(range(size)):
        raise Retryable(f"malformed {what}: index values {str(indices)[:120]} are not 0..{size - 1}")
    return [item for _, item in sorted(zip(indices, items), key=lambda pair: pair[0])]


# -- a sync iterator over async work --------------------------------------------------------------

_END = object()


def iterate_in_thread(produce: Callable[[Callable[[Any], None]], Awaitable[None]], name: str = "morkit-io"
                      ) -> Iterator[Any]:
    """Yield, here, each item that `produce(put)` puts while it runs on its own event loop in a thread; its exception
    is raised here after the items before it. Closing this generator cancels `produce` at once, so a connection
    never outlives its reader, and asyncio deadlines inside `produce` hold exactly."""
    items: queue.SimpleQueue = queue.SimpleQueue()
    running: dict[str, Any] = {}
    ready = threading.Event()

    async def main() -> None:
        running["loop"], running["task"] = asyncio.get_running_loop(), asyncio.current_task()
        ready.set()
        outcome: Any = _END
        try:
            await produce(items.put)
        except asyncio.CancelledError:  # the reader has gone
            pass
        except BaseException as err:  # noqa: BLE001 - handed to the reader, who raises it
            outcome = err
        finally:
            items.put(outcome)  # always, so the reader never waits for an item that cannot come

    thread = threading.Thread(target=asyncio.run, args=(main(),), name=name, daemon=True)
    thread.start()
    ready.wait()
    try:
        while (item := items.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        if thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop may have closed just now
                running["loop"].call_soon_threadsafe(running["task"].cancel)
        thread.join()
