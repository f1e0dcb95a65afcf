"""A reward model served by `vllm serve --runner pooling` servers over their `/pooling` API, and the handle that
scores a registered RM on the servers serving it under its name (`--url`). Requests are bounded, retried by
runtime.http's RetryPolicy, and fail alone: `score_partial` keeps every other pair (docs: Scoring, vLLM servers).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Sequence

from morkit.core import checks
from morkit.core.errors import InputError, PartialScoreError
from morkit.core.types import Score
from morkit.reward_models.backends.engine_rm import EngineRM, engine_spec
from morkit.reward_models.backends.pooling_io import (
    KIND_TASK,
    MalformedOutput,
    Render,
    chat_render,
    check_kind,
    expected_rows,
    finite,
    to_score,
)
from morkit.runtime.http import (
    Fatal,
    Retryable,
    RetryPolicy,
    by_index,
    checked_headers,
    httpx_module,
    json_document,
    post_json,
    run_sync,
)
from morkit.reward_models.handles import RMHandle
from morkit.reward_models.truncation import Truncation

log = logging.getLogger(__name__)

_UNREADABLE = (ValueError, TypeError, IndexError, KeyError, ArithmeticError)
"""Besides MalformedOutput, what reading a reply's values may raise: an RM's own `finish` given a row of
the wrong length (IndexError, numpy's ValueError), or arithmetic on its values (ArithmeticError)."""


@dataclass(frozen=True)
class PairFailure:
    """One pair that could not be scored: its index in the batch, why, and where it was last tried."""

    index: int
    reason: str
    url: str
    attempts: int

    def __str__(self) -> str:
        return f"#{self.index}: {self.reason} ({self.url}, {self.attempts} attempts)"


class RemoteScoringError(PartialScoreError):
    """Some pairs failed after all retries; `failures` names them, `scores` keeps the rest (None = failed)."""

    def __init__(self, name: str, failures: list[PairFailure], scores: list[Score | None], shown: int = 20):
        listed = "; ".join(str(f) for f in failures[:shown])
        more = f"; ... and {len(failures) - shown} more" if len(failures) > shown else ""
        super().__init__(
            f"reward model {name!r}: {len(failures)} of {len(scores)} pairs failed "
            f"(indices {[f.index for f in failures]}): {listed}{more}",
            scores,
        )
        self.failures = failures


class RemoteRewardModel:
    """Scores pairs through vLLM `/pooling` servers. `render` gives the chat-templated prompt (text or ids)."""

    def __init__(
        self,
        name: str,
        urls: Sequence[str],
        model: str,
        task: str = "classify",
        render: Render | None = None,
        *,
        tokenizer: Any = None,
        concurrency: int = 8,
        timeout_s: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        batch_size: int = 1,
        label: int | None = None,
        num_labels: int | None = None,
        step_token_id: int | None = None,
        reduction: str = "min",
        headers: dict[str, str] | None = None,
        finish: Any = None,
    ):
        if not urls:
            raise InputError(f"remote reward model {name!r} needs at least one server URL (urls=[...])")
        checks.positive_int(concurrency, "concurrency")
        checks.positive_int(batch_size, "batch_size")
        checks.non_negative_int(retries, "retries")
        checks.positive(timeout_s, "timeout_s")
        self.name = name
        self.task = check_kind(task)
        self.kind = "prm" if task == "step" else "orm"
        self.urls = [u.rstrip("/") for u in urls]
        self.model = model
        self._render = render
        self._tokenizer = tokenizer
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.batch_size = batch_size
        self.label = label if label is not None else (1 if task == "step" else 0)
        self.num_labels = num_labels if num_labels is not None else (2 if task == "step" else 1)
        self.step_token_id = step_token_id
        self.reduction = reduction
        self.headers = checked_headers(headers or {}, f"remote reward model {name!r}")
        self.finish = finish  # raw output -> Score, for RMs with their own output layout
        self.requests_sent = 0
        self._ssl: Any = None

    # -- prompts -------------------------------------------------------------------------------

    def render(self, question: str, answer: str) -> str | list[int]:
        if self._render is None:
            tok = self._tokenizer
            if tok is None:
                raise InputError(f"{self.name}: pass render= (or tokenizer=) to build prompts")
            if isinstance(tok, str):
                from transformers import AutoTokenizer

                tok = self._tokenizer = AutoTokenizer.from_pretrained(tok)
            self._render = chat_render(tok)
        return self._render(question, answer)

    # -- one request ---------------------------------------------------------------------------

    def _payload(self, prompts: list[str | list[int]]) -> dict[str, Any]:
        return {
            "model": self.model,
            "input": prompts[0] if len(prompts) == 1 else prompts,
            "task": KIND_TASK[self.task],
            "use_activation": False,
            "encoding_format": "float",
            "add_special_tokens": False,  # text prompts are already chat-templated (BOS included)
        }

    def _parse(self, body: bytes, prompts: list[str | list[int]]) -> list[Score]:
        """One Score per prompt, in order; Retryable when the reply is malformed in any way."""
        doc = json_document(body)
        data = doc.get("data")
        if not isinstance(data, list):
            raise Retryable(f"response has no 'data' list: {str(doc)[:120]}")
        if len(data) != len(prompts):
            raise Retryable(f"response has {len(data)} outputs for {len(prompts)} inputs")
        items = by_index(data, "pooling output", size=len(prompts))
        return [self._score(item, prompt) for item, prompt in zip(items, prompts)]

    def _score(self, item: dict[str, Any], prompt: str | list[int]) -> Score:
        """One output item's finite Score (the RM's own `finish`, else the pooling kind's reader)."""
        if "data" not in item:
            raise Retryable(f"malformed output item: {str(item)[:120]}")
        try:
            score = self.finish(item["data"]) if self.finish is not None else to_score(
                self.task, item["data"], label=self.label, num_labels=self.num_labels,
                expected_rows=expected_rows(prompt, self.task, self.step_token_id), reduction=self.reduction)
        except MalformedOutput as err:
            raise Retryable(f"malformed output: {err}") from None
        except _UNREADABLE as err:
            raise Retryable(f"malformed output ({type(err).__name__}: {str(err)[:120]})") from None
        if not finite(score):
            raise Retryable(f"non-finite score {score.value!r}")
        return score

    async def _post(self, client: Any, url: str, prompts: list[str | list[int]]) -> list[Score]:
        self.requests_sent += 1
        body = await post_json(client, url + "/pooling", self._payload(prompts), self.headers, self.timeout_s)
        return self._parse(body, prompts)

    async def _batch(self, client: Any, sem: asyncio.Semaphore, number: int, prompts: list[str | list[int]]
                     ) -> tuple[list[Score] | None, str, str, int]:
        """One batch with its retries (morkit's RetryPolicy), round-robin over the servers, a retry on the next
        one: (scores or None, why the last try failed, the server last tried, tries)."""
        url, tries = self.urls[number % len(self.urls)], 0
        try:
            async for attempt in RetryPolicy(self.retries, self.backoff_s, name=self.name).async_attempts():
                with attempt:
                    tries = attempt.retry_state.attempt_number
                    url = self.urls[(number + tries - 1) % len(self.urls)]
                    async with sem:
                        return await self._post(client, url, prompts), "", url, tries
        except (Fatal, Retryable) as err:
            return None, str(err), url, tries
        except Exception as err:  # noqa: BLE001 - a bug in one request must not lose the batch's other scores
            return None, f"unexpected {type(err).__name__}: {str(err)[:200]}", url, tries
        raise AssertionError("unreachable: the retry policy returns or raises")  # pragma: no cover

    async def _score_async(self, prompts: list[str | list[int]]) -> tuple[list[Score | None], list[PairFailure]]:
        httpx = httpx_module()
        sem = asyncio.Semaphore(self.concurrency)
        limits = httpx.Limits(max_connections=self.concurrency * len(self.urls),
                              max_keepalive_connections=self.concurrency * len(self.urls))
        groups = [list(range(i, min(i + self.batch_size, len(prompts)))) for i in range(0, len(prompts), self.batch_size)]
        if self._ssl is None and any(u.startswith("https:") for u in self.urls):
            self._ssl = httpx.create_ssl_context(trust_env=False)  # once: building one costs ~0.2 s
        async with httpx.AsyncClient(limits=limits, trust_env=False, verify=self._ssl or False) as client:
            results = await asyncio.gather(
                *(self._batch(client, sem, n, [prompts[i] for i in g]) for n, g in enumerate(groups)))
        scores: list[Score | None] = [None] * len(prompts)
        failures: list[PairFailure] = []
        for group, (got, reason, url, attempts) in zip(groups, results):
            if got is None:
                failures.extend(PairFailure(i, reason, url, attempts) for i in group)
            else:
                for i, s in zip(group, got):
                    scores[i] = s
        return scores, failures

    # -- RewardModel protocol ------------------------------------------------------------------

    def score_partial(self, pairs: Sequence[tuple[str, str]]) -> tuple[list[Score | None], list[PairFailure]]:
        """Scores aligned with `pairs` (None where a pair failed) and the failures, in index order."""
        return self.prompts_partial([self.render(q, a) for q, a in pairs])

    def prompts_partial(self, prompts: Sequence[str | list[int]]) -> tuple[list[Score | None], list[PairFailure]]:
        """`score_partial` for prompts already rendered."""
        if not prompts:
            return [], []
        started = time.perf_counter()
        out = run_sync(self._score_async(list(prompts)))
        log.debug("%s: %d prompts in %.2fs", self.name, len(prompts), time.perf_counter() - started)
        return out

    def score_prompts(self, prompts: Sequence[str | list[int]]) -> list[Score]:
        scores, failures = self.prompts_partial(prompts)
        if failures:
            raise RemoteScoringError(self.name, failures, scores)
        return scores  # type: ignore[return-value]

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        return self.score_prompts([self.render(q, a) for q, a in pairs])

    def health(self) -> dict[str, bool]:
        """Which servers answer GET /health with 200."""
        httpx = httpx_module()
        out = {}
        with httpx.Client(trust_env=False, timeout=self.timeout_s) as client:
            for url in self.urls:
                try:
                    out[url] = client.get(url + "/health").status_code == 200
                except httpx.HTTPError:
                    out[url] = False
        return out



class ServerHandle(RMHandle):
    """A model RM on the vLLM servers that serve it under its name (`--served-model-name NAME`)."""

    placement = "servers"

    def planned_truncation(self) -> Truncation:
        return self.options.truncation_for()

    def memory_need(self) -> None:
        return None  # the servers hold the weights

    def measured_device(self) -> str:
        return ""  # it scores on the servers

    def score_facts(self) -> dict[str, str | None]:
        """Engine `vllm` (what the servers run), dtype `served` (the one each server was started with, unknown
        here: its scores are not shared with an engine in this process), the truncation with the card's window."""
        return {"engine": "vllm", "dtype": "served", "truncation": self.key_truncation()}

    def load(self) -> Any:
        spec = engine_spec(self.card, self.options)
        client = RemoteRewardModel(self.name, self.options.servers.urls_for(self.name), self.name, task=spec.pooling,
                                   label=spec.label, num_labels=spec.num_labels, step_token_id=spec.step_token_id,
                                   reduction=self.options.reduction, finish=spec.finish,
                                   batch_size=self.options.servers.batch_size)
        return EngineRM(spec, client, self.truncation)
