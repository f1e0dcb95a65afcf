"""An `LLM` served by any OpenAI-compatible `/chat/completions` endpoint (vLLM, llama.cpp, OpenAI, ...).

`chat` sends one request per conversation, at most `concurrency` in flight (asyncio + a semaphore),
each bounded by `timeout`. Timeouts, connection errors, 408/429/5xx answers and malformed JSON are
retried with exponential backoff; other 4xx answers fail at once. Servers that ignore `n` > 1 get
follow-up requests for the missing samples. `chat_partial` keeps the conversations that succeeded;
`chat` raises `ChatError` (an `LLMError`) naming the failed ones. Stop strings are also cut here,
as a safety net for servers that ignore them. Nothing connects until a method is called.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from morkit.core import checks
from morkit.core.errors import LLMError
from morkit.llm.base import (
    Completion,
    Conversation,
    SamplingParams,
    cut_at_stop,
    cut_stream,
)
from morkit.runtime.http import (
    RETRY_STATUS,
    Fatal,
    Retryable,
    httpx_module,
    post_json,
    run_sync,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


class ConversationError(LLMError):
    """One conversation that failed after its retries: its index in the batch, why, and how many tries."""

    def __init__(self, index: int, reason: str, attempts: int):
        super().__init__(f"conversation #{index}: {reason} ({attempts} attempt{'s' if attempts != 1 else ''})")
        self.index, self.reason, self.attempts = index, reason, attempts


class ChatError(LLMError):
    """Some conversations of a `chat` call failed; `results` keeps every Completion or ConversationError."""

    def __init__(self, name: str, results: list[Completion | ConversationError], shown: int = 10):
        failures = [r for r in results if isinstance(r, ConversationError)]
        listed = "; ".join(str(f) for f in failures[:shown])
        more = f"; ... and {len(failures) - shown} more" if len(failures) > shown else ""
        super().__init__(f"LLM {name!r}: {len(failures)} of {len(results)} conversations failed "
                         f"(indices {[f.index for f in failures]}): {listed}{more}")
        self.results = results
        self.failures = failures


@dataclass(frozen=True)
class _Reply:
    """The parsed answer to one request: texts and finish reasons by choice index, and usage."""

    texts: tuple[str, ...]
    finish_reasons: tuple[str, ...]
    prompt_tokens: int
    completion_tokens: int


class OpenAIChatLLM:
    """Chat completions from an OpenAI-compatible server; base_url/api_key default to $OPENAI_BASE_URL/$OPENAI_API_KEY."""

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, *,
                 timeout: float = 60.0, retries: int = 3, concurrency: int = 8, backoff: float = 0.5,
                 extra_body: dict[str, Any] | None = None, name: str | None = None):
        checks.positive_int(concurrency, "concurrency")
        checks.non_negative_int(retries, "retries")
        checks.positive(timeout, "timeout")
        checks.non_negative(backoff, "backoff")
        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY") or None
        self.timeout = timeout
        self.retries = retries
        self.concurrency = concurrency
        self.backoff = backoff
        self.extra_body = dict(extra_body or {})
        self.name = name or model
        self.requests_sent = 0
        self._ssl: Any = None

    # -- requests ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.base_url + "/chat/completions"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _client_options(self) -> dict[str, Any]:
        httpx = httpx_module()
        if self._ssl is None and self.base_url.startswith("https:"):
            self._ssl = httpx.create_ssl_context(trust_env=False)  # once: building one costs ~0.2 s
        return {"trust_env": False, "verify": self._ssl or False}

    def _payload(self, conversation: Conversation, params: SamplingParams, n: int, seed: int | None
                 ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model, "messages": [dict(m) for m in conversation], "n": n,
            "temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_tokens,
        }
        if params.stop:
            payload["stop"] = list(params.stop)
        if seed is not None:
            payload["seed"] = seed
        payload.update(self.extra_body)
        return payload

    @staticmethod
    def _parse(body: bytes, asked: int) -> _Reply:
        try:
            doc = json.loads(body)
        except ValueError as err:
            raise Retryable(f"response is not JSON: {err}") from None
        choices = doc.get("choices") if isinstance(doc, dict) else None
        if not isinstance(choices, list) or not choices:
            raise Retryable(f"response has no choices: {str(doc)[:120]}")
        if not all(isinstance(c, dict) and isinstance(c.get("message"), dict) for c in choices):
            raise Retryable(f"malformed choice in: {str(choices)[:120]}")
        ordered = sorted(choices, key=lambda c: c.get("index", 0))[:asked]
        usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
        return _Reply(tuple(str(c["message"].get("content") or "") for c in ordered),
                      tuple(str(c.get("finish_reason") or "stop") for c in ordered),
                      int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))

    async def _post(self, client: Any, payload: dict[str, Any]) -> _Reply:
        self.requests_sent += 1
        body = await post_json(client, self.url, payload, self._headers(), self.timeout)
        return self._parse(body, payload["n"])

    async def _request(self, client: Any, sem: asyncio.Semaphore, payload: dict[str, Any]
                       ) -> tuple[_Reply | None, str, int]:
        """One request with its retries: (reply or None, reason of the last failure, attempts made)."""
        reason = ""
        for attempt in range(self.retries + 1):
            try:
                async with sem:
                    return await self._post(client, payload), "", attempt + 1
            except Fatal as err:
                return None, str(err), attempt + 1
            except Retryable as err:
                reason = str(err)
                log.debug("%s: %s (attempt %d)", self.name, reason, attempt + 1)
            if attempt < self.retries:
                await asyncio.sleep(self.backoff * (2 ** attempt))
        return None, reason, self.retries + 1

    async def _conversation(self, client: Any, sem: asyncio.Semaphore, index: int, conversation: Conversation,
                            params: SamplingParams) -> Completion | ConversationError:
        texts: list[str] = []
        reasons: list[str] = []
        prompt_tokens = completion_tokens = attempts = 0
        while len(texts) < params.n:  # a server that ignores n answers fewer; ask again for the rest
            seed = None if params.seed is None else params.seed + len(texts)  # top-ups get fresh samples
            reply, reason, tries = await self._request(
                client, sem, self._payload(conversation, params, params.n - len(texts), seed))
            attempts += tries
            if reply is None:
                return ConversationError(index, reason, attempts)
            for text, finish in zip(reply.texts, reply.finish_reasons):
                text, cut = cut_at_stop(text, params.stop)
                texts.append(text)
                reasons.append("stop" if cut else finish)
            prompt_tokens += reply.prompt_tokens
            completion_tokens += reply.completion_tokens
        return Completion(tuple(texts), tuple(reasons), prompt_tokens, completion_tokens)

    async def _chat_async(self, conversations: Sequence[Conversation], params: SamplingParams
                          ) -> list[Completion | ConversationError]:
        httpx = httpx_module()
        sem = asyncio.Semaphore(self.concurrency)
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(limits=limits, **self._client_options()) as client:
            return list(await asyncio.gather(
                *(self._conversation(client, sem, i, c, params) for i, c in enumerate(conversations))))

    # -- LLM protocol --------------------------------------------------------------------------

    def chat_partial(self, conversations: Sequence[Conversation], params: SamplingParams = SamplingParams()
                     ) -> list[Completion | LLMError]:
        """One entry per conversation, in order: its Completion, or the ConversationError that ended it."""
        if not conversations:
            return []
        return run_sync(self._chat_async(conversations, params))

    def chat(self, conversations: Sequence[Conversation], params: SamplingParams = SamplingParams()
             ) -> list[Completion]:
        results = self.chat_partial(conversations, params)
        if any(isinstance(r, LLMError) for r in results):
            raise ChatError(self.name, results)  # type: ignore[arg-type]
        return results  # type: ignore[return-value]

    def stream(self, conversation: Conversation, params: SamplingParams = SamplingParams()) -> Iterator[str]:
        """Content pieces of one sample from the server's SSE stream; retried only before the first piece."""
        httpx = httpx_module()
        payload = self._payload(conversation, params, 1, params.seed)
        payload["stream"] = True
        started = False
        with httpx.Client(timeout=self.timeout, **self._client_options()) as client:  # timeout: per read
            for attempt in range(self.retries + 1):
                try:
                    with contextlib.closing(self._stream_pieces(client, payload)) as pieces:
                        for out in cut_stream(pieces, params.stop):
                            started = True
                            yield out
                    return
                except Fatal as err:
                    raise LLMError(f"LLM {self.name!r} stream: {err}") from None
                except Retryable as err:
                    if started or attempt == self.retries:
                        raise LLMError(f"LLM {self.name!r} stream: {err} ({attempt + 1} attempts)") from None
                    log.debug("%s stream: %s (attempt %d)", self.name, err, attempt + 1)
                time.sleep(self.backoff * (2 ** attempt))

    def _stream_pieces(self, client: Any, payload: dict[str, Any]) -> Iterator[str]:
        """`choices[0].delta.content` of each `data:` event until `data: [DONE]`; errors as Retryable/Fatal."""
        httpx = httpx_module()
        self.requests_sent += 1
        try:
            with client.stream("POST", self.url, json=payload, headers=self._headers()) as resp:
                if resp.status_code != 200:
                    text = resp.read().decode(errors="replace")[:200]
                    bad = resp.status_code >= 500 or resp.status_code in RETRY_STATUS
                    raise (Retryable if bad else Fatal)(f"HTTP {resp.status_code}: {text}")
                for line in resp.iter_lines():
                    if not line.startswith("data:"):
                        continue  # blank separators, comments, event names
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    try:
                        event = json.loads(data)
                        error = event.get("error")
                        content = ((event.get("choices") or [{}])[0].get("delta") or {}).get("content")
                    except (ValueError, AttributeError, TypeError, IndexError):
                        raise Retryable(f"malformed stream event: {data[:120]}") from None
                    if error:
                        raise Fatal(f"server error in stream: {str(error)[:200]}")
                    if content:
                        yield str(content)
        except httpx.TimeoutException:
            raise Retryable(f"timed out after {self.timeout:g}s without data") from None
        except httpx.TransportError as err:
            raise Retryable(f"connection error: {type(err).__name__}: {err}") from None


def from_agent_spec(spec: Any) -> OpenAIChatLLM:
    """The `openai` backend of agents.toml: the key is read from the variable `api_key_env` names."""
    key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    return OpenAIChatLLM(spec.model, spec.base_url, key, timeout=spec.timeout, retries=spec.retries,
                         concurrency=spec.concurrency)
