"""Stand-ins for the serving engine (control flow only) and helpers that run the real app on 127.0.0.1:
`live` serves an engine under uvicorn in a thread; the engines answer at once or hold every call until released."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

import httpx

from morkit.services.serving.limits import ServeLimits
from morkit.services.serving.server import make_server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def live(engine, limits=ServeLimits(), **options):
    """The real app under uvicorn in a background thread, on a port it binds itself; yields its base URL."""
    server = make_server(engine, limits, port=0, **options)
    port = server.port
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


class BlockingEngine:
    """Holds every engine call until released, and records which requests the engine saw."""

    cache = None

    def __init__(self):
        self.release = threading.Event()
        self.running = threading.Event()
        self.seen: list[str] = []

    def health(self):
        return {"status": "ok"}

    def run(self, jobs):
        self.seen += [q.id for job in jobs for q in job]
        self.running.set()
        self.release.wait(30)

        class Done:
            def __init__(self, qid):
                self.qid = qid

            def to_json(self):
                return {"id": self.qid}

        return [[Done(q.id) for q in job] for job in jobs]


class InstantEngine:
    """Answers every job at once with zero scores, and counts the queries it was given."""

    cache = None

    def __init__(self):
        self.seen = 0

    def health(self):
        return {"status": "ok"}

    def run(self, jobs):
        self.seen += sum(len(job) for job in jobs)

        class Ranked:
            def __init__(self, query):
                self.query, self.scores = query, [0.0] * len(query.candidates)

            def to_json(self):
                return {"id": self.query.id, "best_index": 0}

        return [[Ranked(q) for q in job] for job in jobs]


def rank_body(qid: str, candidates: int = 1, text: str = "a") -> dict:
    return {"queries": [{"id": qid, "question": "q", "candidates": [{"text": text}] * candidates}]}


def one_line_error(reply: httpx.Response) -> str:
    error = reply.json()["error"]
    assert isinstance(error, str) and "\n" not in error and error
    return error


def wait_until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)
