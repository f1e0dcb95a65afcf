"""runtime.http's RetryPolicy, the one retry policy of morkit's HTTP clients, and the TRL reward client on it."""

from __future__ import annotations

import asyncio
import time

import pytest

from morkit.core.errors import MorkitError
from morkit.runtime.http import Deadline, Fatal, Retryable, RetryPolicy


def run(policy: RetryPolicy, outcomes: list, deadline: Deadline | None = None) -> tuple[object, int]:
    """Attempts of `policy` until one returns: each raises or returns the next outcome; (result, attempts)."""
    tries = 0
    for attempt in policy.attempts(deadline):
        with attempt:
            tries = attempt.retry_state.attempt_number
            outcome = outcomes[tries - 1]
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome, tries
    raise AssertionError("unreachable")


def test_only_retryable_failures_are_tried_again_up_to_the_retries():
    policy = RetryPolicy(retries=2, backoff_s=0.0)
    assert run(policy, [Retryable("a"), Retryable("b"), "ok"]) == ("ok", 3)
    with pytest.raises(Retryable, match="c"):  # the last failure itself, after 1 + 2 tries
        run(policy, [Retryable("a"), Retryable("b"), Retryable("c"), "never"])
    with pytest.raises(Fatal):
        run(policy, [Fatal("no"), "never"])
    with pytest.raises(KeyError):  # a bug is not retried either
        run(policy, [KeyError("bug"), "never"])


def test_pauses_double_up_to_the_cap():
    policy = RetryPolicy(retries=5, backoff_s=0.5, cap_s=3.0)
    assert [policy.pause(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert RetryPolicy(retries=1, backoff_s=1.0).pause(8) == 128.0


def test_no_attempt_starts_that_could_not_start_before_the_deadline():
    policy = RetryPolicy(retries=9, backoff_s=0.2)
    started = time.monotonic()
    with pytest.raises(Retryable) as info:
        run(policy, [Retryable(str(i)) for i in range(10)], Deadline.after(0.5))
    assert time.monotonic() - started < 0.45  # 0.2 s, then a 0.4 s pause would end past it: stop at once
    assert str(info.value) == "1" and policy.stopped_early(2)


def test_the_async_attempts_pause_without_blocking():
    async def flaky(policy: RetryPolicy) -> int:
        async for attempt in policy.async_attempts():
            with attempt:
                if attempt.retry_state.attempt_number < 3:
                    raise Retryable("again")
                return attempt.retry_state.attempt_number
        raise AssertionError("unreachable")

    async def both() -> list[int]:
        return list(await asyncio.gather(flaky(RetryPolicy(3, 0.1)), flaky(RetryPolicy(3, 0.1))))

    started = time.monotonic()
    assert asyncio.run(both()) == [3, 3]
    assert time.monotonic() - started < 0.6  # 0.1 + 0.2 s each, side by side


class Reply:
    def __init__(self, status: int, doc: dict):
        self.status_code, self.doc, self.text = status, doc, str(doc)

    def json(self) -> dict:
        return self.doc


class Scripted:
    """An httpx.Client stand-in that answers each POST with the next reply (an exception is raised)."""

    def __init__(self, replies: list):
        self.replies, self.posts = list(replies), 0

    def post(self, url: str, json: dict, timeout: float):
        self.posts += 1
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply


def trl_post(replies: list, **options) -> tuple[object, Scripted]:
    from morkit.integrations.trl import RoutedReward

    reward = RoutedReward(url="http://127.0.0.1:9", api_key="k", **options)
    reward._client = client = Scripted(replies)
    try:
        return reward._post({}, Deadline.after(reward.timeout_s)), client
    except MorkitError as err:
        return err, client


def test_the_trl_client_retries_503_504_and_httpx_errors_and_nothing_else(monkeypatch):
    import httpx

    monkeypatch.setattr(RetryPolicy, "pause", lambda self, n: 0.0)
    got, client = trl_post([Reply(503, {"error": "busy"}), httpx.ConnectError("refused"), Reply(504, {}),
                            Reply(200, {"rewards": [1.0]})], retries=3)
    assert got == {"rewards": [1.0]} and client.posts == 4
    got, client = trl_post([Reply(503, {"error": "busy"})] * 3, retries=2)
    assert client.posts == 3 and str(got) == ("http://127.0.0.1:9/get_reward gave no rewards within 300 s "
                                              "(timeout_s; 3 tries at most): 503: busy")
    got, client = trl_post([Reply(400, {"error": "bad"}), Reply(200, {})], retries=3)
    assert client.posts == 1 and str(got) == "http://127.0.0.1:9/get_reward answered 400: bad"
    got, client = trl_post([Reply(401, {"error": "no"})], retries=3)
    assert client.posts == 1 and "answered 401: no (the api_key given is not the server's)" in str(got)


def test_the_trl_client_stops_at_its_timeout():
    started = time.monotonic()
    got, client = trl_post([Reply(503, {"error": "busy"})] * 4, retries=3, timeout_s=0.5)
    assert client.posts == 1 and time.monotonic() - started < 0.4  # a 1 s pause would end past the 0.5 s
    assert "within 0.5 s (timeout_s; 4 tries at most): 503: busy" in str(got)
