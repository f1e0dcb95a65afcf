"""HTTP plumbing shared by morkit's HTTP clients (remote RM, OpenAI-compatible LLM, TRL reward): failures, malformed
replies included, are `Retryable` or `Fatal` and fail their own request alone; `RetryPolicy` is their one retry policy
(on tenacity); a key no header can carry is refused up front and never shown in a message (`redacted`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import queue
import re
import threading
import time
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterator

from morkit.core.errors import InputError

_log = logging.getLogger(__name__)

RETRY_STATUS = {408, 429}
"""Besides 5xx: request timeout and rate limiting are worth another try."""

SECRET_HEADER = re.compile(r"auth|key|token|secret|cookie", re.IGNORECASE)
"""Names of headers whose values error messages never show."""


class Retryable(Exception):
    """A failure another attempt may fix: timeout, connection error, 5xx/408/429, malformed reply."""


class Fatal(Exception):
    """A failure retrying cannot fix (other 4xx, or an error the server reports)."""


@dataclass(frozen=True)
class Deadline:
    """When a call must be over (on `time.monotonic`), and how long it was given, for messages."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float | None) -> Deadline | None:
        """The deadline `seconds` from now; None for None (no deadline)."""
        return None if seconds is None else cls(time.monotonic() + seconds, seconds)

    def left(self) -> float:
        """Seconds left (negative once passed)."""
        return self.at - time.monotonic()


@dataclass(frozen=True)
class RetryPolicy:
    """The one retry policy of morkit's HTTP clients: an attempt that raises `Retryable` is tried again, up to
    `retries` more times, after `backoff_s`, then twice as long each time (at most `cap_s`); anything else ends the
    call at once, and so does a pause that would reach the `Deadline`. The last failure is raised as it is. Use:
    `for attempt in policy.attempts(deadline): with attempt: ...` (`async_attempts` in a coroutine).

    Args:
        retries: Tries after the first (0 or more).
        backoff_s: Seconds before the first retry.
        cap_s: The longest pause between tries.
        name: Who retries, for the debug log line each retry writes.
        sleep: What waits out a pause, given its seconds (`async_attempts` awaits what it returns, if anything);
            None is `time.sleep`, and `asyncio.sleep` in a coroutine. Tests pass a recording clock.
    """

    retries: int
    backoff_s: float
    cap_s: float = math.inf
    name: str = "http"
    sleep: Callable[[float], Any] | None = field(default=None, compare=False, repr=False)

    def pause(self, attempt_number: int) -> float:
        """Seconds to wait after failed attempt `attempt_number` (1-based)."""
        return min(self.backoff_s * 2 ** (attempt_number - 1), self.cap_s)

    def stopped_early(self, attempt_number: int) -> bool:
        """Whether a call that gave up after `attempt_number` tries stopped at its deadline, not its retries."""
        return attempt_number <= self.retries

    def _options(self, deadline: Deadline | None) -> dict[str, Any]:
        import tenacity

        def stop(state: Any) -> bool:
            return state.attempt_number > self.retries or (
                deadline is not None and state.upcoming_sleep >= deadline.left())

        def logged(state: Any) -> None:
            _log.debug("%s: %s (attempt %d)", self.name, state.outcome.exception(), state.attempt_number)

        return {"retry": tenacity.retry_if_exception_type(Retryable), "stop": stop, "reraise": True,
                "wait": lambda state: self.pause(state.attempt_number), "before_sleep": logged}

    def attempts(self, deadline: Deadline | None = None) -> Any:
        """A `tenacity.Retrying` to iterate over: each item is one attempt, a context manager."""
        import tenacity

        options = self._options(deadline)
        if self.sleep is not None:
            options["sleep"] = self.sleep
        return tenacity.Retrying(**options)

    def async_attempts(self, deadline: Deadline | None = None) -> Any:
        """`attempts` for a coroutine (`async for`): a `tenacity.AsyncRetrying`, whose pauses do not block."""
        import tenacity

        options = self._options(deadline)
        if self.sleep is not None:
            sleep = self.sleep

            async def pause(seconds: float) -> None:
                waited = sleep(seconds)
                if waited is not None:
                    await waited

            options["sleep"] = pause
        return tenacity.AsyncRetrying(**options)


