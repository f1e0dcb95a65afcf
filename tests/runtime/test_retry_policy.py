"""runtime.http's RetryPolicy, the one retry policy of morkit's HTTP clients, and the TRL reward client on it."""

from __future__ import annotations

import asyncio
import functools
import types

import pytest

from morkit.core.errors import MorkitError
from morkit.runtime import http
from morkit.runtime.http import Deadline, Fatal, Retryable, RetryPolicy


class Clock:
    """A fake clock for runtime.http's deadlines: `sleep` records each pause and moves the time on by it."""

    def __init__(self):
        self.now, self.pauses = 0.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """A Clock that runtime.http's Deadlines read (time.monotonic there, and nowhere else)."""
    fake = Clock()
    monkeypatch.setattr(http, "time", types.SimpleNamespace(monotonic=fake.monotonic))
    return fake


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


def test_pauses_go_to_the_sleep_given(clock):
    policy = RetryPolicy(retries=3, backoff_s=0.5, cap_s=1.5, sleep=clock.sleep)
    with pytest.raises(Retryable, match="3"):
        run(policy, [Retryable(str(i)) for i in range(4)])
    assert clock.pauses == [0.5, 1.0, 1.5]  # doubling up to the cap, after each failure but the last


def test_no_attempt_starts_that_could_not_start_before_the_deadline(clock):
    policy = RetryPolicy(retries=9, backoff_s=0.2, sleep=clock.sleep)
    with pytest.raises(Retryable) as info:
        run(policy, [Retryable(str(i)) for i in range(10)], Deadline.after(0.5))
    assert clock.pauses == [0.2]  # 0.2 s, then a 0.4 s pause would end past it: stop at once
    assert str(info.value) == "1" and policy.stopped_early(2)


def test_the_async_attempts_pause_without_blocking():
    tries: list[tuple[str, int]] = []
    pauses: list[float] = []

    async def pause(seconds: float) -> None:  # records the pause and lets the other coroutine run meanwhile
        pauses.append(seconds)
        await asyncio.sleep(0)

    async def flaky(name: str, policy: RetryPolicy) -> int:
        async for attempt in policy.async_attempts():
            with attempt:
                tries.append((name, attempt.retry_state.attempt_number))
                if attempt.retry_state.attempt_number < 3:
                    raise Retryable("again")
                return attempt.retry_state.attempt_number
        raise AssertionError("unreachable")

    async def both() -> list[int]:
        return list(await asyncio.gather(flaky("a", RetryPolicy(3, 0.1, sleep=pause)),
                                         flaky("b", RetryPolicy(3, 0.1, sleep=pause))))

    assert asyncio.run(both()) == [3, 3]
    assert pauses == [0.1, 0.1, 0.2, 0.2]  # 0.1 + 0.2 s each, side by side: each pause lets the other try
    assert tries == [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3), ("b", 3)]


def test_the_async_attempts_sleep_on_the_event_loop_by_default(monkeypatch):
    pauses: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded(seconds: float, *args) -> None:
        pauses.append(seconds)
        await real_sleep(0)

    async def flaky() -> int:
        async for attempt in RetryPolicy(2, 0.25).async_attempts():
            with attempt:
                if attempt.retry_state.attempt_number < 3:
                    raise Retryable("again")
                return attempt.retry_state.attempt_number
        raise AssertionError("unreachable")

    monkeypatch.setattr(asyncio, "sleep", recorded)
    assert asyncio.run(flaky()) == 3 and pauses == [0.25, 0.5]


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


def test_the_trl_client_stops_at_its_timeout(clock, monkeypatch):
    from morkit.integrations import trl

    monkeypatch.setattr(trl, "RetryPolicy", functools.partial(RetryPolicy, sleep=clock.sleep))
    got, client = trl_post([Reply(503, {"error": "busy"})] * 4, retries=3, timeout_s=0.5)
    assert client.posts == 1 and clock.pauses == []  # a 1 s pause would end past the 0.5 s
    assert "within 0.5 s (timeout_s; 4 tries at most): 503: busy" in str(got)
    got, client = trl_post([Reply(503, {"error": "busy"})] * 4, retries=3, timeout_s=2.5)
    assert client.posts == 2 and clock.pauses == [1.0]  # 1 s fits in 2.5 s, the next 2 s would not
