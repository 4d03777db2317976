"""A local OpenAI-compatible chat-completions server that answers from a script, for integration tests.

It speaks the real wire format (``POST /v1/chat/completions``, JSON or SSE ``chat.completion.chunk`` events ending
in ``data: [DONE]``, ``usage`` when asked; ``GET /v1/models``), so real ``openai`` clients and proxies talk to it
unchanged. Every request body is kept in :attr:`ChatStub.requests` for the test to inspect. Loopback only.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[list[dict[str, Any]]], str]
"""The script: the request's messages -> the assistant's reply text."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def _usage(messages: list[dict[str, Any]], reply: str) -> dict[str, int]:
    prompt = sum(len(_text(m.get("content")).split()) for m in messages) + 1
    completion = len(reply.split()) + 1
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class ChatStub:
    """Serve ``reply(messages)`` on ``http://127.0.0.1:<port>/v1`` from a daemon thread (a context manager)."""

    def __init__(self, reply: Reply, model: str = "stub-model") -> None:
        self.reply = reply
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """The OpenAI ``base_url`` (ends in ``/v1``)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ChatStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def _answer(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
        messages = list(body.get("messages") or [])
        reply = self.reply(messages)
        return reply, _usage(messages, reply)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet: the test reads stub.requests
                pass

            def _send(self, status: int, payload: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    models = {"object": "list", "data": [{"id": stub.model, "object": "model", "owned_by": "stub"}]}
                    self._send(200, json.dumps(models).encode())
                else:
                    self._send(404, b'{"error": {"message": "not found"}}')

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, b'{"error": {"message": "not found"}}')
                    return
                reply, usage = stub._answer(body)
                cid, now, model = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time()), body.get("model", stub.model)
                if not body.get("stream"):
                    choice = {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
                    out = {"id": cid, "object": "chat.completion", "created": now, "model": model, "usage": usage,
                           "choices": [choice]}  # fmt: skip
                    self._send(200, json.dumps(out).encode())
                    return
                base = {"id": cid, "object": "chat.completion.chunk", "created": now, "model": model}
                deltas = [{"role": "assistant", "content": ""}, {"content": reply}]
                events = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
                events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                if (body.get("stream_options") or {}).get("include_usage"):
                    events.append({**base, "choices": [], "usage": usage})
                sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                self._send(200, sse.encode(), "text/event-stream")

        return Handler