def checked_api_key(key: str | None, source: str) -> str | None:
    """`key` as given, unless no HTTP header can carry it as a bearer token: an InputError naming `source` (where
    the key came from, e.g. "$OPENAI_API_KEY") and what is wrong, never the key itself. None and "" pass (no key).

    Args:
        key: The API key, or None.
        source: Where it came from, for the message: an argument (`api_key=`) or an environment variable.

    Returns:
        The key, unchanged.

    Raises:
        InputError: The key has whitespace (a trailing newline from a file, say), a control character or a
            non-ASCII character.
    """
    problem = _header_problem(key or "", spaces=False)
    if problem:
        raise InputError(f"the API key from {source} has {problem}, which an HTTP header cannot carry "
                         f"(the key is not shown); set it to the key alone")
    return key


def checked_headers(headers: dict[str, str], source: str) -> dict[str, str]:
    """`headers` as given, unless a value has a control or non-ASCII character (spaces inside are fine): an
    InputError naming `source` and the header, never its value (it may hold a key).

    Args:
        headers: Header names to values.
        source: Where they came from, for the message (e.g. "headers=").

    Returns:
        The headers, unchanged.

    Raises:
        InputError: A value no HTTP header can carry.
    """
    for name, value in headers.items():
        problem = _header_problem(value, spaces=True)
        if problem:
            raise InputError(f"header {name!r} of {source} has {problem}, which an HTTP header cannot carry "
                             f"(the value is not shown)")
    return headers


def _header_problem(value: str, spaces: bool) -> str | None:
    """What in `value` an HTTP header cannot carry (whitespace too, unless `spaces`; spaces inside only), or None."""
    for position, char in enumerate(value, 1):
        inside = 1 < position < len(value)
        if char.isspace() and not (spaces and char == " " and inside):
            what = "whitespace (a newline or a space)"
        elif unicodedata.category(char).startswith("C"):
            what = "a control character"
        elif not char.isascii():
            what = "a non-ASCII character"
        else:
            continue
        return what + (" at its end" if position == len(value) else " at its start" if position == 1
                       else " inside it")
    return None


def redacted(text: str, secrets: Any) -> str:
    """`text` with each of `secrets` replaced by "***", as it is or as a message quotes it (stripped, or escaped
    as in a str or bytes repr), so an error message that quotes a request header never shows a key; None and
    secrets under 4 characters (no key, and replacing them would garble the text) are left.

    Args:
        text: The message.
        secrets: The strings to hide.

    Returns:
        The message without them.
    """
    forms = {form for secret in secrets if secret
             for form in (secret, secret.strip(), repr(secret)[1:-1], repr(secret.encode("utf-8"))[2:-1])}
    for form in sorted(forms, key=len, reverse=True):  # the longest first: a shorter form may be part of it
        if len(form) >= 4:
            text = text.replace(form, "***")
    return text


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
    except httpx.TransportError as err:  # its text may quote a header: no secret header's value shown
        secrets = [v for k, v in headers.items() if SECRET_HEADER.search(k)]
        raise Retryable(redacted(f"connection error: {type(err).__name__}: {err}", secrets)) from None
    if resp.status_code != 200:
        raise status_failure(resp.status_code, resp.text)
    check_content_type(url, resp.headers.get("content-type"), "application/json")
    return resp.content


def status_failure(status: int, text: str) -> Retryable | Fatal:
    """The failure a non-200 reply is: Retryable for 5xx, 408 and 429, else Fatal; `HTTP <status>: <text>`."""
    return (Retryable if status >= 500 or status in RETRY_STATUS else Fatal)(f"HTTP {status}: {text[:200]}")


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
