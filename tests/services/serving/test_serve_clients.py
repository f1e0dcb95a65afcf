"""`morkit serve` against slow, large and oversized clients, and the TRL client's limits (a review's findings)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from fakes.serving import InstantEngine, live, one_line_error, rank_body, wait_until

from morkit.integrations.trl import _requests_by_prompt, routed_reward
from morkit.services.serving.limits import ServeLimits


class LengthEngine(InstantEngine):
    """Scores each candidate by the length of its text, so a reward shows which completion it belongs to."""

    def run(self, jobs):
        ranked = super().run(jobs)
        for job in ranked:
            for r in job:
                r.scores = [float(len(c.text)) for c in r.query.candidates]
        return ranked


def _raw(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def test_a_body_of_many_small_values_is_413_before_any_work():
    """`[{}, {}, ...]` is 24 times its bytes in memory: values are capped, not only bytes and characters."""
    fake = InstantEngine()
    body = rank_body("a")
    body["queries"][0]["junk"] = [{}] * 5000
    with live(fake, ServeLimits(max_json_values=4096)) as url:
        reply = httpx.post(f"{url}/v1/rank", json=body, timeout=30)
        nested = httpx.post(f"{url}/v1/rank", content=b"[" * 100_000 + b"]" * 100_000, timeout=30)
        assert httpx.post(f"{url}/v1/rank", json=rank_body("b"), timeout=30).status_code == 200
    with live(fake) as url:  # 100,000 values are within the default limit; their nesting is not
        deep = httpx.post(f"{url}/v1/rank", content=b"[" * 100_000 + b"]" * 100_000, timeout=30)
    assert reply.status_code == 413 and "--max-json-values" in one_line_error(reply) and fake.seen == 1
    assert nested.status_code == 413 and "100000 JSON values" in one_line_error(nested)
    assert deep.status_code == 400 and "nested" in one_line_error(deep)


@pytest.mark.slow
def test_a_slow_sender_holds_only_what_it_sent_and_gets_408():
    fake = InstantEngine()
    with live(fake, ServeLimits(body_timeout_s=1.5)) as url:
        slow = _raw(url)
        slow.sendall(b"POST /v1/rank HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 10000000\r\n\r\n" + b"{" + b" " * 99)
        wait_until(lambda: httpx.get(f"{url}/health").json()["held_bytes"] == 100)  # not the 10 MB it declared
        assert httpx.post(f"{url}/v1/rank", json=rank_body("a"), timeout=30).status_code == 200
        slow.settimeout(10)
        answer = slow.recv(4096).decode()
        slow.close()
        wait_until(lambda: httpx.get(f"{url}/health").json()["held_bytes"] == 0)
    assert answer.startswith("HTTP/1.1 408") and "--body-timeout" in answer


def test_a_header_flood_is_cut_off_and_the_server_goes_on():
    with live(InstantEngine()) as url:
        flood = _raw(url)
        flood.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ")
        try:
            for _ in range(64):  # 4 MiB of one header; a bounded parser refuses it well before the end
                flood.sendall(b"a" * 65536)
            flood.settimeout(10)
            answer = flood.recv(4096)
        except OSError:  # closed on us
            answer = b""
        flood.close()
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
    assert answer == b"" or answer.startswith(b"HTTP/1.1 4")


def test_the_trl_client_splits_by_prompt_and_keeps_the_order():
    assert _requests_by_prompt(["a", "a", "b", "c", "c", "c", "b"], 3) == [[0, 1], [2, 6], [3, 4, 5]]
    assert _requests_by_prompt(["a"] * 5, 2) == [[0, 1, 2, 3, 4]]  # a group is never split
    prompts = ["P1 ", "P2 ", "P1 ", "P3 ", "P2 "]
    completions = ["x", "yy", "zzz", "wwww", "vvvvv"]
    with live(LengthEngine()) as url:
        rewards = routed_reward(url=url, max_request_items=2)(prompts=prompts, completions=completions)
    assert rewards == [1.0, 2.0, 3.0, 4.0, 5.0]  # each completion its own score, over three requests


@pytest.mark.slow
def test_the_trl_client_gives_up_within_its_timeout(monkeypatch):
    with socket.socket() as silent:  # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        started = time.monotonic()
        with pytest.raises(Exception, match="within 1.5 s"):
            routed_reward(url=f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=1.5, retries=5)(
                prompts=["p"], completions=["a"])
    assert time.monotonic() - started < 10
