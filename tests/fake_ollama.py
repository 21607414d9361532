"""A real HTTP server on loopback that speaks Ollama's (and OpenAI's) JSON, scripted per test.

Default behaviour: embeddings from the offline hashing embedder, chat replies from the offline
heuristics. Tests queue scripted replies or failures per endpoint to steer it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pipeline.llm import offline


class Script:
    """One scripted answer: a status, a raw body (str/bytes/dict) and an optional delay."""

    def __init__(self, body=None, status: int = 200, delay: float = 0.0, close: bool = False):
        self.body, self.status, self.delay, self.close = body, status, delay, close


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default listen backlog is 5: a sixth connection opened at the same moment
    # waits for the kernel's SYN retry (a second), which a real server's backlog never makes.
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # A client that timed out hung up before a delayed answer: expected, not worth a traceback.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class FakeOllama:
    """`keep_alive`: seconds an idle connection stays open (HTTP/1.1, as Ollama keeps them);
    None (the default) closes each connection after its answer (HTTP/1.0)."""

    def __init__(self, dimensions: int = 768, keep_alive: float | None = None):
        self.embedder = offline.OfflineEmbedder(dimensions, model="nomic-embed-text")
        self.scripts: dict[str, deque[Script]] = defaultdict(deque)
        self.requests: list[tuple[str, dict]] = []
        self.headers: list[dict[str, str]] = []  # of each request, in the order of `requests`
        self.keep_alive = keep_alive
        self.chat_handler = None  # callable(payload) -> str reply, for dynamic scripting
        self.lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        # A short poll interval: shutdown() waits up to one interval, once per test.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeOllama:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def script(self, path: str, *scripts: Script) -> None:
        with self.lock:
            self.scripts[path].extend(scripts)

    def chat_reply(self, *replies: str) -> None:
        """Queue plain model replies (message content) for /api/chat."""
        self.script(
            "/api/chat",
            *[
                Script(
                    {
                        "model": "qwen3:4b",
                        "message": {"role": "assistant", "content": r},
                        "done": True,
                        "prompt_eval_count": 42,
                        "eval_count": 17,
                    }
                )
                for r in replies
            ],
        )

    def calls(self, path: str) -> list[dict]:
        return [payload for p, payload in self.requests if p == path]

    # -- default answers ---------------------------------------------------------------------------
    def _default(self, path: str, payload: dict):
        if path == "/api/embed":
            inputs = payload.get("input") or []
            inputs = [inputs] if isinstance(inputs, str) else inputs
            return {
                "model": payload.get("model"),
                "embeddings": [self.embedder.embed_one(t).tolist() for t in inputs],
            }
        if path == "/v1/embeddings":
            inputs = payload.get("input") or []
            return {
                "data": [
                    {"index": i, "embedding": self.embedder.embed_one(t).tolist()}
                    for i, t in enumerate(inputs)
                ]
            }
        if path in {"/api/chat", "/v1/chat/completions"}:
            if path == "/api/chat":
                prompt = payload["messages"][-1]["content"]
            else:
                prompt = payload["messages"][-1]["content"]
            if self.chat_handler is not None:
                content = self.chat_handler(payload)
            elif "Text:" in prompt and "facts" in json.dumps(
                payload.get("format") or payload.get("response_format") or {}
            ):
                content = offline.extract_reply(prompt.rsplit("Text:", 1)[1].strip())
            else:
                content = json.dumps(
                    {
                        "action": "add",
                        "targetId": None,
                        "confidence": 0.8,
                        "reason": "fake server default: new information",
                    }
                )
            if path == "/api/chat":
                return {
                    "model": payload.get("model"),
                    "message": {"role": "assistant", "content": content},
                    "done": True,
                    "prompt_eval_count": len(prompt) // 4,
                    "eval_count": len(content) // 4,
                }
            return {
                "choices": [{"message": {"role": "assistant", "content": content}}],
                "usage": {
                    "prompt_tokens": len(prompt) // 4,
                    "completion_tokens": len(content) // 4,
                },
            }
        if path == "/api/tags":
            return {"models": [{"name": "qwen3:4b"}, {"name": "nomic-embed-text"}]}
        return None

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _answer(self, path: str, payload: dict):
                with fake.lock:
                    fake.requests.append((path, payload))
                    fake.headers.append(dict(self.headers))
                    script = fake.scripts[path].popleft() if fake.scripts[path] else None
                if script is None:
                    body = fake._default(path, payload)
                    if body is None:
                        script = Script({"error": "not found"}, 404)
                    else:
                        script = Script(body)
                if script.delay:
                    time.sleep(script.delay)
                if script.close:
                    self.close_connection = True
                    self.wfile.flush()
                    return
                raw = script.body
                if isinstance(raw, dict | list):
                    raw = json.dumps(raw)
                raw = raw.encode() if isinstance(raw, str) else (raw or b"")
                self.send_response(script.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                self._answer(self.path, {})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    payload = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    payload = {}
                self._answer(self.path, payload)

        if self.keep_alive is not None:
            Handler.protocol_version = "HTTP/1.1"
            Handler.timeout = self.keep_alive  # an idle connection is closed after this long
        return Handler
