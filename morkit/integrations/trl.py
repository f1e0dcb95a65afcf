"""A TRL reward function backed by a pool's routed RM ensemble: `GRPOTrainer(reward_funcs=routed_reward(...))`.

It scores in this process or through `morkit serve`: the same engine, so the same rewards. TRL itself is not needed.
"""

from __future__ import annotations

from typing import Any, Sequence

from morkit.core import checks, settings
from morkit.core.errors import InputError, MorkitError
from morkit.llm.base import message_text
from morkit.runtime.http import Deadline, Retryable, RetryPolicy, checked_api_key, redacted


class RoutedReward:
    """A GRPO reward function: each completion's score under its prompt's routed ensemble.

    Backed by exactly one of `pool` (an in-process RoutingEngine, built on first call), `engine`, or `url` (a
    `morkit serve` server, sent `api_key` as a bearer token); docs/serving.md lists the options and defaults.

    Args:
        pool: A QuestionPool or a pool directory, scored in this process by a RoutingEngine built on first call.
        url: A `morkit serve` server's base URL, asked at `/get_reward`.
        engine: An already built RoutingEngine (or anything with its `rewards`).
        select: In process: the SelectOptions (`SelectOptions(method="fixed", rms=...)`: a fixed ensemble of pool
            RMs instead of routing; `budget=`, `costs=` and `cascade=` as `morkit rank` takes them); None is the
            defaults. A server applies its own (`morkit serve --budget ...`).
        scoring: In process: the ScoringOptions; None is the defaults.
        reference_column: A data set column passed as each completion's reference answer; None passes none.
        timeout_s: Seconds a server call may take in all, retries included.
        retries: Retries of a server request answered 503 or 504, or that fails with an httpx error.
        api_key: The server's bearer token; None uses $MORKIT_API_KEY with `url`. It must not be empty, nor hold
            whitespace, a control or a non-ASCII character.
        max_request_items: Completions per server request at most (a prompt's completions stay together).
        name: The name TRL logs the reward under (`__name__`).

    Raises:
        InputError: Not exactly one of `pool`, `url` and `engine` is given, `api_key` is empty or has a character
            no HTTP header can carry (the key is not shown), or a number is out of range.
    """

    def __init__(self, *, pool: Any = None, url: str | None = None, engine: Any = None,
                 select: Any = None, scoring: Any = None,
                 reference_column: str | None = None, timeout_s: float = 300.0, retries: int = 3,
                 api_key: str | None = None, max_request_items: int = 1024, name: str = "morkit_routed_reward"):
        if sum(x is not None for x in (pool, url, engine)) != 1:
            raise InputError("give exactly one of pool= (score in this process), url= (a morkit serve server) "
                             "or engine=")
        if api_key is not None and not api_key:
            raise InputError("api_key= must not be empty (leave it out to use $MORKIT_API_KEY)")
        # $MORKIT_API_KEY only for a server (an empty one is refused there, as api_key="" is here)
        if api_key is not None:
            self._api_key = checked_api_key(api_key, "api_key=")
        else:
            self._api_key = None if url is None else checked_api_key(settings.api_key(), "$MORKIT_API_KEY")
        self._pool, self._engine, self._client = pool, engine, None
        self.url = url.rstrip("/") if url else None
        self._select, self._scoring = select, scoring
        self.reference_column = reference_column
        self.timeout_s = checks.positive(timeout_s, "timeout_s")
        self.retries = checks.non_negative_int(retries, "retries")
        self.max_request_items = checks.positive_int(max_request_items, "max_request_items")
        self.__name__ = name  # TRL logs each reward function under its __name__

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None,
                 **columns: Any) -> list[float | None]:
        if len(prompts) != len(completions):
            raise InputError(f"{len(prompts)} prompts for {len(completions)} completions")
        questions = [message_text(p, role="user") for p in prompts]
        answers = [message_text(c, role="assistant") for c in completions]
        references = None
        if self.reference_column is not None:
            if self.reference_column not in columns:
                raise InputError(f"the data set has no column {self.reference_column!r} (reference_column); "
                                 f"its columns: {', '.join(sorted(columns)) or 'none'}")
            references = [None if v is None else str(v) for v in columns[self.reference_column]]
        if self.url is not None:
            return self._remote(questions, answers, references)["rewards"]
        return self._local_engine().rewards(questions, answers, references)["rewards"]

    def _local_engine(self) -> Any:
        if self._engine is None:
            from morkit.question_pool.pool import QuestionPool, load_pool
            from morkit.reward_models.options import ScoringOptions
            from morkit.selection.methods import SelectOptions
            from morkit.services.serving.engine import RoutingEngine

            pool = self._pool if isinstance(self._pool, QuestionPool) else load_pool(self._pool)
            self._engine = RoutingEngine(pool, self._select or SelectOptions(), self._scoring or ScoringOptions())
        return self._engine

    def _remote(self, questions: list[str], answers: list[str], references: list[str | None] | None) -> dict:
        """The server's rewards for every completion, asked in requests of at most `max_request_items`
        completions (a prompt's completions stay together), within `timeout_s` in all, retries included."""
        import httpx

        if self._client is None:
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            self._client = httpx.Client(timeout=self.timeout_s, headers=headers)
        deadline = Deadline.after(self.timeout_s)
        rewards: list[float | None] = [None] * len(answers)
        for part in _requests_by_prompt(questions, self.max_request_items):
            body = {"query": [questions[i] + answers[i] for i in part], "prompts": [questions[i] for i in part],
                    "labels": None if references is None else [references[i] for i in part]}
            for i, reward in zip(part, self._post(body, deadline)["rewards"]):
                rewards[i] = reward
        return {"rewards": rewards}

    def _post(self, body: dict, deadline: Deadline) -> dict:
        """One request with its retries (runtime.http's RetryPolicy: 1 s, doubling, at most 10 s between tries)
        on an httpx error or a 503/504, all before `deadline`; any other status ends the call at once."""
        import httpx

        last = ""
        try:
            for attempt in RetryPolicy(self.retries, 1.0, cap_s=10.0, name=self.__name__).attempts(deadline):
                with attempt:
                    if (left := deadline.left()) <= 0:
                        break
                    try:
                        reply = self._client.post(f"{self.url}/get_reward", json=body, timeout=left)
                    except httpx.HTTPError as exc:
                        last = redacted(f"{type(exc).__name__}: {exc}", [self._api_key])  # it may quote a header
                        raise Retryable(last) from None
                    if reply.status_code == 200:
                        return reply.json()
                    reason = _reason(reply)
                    if reply.status_code == 401:
                        raise MorkitError(f"{self.url}/get_reward answered 401: {reason} ("
                                          + ("the api_key given is not the server's)" if self._api_key else
                                             "give api_key= or set MORKIT_API_KEY)"))
                    if reply.status_code not in (503, 504):
                        raise MorkitError(f"{self.url}/get_reward answered {reply.status_code}: {reason}")
                    last = f"{reply.status_code}: {reason}"
                    raise Retryable(last)
        except Retryable:
            pass  # out of tries, or of time
        raise MorkitError(f"{self.url}/get_reward gave no rewards within {self.timeout_s:g} s "
                          f"(timeout_s; {self.retries + 1} tries at most): {last or 'no time left'}")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._engine is not None and self._pool is not None:  # built here: ours to close
            self._engine.close()
            self._engine = None


