"""One fake server on 127.0.0.1 for every HTTP test: OpenAI chat completions (JSON and SSE) and vLLM `/pooling`.

Real HTTP, so morkit's real clients are what the tests exercise; only the replies are scripted.

Chat (`POST /v1/chat/completions`): with `chat=fn`, every sample's text is `fn(messages)` (role-scripted
agents for CLI tests). Without it, choice i for a last message `content` is
"reply to <content> #<i> seed=<seed>", and markers in `content` make the server misbehave: HANG (sleeps
past the client timeout), SLOW_ONCE, FAIL500_ONCE, BADJSON_ONCE (first try only), BAD400, IGNORE_N
(one choice whatever `n` asks), RUNS_ON (the reply goes on past an "END" the server does not stop at).
Valid JSON of the wrong shape (every try): MIXED_INDEX (choice indices 0 and "1"), WORDY_USAGE
(prompt_tokens "many"), HUGE_USAGE (completion_tokens 1e400), OBJECT_CONTENT (content an object),
HTML_TYPE (a good reply labelled text/html).
Streamed replies come in fixed pieces; STALL pauses past the timeout after the first, TRICKLE before each;
KEEPALIVE sends only SSE comments for `keepalive_s`, HTML_TYPE a 200 text/html page, BAD_EVENT an event
whose `choices` is an object.

Pooling (`POST /pooling`): a text prompt scores len(text) / 10 (one classify logit). Markers: TIMEOUT
(sleeps past the client timeout), FAIL500 (always 500), FLAKY (500 on the first try only), WRONGLEN
(two values instead of one), BADJSON (not JSON), HUGE (a 401-digit integer), NAN (NaN), STRINDEX (the
item's index as a string), HTMLTYPE (a good reply labelled text/html). Override `pooling` for others.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

STREAM_PIECES = ["Hel", "lo wor", "ld. E", "N", "D more", " text"]


class FakeServer:
    def __init__(self, chat: Callable[[list[dict]], str] | None = None, *, delay_s: float = 0.0,
                 hang_s: float = 1.0, keepalive_s: float = 4.0):
        self.chat_reply, self.delay_s, self.hang_s, self.keepalive_s = chat, delay_s, hang_s, keepalive_s
        self.lock = threading.Lock()
        self.in_flight = self.max_in_flight = self.requests = 0
        self.seen: Counter[str] = Counter()
        self.payloads: list[dict] = []
        self.auth: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else delayed ACKs add ~40 ms a request

            def log_message(self, *args):  # keep pytest output clean
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json"):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:  # the client gave up
                    pass

            def _send_events(self, events: list[tuple[float, str]]):
                """Server-sent events, chunked: (pause before it, data) each, then `data: [DONE]`."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for pause, data in events + [(0.0, "[DONE]")]:
                        time.sleep(pause)
                        chunk = f"data: {data}\n\n".encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass

            def _send_keepalives(self, seconds: float):
                """A 200 event stream of SSE comments only, every 50 ms for `seconds`; then it ends, no [DONE]."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                ends, chunk = time.monotonic() + seconds, b": keep-alive\n\n"
                try:
                    while time.monotonic() < ends:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                        time.sleep(0.05)
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:  # the client gave up
                    pass

            def do_GET(self):
                self._send(200 if self.path == "/health" else 404, b"")

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with server.lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server.requests += 1
                    server.auth.append(self.headers.get("Authorization"))
                try:
                    req = json.loads(body)
                    with server.lock:
                        server.payloads.append(req)
                    if self.path == "/pooling":
                        return self._send(*server.pooling(req))
                    if self.path != "/v1/chat/completions":
                        return self._send(404, b'{"error": "not found"}')
                    if req.get("stream"):
                        content = req["messages"][-1]["content"]
                        if "KEEPALIVE" in content:
                            return self._send_keepalives(server.keepalive_s)
                        if "HTML_TYPE" in content:
                            return self._send(200, b"<html><body>Sign in</body></html>", "text/html")
                    reply = server.chat(req)
                    if req.get("stream") and reply[0] == 200:
                        return self._send_events(server.events(req))
                    self._send(*reply)
                finally:
                    with server.lock:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.v1 = self.url + "/v1"  # the OpenAI base URL
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _first(self, key: str) -> bool:
        with self.lock:
            self.seen[key] += 1
            return self.seen[key] == 1

    # -- chat completions -------------------------------------------------------------------------

    def texts(self, req: dict) -> list[str]:
        n = req.get("n", 1)
        if self.chat_reply is not None:
            return [self.chat_reply(req["messages"]) for _ in range(n)]
        content = req["messages"][-1]["content"]
        tail = " then END and more" if "RUNS_ON" in content else ""
        n = 1 if "IGNORE_N" in content else n
        return [f"reply to {content} #{i} seed={req.get('seed')}{tail}" for i in range(n)]

    def chat(self, req: dict) -> tuple:
        content = req["messages"][-1]["content"]
        first = self._first(content)
        time.sleep(self.delay_s)
        if self.chat_reply is None:
            if "HANG" in content or ("SLOW_ONCE" in content and first):
                time.sleep(self.hang_s)
            if "FAIL500_ONCE" in content and first:
                return 500, b'{"error": "internal"}'
            if "BAD400" in content:
                return 400, b'{"error": "bad request"}'
            if "BADJSON_ONCE" in content and first:
                return 200, b"<html>oops"
        texts = self.texts(req)
        reason = "stop" if self.chat_reply is not None else "length"
        choices = [{"index": i, "finish_reason": reason, "message": {"role": "assistant", "content": t}}
                   for i, t in enumerate(texts)]
        doc = {"id": "c1", "object": "chat.completion", "model": req.get("model"), "choices": choices[::-1],
               "usage": {"prompt_tokens": 7, "completion_tokens": 5 * len(texts), "total_tokens": 7 + 5 * len(texts)}}
        if self.chat_reply is None:
            return self.misshape(content, doc)
        return 200, json.dumps(doc).encode()

    @staticmethod
    def misshape(content: str, doc: dict) -> tuple[int, bytes, str]:
        """The reply as the markers in `content` spoil it: valid JSON of a wrong shape, or a wrong type."""
        choices, usage = doc["choices"], doc["usage"]
        if "MIXED_INDEX" in content:
            doc["choices"] = [{**choices[0], "index": 0}, {**choices[0], "index": "1"}]
        if "WORDY_USAGE" in content:
            usage["prompt_tokens"] = "many"
        if "OBJECT_CONTENT" in content:
            choices[0]["message"]["content"] = {"text": "hello"}
        body = json.dumps(doc)
        if "HUGE_USAGE" in content:
            body = body.replace('"completion_tokens": ', '"completion_tokens": 1e400, "was": ')
        return 200, body.encode(), "text/html" if "HTML_TYPE" in content else "application/json"

    def events(self, req: dict) -> list[tuple[float, str]]:
        if self.chat_reply is not None:
            pieces = self.texts({**req, "n": 1})[0].splitlines(keepends=True)
        else:
            pieces = STREAM_PIECES
        content = req["messages"][-1]["content"]
        pauses = [0.0] * len(pieces)
        if "STALL" in content and len(pauses) > 1:
            pauses[1] = self.hang_s
        if "TRICKLE" in content:
            pauses = [0.1] * len(pieces)
        first = {"id": "s1", "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
        out = [(0.0, json.dumps(first))]
        if "BAD_EVENT" in content:
            out.append((0.0, json.dumps({"id": "s1", "choices": {"0": {"delta": {"content": "x"}}}})))
        for pause, piece in zip(pauses, pieces):
            chunk = {"id": "s1", "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
            out.append((pause, json.dumps(chunk)))
        return out

    # -- pooling ----------------------------------------------------------------------------------

    def pooling(self, req: dict) -> tuple:
        inputs = req["input"] if isinstance(req["input"], list) else [req["input"]]
        time.sleep(self.delay_s)
        data: list[dict] = []
        for i, text in enumerate(inputs):
            first = self._first(text)
            if "TIMEOUT" in text:
                time.sleep(self.hang_s)
            if "FAIL500" in text or ("FLAKY" in text and first):
                return 500, b'{"error": "internal"}'
            if "BADJSON" in text:
                return 200, b"<html>oops"
            value: list = [len(text) / 10.0] * (2 if "WRONGLEN" in text else 1)
            value = [10 ** 400] if "HUGE" in text else [float("nan")] if "NAN" in text else value
            data.append({"index": str(i) if "STRINDEX" in text else i, "object": "pooling", "data": value})
        body = json.dumps({"id": "pool-1", "object": "list", "created": 0, "model": req["model"],
                           "data": data, "usage": {"prompt_tokens": 1, "total_tokens": 1}}).encode()
        return 200, body, "text/html" if any("HTMLTYPE" in text for text in inputs) else "application/json"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
