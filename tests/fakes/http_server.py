"""A small scriptable HTTP server for tests that talk to real sockets instead of mocks.

Outbound clients (embedding providers, LLM chat, rerank) are tested by pointing them at this server
on 127.0.0.1 and scripting its replies per test::

    with FakeHTTPServer() as server:
        server.route("POST", "/v1/embeddings", fake_openai_embeddings(dim=8))
        ... client with base_url=server.url("/v1") ...
        assert len(server.requests) == 1
        assert server.requests[0].json()["model"] == "text-embedding-3-small"

A handler is called as ``handler(json_body, headers, target)``:

* ``json_body``: the parsed JSON body, or None when the body is empty or not JSON (the raw bytes
  are always on the recorded request),
* ``headers``: a dict with lower-cased header names,
* ``target``: a ``Target`` with ``path``, ``query`` (first value per name) and ``raw`` (path?query),

and returns ``(status, headers, body)``: ``body`` is JSON-encoded when it is a dict or list, sent
as-is when it is ``bytes`` or ``str``, and empty when None. Returning ``DROP_CONNECTION`` closes the
socket without a reply, which clients see as a connection error. ``sequence(...)`` chains replies
for "fail twice, then succeed" scripts. A request that matches no route is answered 404 and still
recorded.

Every request is recorded (method, path, query, headers, raw body) in arrival order.
As a pytest fixture: ``fake_http_server`` below (import it into a conftest or test module).
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

Reply = tuple[int, dict[str, str], Any]


@dataclass(frozen=True)
class Target:
    """Where a request went: ``path`` without the query, ``query`` as first value per name."""

    path: str
    query: dict[str, str]
    raw: str


Handler = Callable[[Any, dict[str, str], Target], "Reply | _Drop"]


class _Drop:
    def __repr__(self) -> str:
        return "DROP_CONNECTION"


#: return this from a handler to close the connection without answering
DROP_CONNECTION = _Drop()


@dataclass(frozen=True)
class RecordedRequest:
    """One request exactly as received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    raw_target: str = field(default="")

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class FakeHTTPServer:
    """A threaded HTTP/1.1 server on 127.0.0.1 with per-test routes and a request log."""

    def __init__(self, host: str = "127.0.0.1"):
        self._routes: dict[tuple[str, str], Handler] = {}
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._server = ThreadingHTTPServer((host, 0), self._make_handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle --

    def start(self) -> FakeHTTPServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.02},
                name="fake-http",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> FakeHTTPServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting --

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, path: str = "") -> str:
        """``base_url`` joined with ``path`` (e.g. ``server.url("/v1")``)."""
        return self.base_url + path

    def route(self, method: str, path: str, handler: Handler) -> None:
        """Answer ``method path`` (exact path, query ignored) with ``handler``; replaces a previous route."""
        with self._lock:
            self._routes[(method.upper(), path)] = handler

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_to(self, path: str, method: str | None = None) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == path and (method is None or r.method == method.upper())]

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()

    # -- serving --

    def _dispatch(self, request: RecordedRequest) -> Reply | _Drop:
        with self._lock:
            self._requests.append(request)
            handler = self._routes.get((request.method, request.path))
        if handler is None:
            return 404, {}, {"error": {"message": f"no route for {request.method} {request.path}"}}
        try:
            body = json.loads(request.body) if request.body else None
        except ValueError:
            body = None
        try:
            return handler(body, dict(request.headers), Target(request.path, dict(request.query), request.raw_target))
        except Exception as exc:  # a broken handler shows up as a 500 in the test, not a hang
            return 500, {}, {"error": {"message": f"fake handler raised {type(exc).__name__}: {exc}"}}

    def _make_handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # one buffered write per reply and no Nagle: otherwise every keep-alive request waits ~40 ms
            wbufsize = -1
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def _read_body(self) -> bytes:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    parts = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()  # the CRLF after each chunk
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _handle(self) -> None:
                raw = self._read_body()
                split = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
                request = RecordedRequest(
                    method=self.command.upper(),
                    path=split.path,
                    query=query,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=raw,
                    raw_target=self.path,
                )
                reply = server._dispatch(request)
                if reply is DROP_CONNECTION:
                    self.close_connection = True
                    return
                status, headers, body = reply  # type: ignore[misc]
                if body is None:
                    payload = b""
                elif isinstance(body, bytes):
                    payload = body
                elif isinstance(body, str):
                    payload = body.encode("utf-8")
                else:
                    payload = json.dumps(body).encode("utf-8")
                self.send_response(status)
                names = {k.lower() for k in headers}
                if "content-type" not in names and payload:
                    self.send_header("Content-Type", "application/json")
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if payload and self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_QUERY = _handle

        return _Handler