def _requests_by_prompt(prompts: Sequence[str], limit: int) -> list[list[int]]:
    """Indices of the completions grouped into requests of at most `limit` each, a prompt's group never split
    (a group larger than `limit` goes alone)."""
    groups: dict[str, list[int]] = {}
    for i, prompt in enumerate(prompts):
        groups.setdefault(prompt, []).append(i)
    requests: list[list[int]] = []
    for group in groups.values():
        if requests and len(requests[-1]) + len(group) <= limit:
            requests[-1].extend(group)
        else:
            requests.append(list(group))
    return requests


def _reason(reply: Any) -> str:
    try:
        return str(reply.json().get("error", reply.text))
    except ValueError:
        return reply.text[:200]


def routed_reward(pool: Any = None, *, url: str | None = None, **options: Any) -> RoutedReward:
    """The reward function for `GRPOTrainer(reward_funcs=...)`: `routed_reward("pool/")` scores in this process,
    `routed_reward(url="http://127.0.0.1:8000", api_key=...)` through `morkit serve` (the key defaults to
    $MORKIT_API_KEY). Options: see RoutedReward.

    Args:
        pool: A QuestionPool or a pool directory, to score in this process.
        url: A `morkit serve` server's base URL, to score there instead.
        **options: The other keyword arguments of RoutedReward (`api_key`, `reference_column`, `select`, ...).

    Returns:
        The reward function: call it with TRL's `prompts` and `completions` to get one reward per completion.

    Raises:
        InputError: Not exactly one of `pool`, `url` (or `engine`) is given, or an option is invalid.
    """
    return RoutedReward(pool=pool, url=url, **options)
