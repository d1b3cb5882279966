"""A real OpenAI-compatible chat-completions server on loopback, scripted per test.

It speaks HTTP like vLLM, llama.cpp's server or Ollama do, so the `openai` client and langchain
are exercised for real: status codes, Retry-After headers, slow answers, dropped connections.

    with ScriptedLLMServer(responder) as server:
        server.enqueue(status=429, headers={"Retry-After": "1"})
        server.enqueue(content='{"config": {...}, "rationale": "..."}')
        ... ChatOpenAI(base_url=server.base_url, ...) ...
    server.requests  # every request body received
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[dict[str, Any]], str]


@dataclass
class Reply:
    content: str | None = None  # the assistant message; None: ask the responder
    status: int = 200
    delay: float = 0.0  # seconds before answering
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None  # a raw body instead of a chat completion (garbage, HTML...)


class ScriptedLLMServer:
    def __init__(self, responder: Responder | None = None, model: str = "scripted-model",
                 refuse_json_schema: bool = False):
        self.responder = responder or (lambda request: '{"config": {}, "rationale": "none"}')
        self.model = model
        # As llama.cpp's server does: HTTP 500 for response_format {"type": "json_schema"}.
        self.refuse_json_schema = refuse_json_schema
        self.script: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # each request's HTTP headers (Authorization...)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def enqueue(self, content: str | None = None, **kw: Any) -> None:
        self.script.append(Reply(content=content, **kw))

    def __enter__(self) -> ScriptedLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [
                        {"id": server.model, "object": "model", "owned_by": "tests"}]}))
                else:
                    self._send(404, json.dumps({"error": {"message": "not found"}}))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                request = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(request)
                server.headers.append(dict(self.headers.items()))
                reply = server.script.popleft() if server.script else Reply()
                if (server.refuse_json_schema
                        and (request.get("response_format") or {}).get("type") == "json_schema"):
                    # Its words: the request model refuses the type, the handler answers 500.
                    reply = Reply(status=500, body=json.dumps({"error": {
                        "message": "1 validation error for CreateChatCompletionRequest\n"
                                   "response_format.type\n  Input should be 'text' or "
                                   "'json_object'", "type": "internal_server_error"}}))
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.body is not None or reply.status != 200:
                    body = reply.body if reply.body is not None else json.dumps(
                        {"error": {"message": f"scripted status {reply.status}",
                                   "type": "server_error"}})
                    self._send(reply.status, body, reply.headers)
                    return
                content = reply.content if reply.content is not None else server.responder(request)
                prompt = " ".join(str(m.get("content", "")) for m in request.get("messages", []))
                usage = {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(content) // 4}
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                self._send(200, json.dumps({
                    "id": f"chatcmpl-{len(server.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": request.get("model", server.model),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": usage,
                }), reply.headers)

            def _send(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
                data = body.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out first
                    pass

        return Handler
