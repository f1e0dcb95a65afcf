"""An `LLM` served by any OpenAI-compatible `/chat/completions` endpoint (vLLM, llama.cpp, OpenAI, ...): bounded
concurrency and timeouts, retries with backoff on transient failures and malformed replies, `chat_partial` keeping
the successes, SSE `stream`. Nothing connects until a method is called; docs: Scoring and backends, LLM backends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

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
    by_index,
    check_content_type,
    httpx_module,
    iterate_in_thread,
    json_document,
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


@dataclass(frozen=True)
class _Deadline:
    """When a call must be over (on `time.monotonic`), and how long it was given, for messages."""

    at: float
    seconds: float

    @classmethod
    def after(cls, seconds: float | None) -> _Deadline | None:
        return None if seconds is None else cls(time.monotonic() + seconds, seconds)

    def left(self) -> float:
        return self.at - time.monotonic()


class OpenAIChatLLM:
    """Chat completions from an OpenAI-compatible server; base_url/api_key default to $OPENAI_BASE_URL/$OPENAI_API_KEY.

    Args:
        model: The model name sent in every request.
        base_url: The API root (the part before `/chat/completions`); None is $OPENAI_BASE_URL, else
            http://127.0.0.1:8000/v1.
        api_key: Sent as a Bearer token; None is $OPENAI_API_KEY (no header when neither is set).
        timeout: Seconds one request of `chat` (one read of `stream`) may take.
        retries: Retries of a request after a transient failure or a malformed reply (0 or more).
        concurrency: Requests in flight at once (positive).
        backoff: Seconds before the first retry; each further retry waits twice as long.
        extra_body: Fields added to every request body (they override morkit's own).
        name: The name completions and errors report; None is `model`.
        stream_timeout: Seconds a whole `stream` may take, retries included.
    """

    takes_reasoning_effort = True  # SamplingParams.reasoning_effort goes out as the request's `reasoning_effort`
    takes_presence_penalty = True  # SamplingParams.presence_penalty goes out as `presence_penalty`, when not 0

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, *,
                 timeout: float = 60.0, retries: int = 3, concurrency: int = 8, backoff: float = 0.5,
                 extra_body: dict[str, Any] | None = None, name: str | None = None,
                 stream_timeout: float = 600.0):
        checks.positive_int(concurrency, "concurrency")
        checks.non_negative_int(retries, "retries")
        checks.positive(timeout, "timeout")
        checks.positive(stream_timeout, "stream_timeout")
        checks.non_negative(backoff, "backoff")
        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY") or None
        self.timeout = timeout  # one request of `chat`; one read of `stream`
        self.stream_timeout = stream_timeout  # a whole `stream`, retries included
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
        if params.reasoning_effort is not None:
            payload["reasoning_effort"] = params.reasoning_effort
        if params.presence_penalty:
            payload["presence_penalty"] = params.presence_penalty
        payload.update(self.extra_body)
        return payload

    @staticmethod
    def _parse(body: bytes, asked: int) -> _Reply:
        """The first `asked` choices by index, and the usage counts; Retryable when any part is malformed."""
        doc = json_document(body)
        choices = doc.get("choices")
        if not isinstance(choices, list) or not choices:
            raise Retryable(f"response has no choices: {str(doc)[:120]}")
        ordered = by_index(choices, "choices")[:asked]
        return _Reply(tuple(_content(c) for c in ordered), tuple(_finish_reason(c) for c in ordered),
                      *_usage(doc.get("usage")))

    async def _post(self, client: Any, payload: dict[str, Any], timeout: float) -> _Reply:
        self.requests_sent += 1
        body = await post_json(client, self.url, payload, self._headers(), timeout)
        return self._parse(body, payload["n"])

    async def _request(self, client: Any, sem: asyncio.Semaphore, payload: dict[str, Any],
                       deadline: _Deadline | None) -> tuple[_Reply | None, str, int]:
        """One request with its retries, all before `deadline`: (reply or None, why the last try failed, tries)."""
        reason = ""
        for attempt in range(self.retries + 1):
            try:
                async with sem:
                    timeout = self.timeout if deadline is None else min(self.timeout, deadline.left())
                    if timeout <= 0:
                        return None, _past(deadline, reason), attempt
                    return await self._post(client, payload, timeout), "", attempt + 1
            except Fatal as err:
                return None, str(err), attempt + 1
            except Retryable as err:
                reason = str(err)
                log.debug("%s: %s (attempt %d)", self.name, reason, attempt + 1)
            except Exception as err:  # noqa: BLE001 - a bug in one request must not lose the other conversations
                return None, f"unexpected {type(err).__name__}: {str(err)[:200]}", attempt + 1
            if attempt < self.retries:
                pause = self.backoff * (2 ** attempt)
                await asyncio.sleep(pause if deadline is None else max(0.0, min(pause, deadline.left())))
        return None, reason, self.retries + 1

    async def _conversation(self, client: Any, sem: asyncio.Semaphore, index: int, conversation: Conversation,
                            params: SamplingParams, deadline: _Deadline | None) -> Completion | ConversationError:
        texts: list[str] = []
        reasons: list[str] = []
        prompt_tokens = completion_tokens = attempts = 0
        while len(texts) < params.n:  # a server that ignores n answers fewer; ask again for the rest
            seed = None if params.seed is None else params.seed + len(texts)  # top-ups get fresh samples
            reply, reason, tries = await self._request(
                client, sem, self._payload(conversation, params, params.n - len(texts), seed), deadline)
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
        deadline = _Deadline.after(params.timeout_s)
        async with httpx.AsyncClient(limits=limits, **self._client_options()) as client:
            return list(await asyncio.gather(
                *(self._conversation(client, sem, i, c, params, deadline) for i, c in enumerate(conversations))))

    # -- LLM protocol --------------------------------------------------------------------------

    def chat_partial(self, conversations: Sequence[Conversation], params: SamplingParams = SamplingParams()
                     ) -> list[Completion | LLMError]:
        """One entry per conversation, in order: its Completion, or the ConversationError that ended it.

        Args:
            conversations: Each a list of `{"role", "content"}` messages.
            params: What to generate; `timeout_s` bounds the whole call, retries included.

        Returns:
            Per conversation, its Completion or the ConversationError (an LLMError) that ended it.
        """
        if not conversations:
            return []
        return run_sync(self._chat_async(conversations, params))

    def chat(self, conversations: Sequence[Conversation], params: SamplingParams = SamplingParams()
             ) -> list[Completion]:
        """One Completion per conversation, in order; any failed conversation raises ChatError naming each failure.

        Args:
            conversations: Each a list of `{"role", "content"}` messages.
            params: What to generate; `timeout_s` bounds the whole call, retries included.

        Returns:
            One Completion per conversation with `params.n` texts and the server's token counts.

        Raises:
            ChatError: A conversation failed after its retries (an LLMError; `.results` keeps the successes).
        """
        results = self.chat_partial(conversations, params)
        if any(isinstance(r, LLMError) for r in results):
            raise ChatError(self.name, results)  # type: ignore[arg-type]
        return results  # type: ignore[return-value]

    def stream(self, conversation: Conversation, params: SamplingParams = SamplingParams()) -> Iterator[str]:
        """Content pieces of one sample from the server's SSE stream; retried only before the first piece. `timeout`
        bounds each read and `stream_timeout` or `params.timeout_s` (the sooner) the whole stream, so keep-alives
        cannot hold it; closing this iterator stops it at once.

        Args:
            conversation: A list of `{"role", "content"}` messages.
            params: What to generate; `n` is ignored.

        Yields:
            The sample's content pieces, up to the first stop string.

        Raises:
            LLMError: The stream failed, or was not over within its deadline.
        """
        payload = self._payload(conversation, params, 1, params.seed)
        payload["stream"] = True
        seconds = min(self.stream_timeout, params.timeout_s or math.inf)
        pieces = iterate_in_thread(lambda put: self._stream_async(payload, seconds, put), name="morkit-llm-stream")
        with contextlib.closing(pieces):
            yield from cut_stream(pieces, params.stop)

    async def _stream_async(self, payload: dict[str, Any], seconds: float, put: Callable[[str], None]) -> None:
        """Put the stream's content pieces; LLMError when it fails or is not over within `seconds`."""
        try:
            async with asyncio.timeout(seconds):
                await self._stream_attempts(payload, put)
        except TimeoutError:
            raise LLMError(f"LLM {self.name!r} stream: not over within its {seconds:.3g}s deadline") from None

    async def _stream_attempts(self, payload: dict[str, Any], put: Callable[[str], None]) -> None:
        """The streamed request with its retries, which stop once a piece has been put."""
        started = False

        def emit(piece: str) -> None:
            nonlocal started
            started = True
            put(piece)

        async with httpx_module().AsyncClient(timeout=self.timeout, **self._client_options()) as client:
            for attempt in range(self.retries + 1):
                try:
                    return await self._stream_once(client, payload, emit)
                except Fatal as err:
                    raise LLMError(f"LLM {self.name!r} stream: {err}") from None
                except Retryable as err:
                    if started or attempt == self.retries:
                        raise LLMError(f"LLM {self.name!r} stream: {err} ({attempt + 1} attempts)") from None
                    log.debug("%s stream: %s (attempt %d)", self.name, err, attempt + 1)
                await asyncio.sleep(self.backoff * (2 ** attempt))

    async def _stream_once(self, client: Any, payload: dict[str, Any], emit: Callable[[str], None]) -> None:
        """Each event's content to `emit` until `data: [DONE]`; errors as Retryable/Fatal."""
        httpx = httpx_module()
        self.requests_sent += 1
        try:
            async with client.stream("POST", self.url, json=payload, headers=self._headers()) as resp:
                if resp.status_code != 200:
                    text = (await resp.aread()).decode(errors="replace")[:200]
                    bad = resp.status_code >= 500 or resp.status_code in RETRY_STATUS
                    raise (Retryable if bad else Fatal)(f"HTTP {resp.status_code}: {text}")
                check_content_type(self.url, resp.headers.get("content-type"), "text/event-stream")
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue  # blank separators, comments (keep-alives), event names
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    content = _event_content(data)
                    if content:
                        emit(content)
        except httpx.TimeoutException:
            raise Retryable(f"timed out after {self.timeout:g}s without data") from None
        except httpx.TransportError as err:
            raise Retryable(f"connection error: {type(err).__name__}: {err}") from None


# -- reading replies --------------------------------------------------------------------------------

def _past(deadline: _Deadline, reason: str) -> str:
    return f"the call's {deadline.seconds:.3g}s deadline passed" + (f" (last try: {reason})" if reason else "")


def _content(choice: dict[str, Any]) -> str:
    message = choice.get("message")
    if not isinstance(message, dict):
        raise Retryable(f"malformed choice, no message object: {str(choice)[:120]}")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise Retryable(f"malformed choice: message content is a {type(content).__name__}, not text")
    return content or ""


def _finish_reason(choice: dict[str, Any]) -> str:
    reason = choice.get("finish_reason")
    if reason is not None and not isinstance(reason, str):
        raise Retryable(f"malformed choice: finish_reason is a {type(reason).__name__}, not text")
    return reason or "stop"


def _usage(usage: Any) -> tuple[int, int]:
    """(prompt_tokens, completion_tokens); 0 for a count the server leaves out."""
    if usage is None:
        return 0, 0
    if not isinstance(usage, dict):
        raise Retryable(f"malformed usage: a {type(usage).__name__}, not an object")
    return _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is not int or value < 0:
        raise Retryable(f"malformed usage: {key} is {str(value)[:40]!r}, not a token count")
    return value


def _event_content(data: str) -> str:
    """The text of one stream event (`choices[0].delta.content`; "" for none); Fatal for a reported error."""
    try:
        event = json.loads(data)
    except (ValueError, RecursionError):
        raise Retryable(f"malformed stream event: {data[:120]}") from None
    if not isinstance(event, dict):
        raise Retryable(f"malformed stream event: {data[:120]}")
    if event.get("error"):
        raise Fatal(f"server error in stream: {str(event['error'])[:200]}")
    choices = event.get("choices")
    if not choices:  # none, or a usage-only chunk
        return ""
    if not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise Retryable(f"malformed stream event: {data[:120]}")
    delta = choices[0].get("delta") or {}
    if not isinstance(delta, dict) or not isinstance(delta.get("content") or "", str):
        raise Retryable(f"malformed stream event: {data[:120]}")
    return delta.get("content") or ""


def from_agent_spec(spec: Any) -> OpenAIChatLLM:
    """The `openai` backend of agents.toml: the key is read from the variable `api_key_env` names."""
    key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    return OpenAIChatLLM(spec.model, spec.base_url, key, timeout=spec.timeout, retries=spec.retries,
                         concurrency=spec.concurrency)
