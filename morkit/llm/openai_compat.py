"""An `LLM` served by any OpenAI-compatible `/chat/completions` endpoint (vLLM, llama.cpp, OpenAI, ...) through the
`openai` SDK's async client: bounded concurrency, timeouts, runtime.http's retry policy, `chat_partial` keeping the
successes, a streamed `stream`. Nothing connects until a method is called; docs: Scoring and backends, LLM backends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
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
    Deadline,
    Fatal,
    Retryable,
    RetryPolicy,
    by_index,
    check_content_type,
    checked_api_key,
    httpx_module,
    iterate_in_thread,
    json_document,
    redacted,
    run_sync,
    status_failure,
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
    """Chat completions from an OpenAI-compatible server; base_url/api_key default to $OPENAI_BASE_URL/$OPENAI_API_KEY.

    Args:
        model: The model name sent in every request.
        base_url: The API root (the part before `/chat/completions`); None is $OPENAI_BASE_URL, else
            http://127.0.0.1:8000/v1.
        api_key: Sent as a Bearer token; None is $OPENAI_API_KEY (no header when neither is set). A key with
            whitespace, a control or a non-ASCII character is refused (InputError), since no header can carry it.
        timeout: Seconds one request of `chat` (one read of `stream`) may take.
        retries: Retries of a request after a transient failure or a malformed reply (0 or more).
        concurrency: Requests in flight at once (positive).
        backoff: Seconds before the first retry; each further retry waits twice as long.
        extra_body: Fields added to every request body (they override morkit's own).
        name: The name completions and errors report; None is `model`.
        stream_timeout: Seconds a whole `stream` may take, retries included.

    Raises:
        InputError: A number is out of range, or the key has a character no HTTP header can carry (the message
            names where the key came from, never the key).
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
        source = "api_key=" if api_key is not None else "$OPENAI_API_KEY"
        self.api_key = checked_api_key(api_key if api_key is not None else os.environ.get("OPENAI_API_KEY") or None,
                                       source)
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

    @property
    def _policy(self) -> RetryPolicy:
        return RetryPolicy(self.retries, self.backoff, name=self.name)

    def _client(self, connections: int) -> Any:
        """The SDK's async client for one call (its own connection pool, on this call's event loop): no SDK
        retries, since morkit's policy also retries malformed replies and stops at the call's deadline; proxies
        from the environment ignored, as for every morkit client."""
        import openai

        httpx = httpx_module()
        if self._ssl is None and self.base_url.startswith("https:"):
            self._ssl = httpx.create_ssl_context(trust_env=False)  # once: building one costs ~0.2 s
        http = openai.DefaultAsyncHttpxClient(
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            trust_env=False, verify=self._ssl or False)
        # The SDK insists on a key; without one, `_arguments` leaves the Authorization header out.
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key or "none", max_retries=0,
                                  timeout=self.timeout, http_client=http)

    def _arguments(self, conversation: Conversation, params: SamplingParams, n: int, seed: int | None
                   ) -> dict[str, Any]:
        """`chat.completions.create`'s keyword arguments: the request body, `extra_body` and the auth header."""
        import openai

        arguments: dict[str, Any] = {
            "model": self.model, "messages": [dict(m) for m in conversation], "n": n,
            "temperature": params.temperature, "top_p": params.top_p, "max_tokens": params.max_tokens,
        }
        if params.stop:
            arguments["stop"] = list(params.stop)
        if seed is not None:
            arguments["seed"] = seed
        if params.reasoning_effort is not None:
            arguments["reasoning_effort"] = params.reasoning_effort
        if params.presence_penalty:
            arguments["presence_penalty"] = params.presence_penalty
        arguments["extra_body"] = dict(self.extra_body)  # merged over the fields above, as the SDK sends it
        if not self.api_key:
            arguments["extra_headers"] = {"Authorization": openai.Omit()}
        return arguments

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

    async def _post(self, client: Any, arguments: dict[str, Any], timeout: float) -> _Reply:
        """One request, over within `timeout` in all; the reply read from its bytes, which `_parse` checks (the
        SDK's own models take any shape)."""
        self.requests_sent += 1
        with _failures(f"timed out after {timeout:.3g}s", self.api_key):
            raw = await asyncio.wait_for(
                client.chat.completions.with_raw_response.create(**arguments, timeout=timeout), timeout)
        if raw.status_code != 200:  # the SDK takes any 2xx; morkit's clients take 200 alone
            raise status_failure(raw.status_code, raw.http_response.text)
        check_content_type(self.url, raw.headers.get("content-type"), "application/json")
        return self._parse(raw.http_response.content, arguments["n"])

    async def _request(self, client: Any, sem: asyncio.Semaphore, arguments: dict[str, Any],
                       deadline: Deadline | None) -> tuple[_Reply | None, str, int]:
        """One request with its retries, all before `deadline`: (reply or None, why the last try failed, tries)."""
        reason, tries = "", 0
        try:
            async for attempt in self._policy.async_attempts(deadline):
                with attempt:
                    async with sem:
                        timeout = self.timeout if deadline is None else min(self.timeout, deadline.left())
                        if timeout <= 0:  # the deadline passed while this request waited for its turn
                            return None, _past(deadline, reason), tries  # type: ignore[arg-type]
                        tries = attempt.retry_state.attempt_number
                        try:
                            return await self._post(client, arguments, timeout), "", tries
                        except Retryable as err:
                            reason = str(err)
                            raise
        except Fatal as err:
            return None, str(err), tries
        except Retryable:
            past = deadline is not None and self._policy.stopped_early(tries)
            return None, _past(deadline, reason) if past else reason, tries  # type: ignore[arg-type]
        except Exception as err:  # noqa: BLE001 - a bug in one request must not lose the other conversations
            return None, redacted(f"unexpected {type(err).__name__}: {str(err)[:200]}", [self.api_key]), tries
        raise AssertionError("unreachable: the retry policy returns or raises")  # pragma: no cover

    async def _conversation(self, client: Any, sem: asyncio.Semaphore, index: int, conversation: Conversation,
                            params: SamplingParams, deadline: Deadline | None) -> Completion | ConversationError:
        texts: list[str] = []
        reasons: list[str] = []
        prompt_tokens = completion_tokens = attempts = 0
        while len(texts) < params.n:  # a server that ignores n answers fewer; ask again for the rest
            seed = None if params.seed is None else params.seed + len(texts)  # top-ups get fresh samples
            reply, reason, tries = await self._request(
                client, sem, self._arguments(conversation, params, params.n - len(texts), seed), deadline)
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
        sem = asyncio.Semaphore(self.concurrency)
        deadline = Deadline.after(params.timeout_s)
        async with self._client(self.concurrency) as client:
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
        arguments = self._arguments(conversation, params, 1, params.seed)
        seconds = min(self.stream_timeout, params.timeout_s or math.inf)
        pieces = iterate_in_thread(lambda put: self._stream_async(arguments, seconds, put), name="morkit-llm-stream")
        with contextlib.closing(pieces):
            yield from cut_stream(pieces, params.stop)

    async def _stream_async(self, arguments: dict[str, Any], seconds: float, put: Callable[[str], None]) -> None:
        """Put the stream's content pieces; LLMError when it fails or is not over within `seconds`."""
        try:
            async with asyncio.timeout(seconds):
                await self._stream_attempts(arguments, put)
        except TimeoutError:
            raise LLMError(f"LLM {self.name!r} stream: not over within its {seconds:.3g}s deadline") from None

    async def _stream_attempts(self, arguments: dict[str, Any], put: Callable[[str], None]) -> None:
        """The streamed request with its retries, which stop once a piece has been put."""
        started, tries = False, 0

        def emit(piece: str) -> None:
            nonlocal started
            started = True
            put(piece)

        async with self._client(1) as client:
            try:
                async for attempt in self._policy.async_attempts():
                    with attempt:
                        tries = attempt.retry_state.attempt_number
                        try:
                            return await self._stream_once(client, arguments, emit)
                        except Retryable as err:
                            if started:  # the reader has pieces: another try would repeat them
                                raise LLMError(f"LLM {self.name!r} stream: {err} ({tries} attempts)") from None
                            raise
            except Fatal as err:
                raise LLMError(f"LLM {self.name!r} stream: {err}") from None
            except Retryable as err:
                raise LLMError(f"LLM {self.name!r} stream: {err} ({tries} attempts)") from None

    async def _stream_once(self, client: Any, arguments: dict[str, Any], emit: Callable[[str], None]) -> None:
        """Each chunk's content to `emit` until the stream ends; errors as Retryable/Fatal."""
        import openai

        self.requests_sent += 1
        with _failures(f"timed out after {self.timeout:g}s without data", self.api_key):
            async with client.chat.completions.with_streaming_response.create(**arguments, stream=True) as resp:
                if resp.status_code != 200:  # the SDK takes any 2xx; morkit's clients take 200 alone
                    raise status_failure(resp.status_code, (await resp.read()).decode("utf-8", "replace"))
                check_content_type(self.url, resp.headers.get("content-type"), "text/event-stream")
                try:
                    async for chunk in await resp.parse():
                        content = _chunk_content(chunk)
                        if content:
                            emit(content)
                except ValueError as err:  # an event that is not JSON
                    raise Retryable(f"malformed stream event: {str(err)[:120]}") from None
                except openai.APIError as err:
                    if isinstance(err, openai.APIConnectionError):
                        raise
                    raise Fatal(f"server error in stream: {str(err.body)[:200]}") from None


