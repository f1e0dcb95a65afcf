"""A chat-completions server on 127.0.0.1 whose replies come from a Python function of the messages.

It speaks the OpenAI protocol (JSON replies and SSE streams) so morkit's real OpenAI client is what
the CLI tests exercise; the replies themselves are scripted per role (by the system prompt)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


class RoleChatServer:
    def __init__(self, reply: Callable[[list[dict]], str]):
        self.reply = reply
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _write(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                server.requests.append(req)
                texts = [server.reply(req["messages"]) for _ in range(req.get("n", 1))]
                if req.get("stream"):
                    events = [{"choices": [{"index": 0, "delta": {"content": line}}]}
                              for line in texts[0].splitlines(keepends=True)]
                    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                    return self._write(200, "text/event-stream", body.encode())
                doc = {"choices": [{"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": t}}
                                   for i, t in enumerate(texts)],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 10 * len(texts)}}
                self._write(200, "application/json", json.dumps(doc).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
