"""HTTP plumbing shared by the remote RM client and the OpenAI-compatible LLM client."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any


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