@contextlib.contextmanager
def _failures(timed_out: str, api_key: str | None) -> Iterator[None]:
    """The SDK's (and asyncio's) request failures as Retryable or Fatal: timeouts and connection errors
    Retryable, a non-200 status by `status_failure`; `api_key` never shown (an error may quote the header)."""
    import openai

    try:
        yield
    except (openai.APITimeoutError, TimeoutError):
        raise Retryable(timed_out) from None
    except openai.APIConnectionError as err:
        cause = err.__cause__ or err
        raise Retryable(redacted(f"connection error: {type(cause).__name__}: {cause}", [api_key])) from None
    except openai.APIStatusError as err:
        raise status_failure(err.status_code, redacted(err.response.text, [api_key])) from None


# -- reading replies --------------------------------------------------------------------------------

def _past(deadline: Deadline, reason: str) -> str:
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


def _chunk_content(chunk: Any) -> str:
    """The text of one stream chunk (`choices[0].delta.content`; "" for none). The SDK builds chunks without
    checking their shape, so a wrong one is checked here: Retryable."""
    from openai.types.chat import ChatCompletionChunk

    if not isinstance(chunk, ChatCompletionChunk):
        raise Retryable(f"malformed stream event: {str(chunk)[:120]}")
    choices = getattr(chunk, "choices", None)
    if not choices:  # none, or a usage-only chunk
        return ""
    delta = getattr(choices[0], "delta", None) if isinstance(choices, list) else None
    content = getattr(delta, "content", None)
    if delta is None or not isinstance(content or "", str):
        raise Retryable(f"malformed stream event: {str(chunk)[:120]}")
    return content or ""


def from_agent_spec(spec: Any) -> OpenAIChatLLM:
    """The `openai` backend of agents.toml: the key is read from the variable `api_key_env` names."""
    key = os.environ.get(spec.api_key_env) if spec.api_key_env else None
    checked_api_key(key, f"${spec.api_key_env} (agent {spec.name!r}'s api_key_env)")
    return OpenAIChatLLM(spec.model, spec.base_url, key, timeout=spec.timeout, retries=spec.retries,
                         concurrency=spec.concurrency)
