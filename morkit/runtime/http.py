"""HTTP plumbing shared by the remote RM client and the OpenAI-compatible LLM client."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

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


async def post_json(client: Any, url: str, payload: Any, headers: dict[str, str], timeout: float) -> bytes:
    """POST a JSON body and return the 200 response's bytes; failures are Retryable or Fatal.

    httpx's timeout is per phase (connect, each read); wait_for bounds the whole request."""
    httpx = httpx_module()
    try:
        resp = await asyncio.wait_for(client.post(url, json=payload, headers=headers, timeout=timeout), timeout)
    except (httpx.TimeoutException, asyncio.TimeoutError):
        raise Retryable(f"timed out after {timeout:g}s") from None
    except httpx.TransportError as err:
        raise Retryable(f"connection error: {type(err).__name__}: {err}") from None
    if resp.status_code >= 500 or resp.status_code in RETRY_STATUS:
        raise Retryable(f"HTTP {resp.status_code}: {resp.text[:200]}")
    if resp.status_code != 200:
        raise Fatal(f"HTTP {resp.status_code}: {resp.text[:200]}")
    return resp.content