# --- reply helpers -------------------------------------------------------------------------------


def json_reply(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Handler:
    """A handler that always answers the same."""

    def handler(_body: Any, _headers: dict[str, str], _target: Target) -> Reply:
        return status, dict(headers or {}), body

    return handler


def sequence(*handlers: Handler) -> Handler:
    """Call ``handlers`` in turn, one per request; the last one answers every request after that."""
    if not handlers:
        raise ValueError("sequence() needs at least one handler")
    lock = threading.Lock()
    state = {"next": 0}

    def handler(body: Any, headers: dict[str, str], target: Target) -> Reply | _Drop:
        with lock:
            index = min(state["next"], len(handlers) - 1)
            state["next"] += 1
        return handlers[index](body, headers, target)

    return handler


def fake_vector(text: str, dim: int) -> list[float]:
    """A deterministic unit vector for ``text``: the same text always maps to the same vector."""
    values: list[float] = []
    counter = 0
    while len(values) < dim:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        values.extend((x / 2**31) - 1.0 for x in struct.unpack(">8I", digest))
        counter += 1
    values = values[:dim]
    norm = sum(v * v for v in values) ** 0.5 or 1.0
    return [v / norm for v in values]


def fake_openai_embeddings(dim: int, *, reverse: bool = False) -> Handler:
    """OpenAI ``/embeddings``: one hashed vector per input, in OpenAI's reply shape.

    Honours ``dimensions`` in the request when present. ``reverse=True`` lists the items in reverse
    order (each still carrying its ``index``) to check that clients order by ``index``.
    """

    def handler(body: Any, _headers: dict[str, str], _target: Target) -> Reply:
        inputs = body.get("input") if isinstance(body, dict) else None
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list):
            return 400, {}, {"error": {"message": "'input' is required", "type": "invalid_request_error"}}
        width = int(body.get("dimensions") or dim)
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(str(text), width)}
            for i, text in enumerate(inputs)
        ]
        if reverse:
            data.reverse()
        tokens = sum(len(str(t).split()) for t in inputs)
        return (
            200,
            {},
            {
                "object": "list",
                "data": data,
                "model": body.get("model", "fake"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    return handler


def fake_embedding(server: FakeHTTPServer, dim: int, **overrides: Any) -> dict[str, Any]:
    """The ``embedding`` config of a custom (OpenAI-compatible) provider served by ``server`` at
    ``/v1`` (route ``/v1/embeddings`` to :func:`fake_openai_embeddings`); no retries, so a scripted
    failure is seen at once. ``overrides`` set or replace any field."""
    settings: dict[str, Any] = {
        "provider": "custom",
        "base_url": server.url("/v1"),
        "model": "fake-embed",
        "dim": dim,
        "api_key": "test-key",
        "max_retries": 0,
    }
    settings.update(overrides)
    return settings


@pytest.fixture
def fake_http_server() -> Iterator[FakeHTTPServer]:
    """A started ``FakeHTTPServer``, stopped after the test."""
    with FakeHTTPServer() as server:
        yield server
