"""A local OpenAI-compatible HTTP server for tests (real HTTP, real ``openai`` client).

Serves ``POST /v1/embeddings`` with deterministic hashing vectors of the requested model's
dimension, and ``POST /v1/chat/completions`` with whatever ``chat`` returns for the request
body: a dict (sent as the message's JSON content), a string (sent as the raw content, e.g.
malformed JSON) or an int (an HTTP error status). Every request body is recorded.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cortex_pg.embeddings import HashingEmbedder

DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072}


class OpenAIStub:
    def __init__(self, chat=None) -> None:  # noqa: ANN001
        self.requests: list[dict] = []
        self.chat = chat or (lambda body: {"keywords": [], "context": "General", "tags": []})
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append(
                    {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                )
                if self.path.rstrip("/").endswith("/embeddings"):
                    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                    emb = HashingEmbedder(DIMS.get(body["model"], 8))
                    data = [
                        {"object": "embedding", "index": i, "embedding": v}
                        for i, v in enumerate(emb.embed(texts))
                    ]
                    payload = {
                        "object": "list",
                        "data": data,
                        "model": body["model"],
                        "usage": {"prompt_tokens": 1, "total_tokens": 1},
                    }
                    self._send(200, payload)
                elif self.path.rstrip("/").endswith("/chat/completions"):
                    answer = stub.chat(body)
                    if isinstance(answer, int):
                        self._send(answer, {"error": {"message": "stub error", "type": "server_error"}})
                        return
                    content = answer if isinstance(answer, str) else json.dumps(answer)
                    self._send(
                        200,
                        {
                            "id": "chatcmpl-stub",
                            "object": "chat.completion",
                            "created": 0,
                            "model": body["model"],
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content},
                                }
                            ],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                        },
                    )
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def _send(self, status: int, payload: dict) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> OpenAIStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
