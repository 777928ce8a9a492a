"""One route suite, run through FastAPI, Flask and Django: same statuses, same JSON, byte for byte.

Each adapter gets a fresh database and runs the same ordered scenario through its framework's
in-process test client (FastAPI ``TestClient``, Flask ``test_client()``, Django ``Client``). The
replies are recorded once per adapter; the tests below check each step, and
``test_adapters_agree`` compares the three transcripts after replacing what legitimately differs
per run (document ids, timestamps, cursors, timings).

The tests are sync on purpose: the clients are sync, FastAPI's client runs the app on its own
loop, and the Flask and Django mounts run the engine on the shared ``sync_bridge`` loop.
"""

from __future__ import annotations

import asyncio
import json
import re
import types
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest

from context_engine import TRUSTED, ContextEngine
from context_engine.tools.availability import NO_SECRET_KEY
from routing_core import ROUTES, AuthError, sync_bridge
from tests.conftest import make_config

ADAPTERS = ("fastapi", "flask", "django")
TOKEN = "conformance-token"
UPLOAD_CAP = 3000  # ingest.max_file_bytes for the suite
JSON_CAP = 4096  # max_json_bytes for the suite
DJANGO_BODY_CAP = 1024  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE for the suite, below JSON_CAP on purpose
BOUNDARY = "ce-conformance-boundary"
MISSING_ID = "00000000-0000-4000-8000-000000000000"

HR, ENG, BOTH, ANON = "group:hr", "group:eng", "group:hr,group:eng", ""

HR_POLICY = "# Leave policy\n\nEmployees accrue 25 days of paid leave a year; parental leave lasts 16 weeks."
RUNBOOK = b"# Database failover runbook\n\nPromote the replica, then repoint the connection string."
HOLIDAYS = (
    b"<html><head><title>Holidays</title></head><body><h1>Public holidays</h1>"
    b"<p>The office is closed on New Year's Day and at Midsummer.</p></body></html>"
)
SCRATCH = "A temporary note about parking spaces in the garage."
CORRUPT_PDF = b"%PDF-1.4 a file cut short before its end"


# ---------------------------------------------------------------------------------- host callables
@dataclass
class HostLog:
    """What the host's callables saw: the native request class and whether a loop was running."""

    calls: list[tuple[str, bool]] = field(default_factory=list)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def host_callables(log: HostLog) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """The host's side: a bearer token and principals from ``X-Principals`` (tests only)."""

    def auth(request: Any) -> bool:
        log.calls.append((f"{type(request).__module__}.{type(request).__qualname__}", _loop_running()))
        header = request.headers.get("Authorization")
        if header == "Bearer revoked":
            raise AuthError("this token was revoked")
        return header == f"Bearer {TOKEN}"

    def principals(request: Any) -> Any:
        raw = request.headers.get("X-Principals")
        if raw == "!none":
            return None
        if raw == "!boom":
            raise RuntimeError("Traceback (most recent call last): the resolver failed")
        if raw == "!trusted":
            return TRUSTED
        return [p.strip() for p in (raw or "").split(",") if p.strip()]

    return auth, principals


# ---------------------------------------------------------------------------------- clients
@dataclass
class Reply:
    status: int
    content_type: str
    allow: str | None
    raw: bytes

    @property
    def body(self) -> Any:
        """The JSON reply, or the text of a page (the OAuth callback answers a popup's HTML)."""
        if not self.raw:
            return None
        if self.content_type.startswith("text/html"):
            return self.raw.decode()
        return json.loads(self.raw)


Send = Callable[[str, str, bytes | None, dict[str, str]], Reply]


def _fastapi_client(
    engine: ContextEngine, auth: Any, principals: Any, **options: Any
) -> AbstractContextManager[Send]:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from context_engine import create_router

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        yield
        await engine.aclose()  # on the app's own loop, where its pool lives

    app = FastAPI(lifespan=lifespan)
    app.include_router(
        create_router(engine, auth=auth, principals=principals, max_json_bytes=JSON_CAP, **options), prefix="/context"
    )

    @contextmanager
    def session() -> Iterator[Send]:
        with TestClient(app) as client:

            def send(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Reply:
                resp = client.request(method, url, content=body, headers=headers, follow_redirects=False)
                return Reply(
                    resp.status_code, resp.headers.get("content-type", ""), resp.headers.get("allow"), resp.content
                )

            yield send

    return session()


def _flask_client(
    engine: ContextEngine, auth: Any, principals: Any, **options: Any
) -> AbstractContextManager[Send]:
    import flask

    from context_engine import create_flask_blueprint

    app = flask.Flask(__name__)
    app.testing = True  # an exception escaping a view fails the test instead of becoming a 500 page
    app.register_blueprint(
        create_flask_blueprint(engine, auth=auth, principals=principals, max_json_bytes=JSON_CAP, **options),
        url_prefix="/context",
    )

    @contextmanager
    def session() -> Iterator[Send]:
        client = app.test_client()

        def send(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Reply:
            headers = dict(headers)
            content_type = headers.pop("Content-Type", None)
            resp = client.open(url, method=method, data=body, headers=headers, content_type=content_type)
            return Reply(resp.status_code, resp.headers.get("Content-Type", ""), resp.headers.get("Allow"), resp.data)

        try:
            yield send
        finally:
            sync_bridge.run(engine.aclose())

    return session()


def configure_django() -> None:
    """Minimal process-wide settings (once); each mount is reached through ``override_settings``."""
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DEBUG=False,
            SECRET_KEY="context-engine-tests",
            ALLOWED_HOSTS=["testserver"],
            INSTALLED_APPS=[],
            MIDDLEWARE=[
                "django.middleware.common.CommonMiddleware",
                "django.middleware.csrf.CsrfViewMiddleware",
            ],
            USE_TZ=True,
        )
        django.setup()


def _django_client(
    engine: ContextEngine, auth: Any, principals: Any, **options: Any
) -> AbstractContextManager[Send]:
    configure_django()
    from django.test import Client, override_settings
    from django.urls import include, path

    from context_engine import create_django_urlpatterns

    urlconf = types.ModuleType("context_engine_test_urls")
    urlconf.urlpatterns = [  # type: ignore[attr-defined]
        path(
            "context/",
            include(
                create_django_urlpatterns(
                    engine, auth=auth, principals=principals, max_json_bytes=JSON_CAP, **options
                )
            ),
        )
    ]

    @contextmanager
    def session() -> Iterator[Send]:
        client = Client(enforce_csrf_checks=True)  # the views must be CSRF-exempt on their own

        def send(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Reply:
            headers = dict(headers)
            content_type = headers.pop("Content-Type", "application/octet-stream")
            resp = client.generic(method, url, data=body or b"", content_type=content_type, headers=headers)
            return Reply(
                resp.status_code, resp.headers.get("Content-Type", ""), resp.headers.get("Allow"), resp.content
            )

        try:
            # a JSON body over Django's own DATA_UPLOAD_MAX_MEMORY_SIZE is still governed by max_json_bytes
            with override_settings(ROOT_URLCONF=urlconf, DATA_UPLOAD_MAX_MEMORY_SIZE=DJANGO_BODY_CAP):
                yield send
        finally:
            sync_bridge.run(engine.aclose())

    return session()


CLIENTS = {"fastapi": _fastapi_client, "flask": _flask_client, "django": _django_client}


@contextmanager
def fresh_database(pg_base_url: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_base_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, _, query = pg_base_url.partition("?")
    try:
        yield f"{head.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")
    finally:
        with psycopg.connect(pg_base_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# ---------------------------------------------------------------------------------- the scenario
class Caller:
    """Builds requests for one adapter, as a given set of principals."""

    def __init__(self, send: Send):
        self._send = send

    def __call__(
        self,
        method: str,
        path: str,
        *,
        who: str | None = HR,
        token: str | None = TOKEN,
        json_body: Any = None,
        body: bytes | None = None,
        content_type: str | None = None,
        query: dict[str, Any] | None = None,
    ) -> Reply:
        headers: dict[str, str] = {}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if who is not None:
            headers["X-Principals"] = who
        if json_body is not None:
            body, content_type = json.dumps(json_body).encode(), "application/json"
        if content_type is not None:
            headers["Content-Type"] = content_type
        url = "/context" + path + (f"?{urlencode(query, doseq=True)}" if query else "")
        return self._send(method, url, body, headers)


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes, str]]) -> tuple[bytes, str]:
    """A multipart body with a fixed boundary, so every client sends the very same bytes."""
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for name, (filename, data, mime) in files.items():
        head = (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
            f"Content-Type: {mime}\r\n\r\n"
        )
        parts.append(head.encode() + data + b"\r\n")
    parts.append(f"--{BOUNDARY}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={BOUNDARY}"


def run_scenario(call: Caller) -> dict[str, Reply]:
    """The ordered steps; later steps use ids from earlier replies."""
    r: dict[str, Reply] = {}
    hr_doc = {"text": HR_POLICY, "name": "hr-policy.md", "acl": ["group:hr"]}

    # ingest: JSON text, the same again, two uploads, refusals
    r["ingest_text"] = call("POST", "/documents", json_body=hr_doc)
    r["ingest_duplicate"] = call("POST", "/documents", json_body=hr_doc)
    body, ctype = multipart(
        {"acl": "group:eng", "source_id": "ops"}, {"file": ("runbook.md", RUNBOOK, "text/markdown")}
    )
    r["upload_md"] = call("POST", "/documents", who=ENG, body=body, content_type=ctype)
    body, ctype = multipart({}, {"file": ("holidays.html", HOLIDAYS, "text/html")})
    r["upload_html"] = call("POST", "/documents", body=body, content_type=ctype)
    body, ctype = multipart({"acl": "group:eng"}, {"file": ("big.md", b"x" * (UPLOAD_CAP + 500), "text/markdown")})
    r["upload_too_large"] = call("POST", "/documents", who="!trusted", body=body, content_type=ctype)
    r["upload_too_large_unauthenticated"] = call("POST", "/documents", token=None, body=body, content_type=ctype)
    r["upload_no_boundary"] = call("POST", "/documents", body=b"--x\r\n\r\n", content_type="multipart/form-data")
    r["upload_garbage"] = call(
        "POST",
        "/documents",
        body=b"this is not multipart at all",
        content_type=f"multipart/form-data; boundary={BOUNDARY}",
    )
    body, ctype = multipart({"name": "no-file.md"}, {})
    r["upload_without_file"] = call("POST", "/documents", body=body, content_type=ctype)
    body, ctype = multipart({"attributes": "{not json"}, {"file": ("bad-attrs.md", b"# x\n\ny", "text/markdown")})
    r["upload_bad_attributes"] = call("POST", "/documents", body=body, content_type=ctype)
    r["ingest_forbidden_acl"] = call("POST", "/documents", json_body={"text": "x", "acl": ["group:finance"]})
    r["ingest_wrong_type"] = call("POST", "/documents", json_body={"text": 5})
    r["ingest_scratch"] = call(
        "POST", "/documents", who=ENG, json_body={"text": SCRATCH, "name": "scratch.md", "acl": [ENG]}
    )

    hr_id = r["ingest_text"].body["documents"][0]["document_id"]
    runbook_id = r["upload_md"].body["documents"][0]["document_id"]
    scratch_id = r["ingest_scratch"].body["documents"][0]["document_id"]

    # list: paged, and per caller
    r["list_page1"] = call("GET", "/documents", who=BOTH, query={"limit": 1})
    r["list_page2"] = call(
        "GET", "/documents", who=BOTH, query={"limit": 1, "cursor": r["list_page1"].body["next_cursor"]}
    )
    r["list_hr"] = call("GET", "/documents")
    r["list_eng"] = call("GET", "/documents", who=ENG)
    r["list_anon"] = call("GET", "/documents", who=ANON)
    r["list_trusted_source"] = call("GET", "/documents", who="!trusted", query={"source_id": "ops"})
    r["list_bad_limit"] = call("GET", "/documents", query={"limit": 0})
    r["list_limit_not_int"] = call("GET", "/documents", query={"limit": "x"})
    r["list_bad_cursor"] = call("GET", "/documents", query={"cursor": "!!"})

    # get: visible, invisible, missing, not an id
    r["get_visible"] = call("GET", f"/documents/{hr_id}")
    r["get_without_text"] = call("GET", f"/documents/{hr_id}", query={"include_text": "false"})
    r["get_invisible"] = call("GET", f"/documents/{runbook_id}")
    r["get_missing"] = call("GET", f"/documents/{MISSING_ID}")
    r["get_not_an_id"] = call("GET", "/documents/not-an-id")
    r["get_bad_bool"] = call("GET", f"/documents/{hr_id}", query={"include_text": "maybe"})

    # patch: an ACL held, one not held, a document not visible
    r["patch_held"] = call(
        "PATCH", f"/documents/{runbook_id}", who=ENG, json_body={"acl": ["group:eng"], "attributes": {"team": "sre"}}
    )
    r["patch_unheld"] = call("PATCH", f"/documents/{runbook_id}", who=ENG, json_body={"acl": ["group:hr"]})
    r["patch_invisible"] = call("PATCH", f"/documents/{runbook_id}", json_body={"attributes": {}})
    r["patch_unknown_field"] = call("PATCH", f"/documents/{runbook_id}", who=ENG, json_body={"owner": "me"})

    # search: per caller, then every refusal
    question = {"query": "holidays and leave policy", "top_k": 10}
    r["search_hr"] = call("POST", "/search", json_body=question)
    r["search_eng"] = call("POST", "/search", who=ENG, json_body=question)
    r["search_anon"] = call("POST", "/search", who=ANON, json_body=question)
    r["search_trusted"] = call("POST", "/search", who="!trusted", json_body=question)
    r["search_empty"] = call("POST", "/search", json_body={"query": ""})
    r["search_whitespace"] = call("POST", "/search", json_body={"query": "   \n\t"})
    r["search_top_k_0"] = call("POST", "/search", json_body={"query": "leave", "top_k": 0})
    r["search_top_k_1000"] = call("POST", "/search", json_body={"query": "leave", "top_k": 1000})
    r["search_top_k_str"] = call("POST", "/search", json_body={"query": "leave", "top_k": "x"})
    r["search_top_k_numeric_str"] = call("POST", "/search", json_body={"query": "leave", "top_k": "5"})
    r["search_top_k_bool"] = call("POST", "/search", json_body={"query": "leave", "top_k": True})
    r["search_unknown_field"] = call("POST", "/search", json_body={"query": "leave", "limit": 3})
    r["search_invalid_json"] = call("POST", "/search", body=b'{"query": "leave",', content_type="application/json")
    r["search_no_body"] = call("POST", "/search")
    r["search_array_body"] = call("POST", "/search", json_body=["leave"])
    many_sources = ["default", *(f"unused-source-{i}" for i in range(100))]
    r["search_large_body"] = call("POST", "/search", json_body={"query": "leave", "source_ids": many_sources})
    padding = "x" * (JSON_CAP + 100)
    r["search_too_large"] = call("POST", "/search", json_body={"query": "leave", "pad": padding})
    body, ctype = multipart({"query": "leave"}, {})
    r["search_multipart_body"] = call("POST", "/search", body=body, content_type=ctype)
    question_bytes = json.dumps(question).encode()
    r["search_text_plain"] = call("POST", "/search", body=question_bytes, content_type="text/plain")
    r["search_no_content_type"] = call("POST", "/search", body=question_bytes)
    r["search_json_suffix"] = call("POST", "/search", body=question_bytes, content_type="application/vnd.api+json")

    # knowledge query: the no-model path and the body refusals (scopes, 429: tests/test_knowledge_route.py)
    knowledge = {"query": "holidays and leave policy", "topK": 3, "expand": False, "rerank": False}
    r["knowledge_hr"] = call("POST", "/knowledge/query", json_body=knowledge)
    r["knowledge_anon"] = call("POST", "/knowledge/query", who=ANON, json_body=knowledge)
    r["knowledge_empty"] = call("POST", "/knowledge/query", json_body={"query": ""})
    r["knowledge_top_k_21"] = call("POST", "/knowledge/query", json_body={"query": "leave", "topK": 21})

    # stats per caller
    r["stats_hr"] = call("GET", "/stats")
    r["stats_eng"] = call("GET", "/stats", who=ENG)
    r["stats_anon"] = call("GET", "/stats", who=ANON)
    r["stats_trusted"] = call("GET", "/stats", who="!trusted")
    r["stats_trailing_slash"] = call("GET", "/stats/")

    # delete, then it is gone
    r["delete_invisible"] = call("DELETE", f"/documents/{scratch_id}")
    r["delete"] = call("DELETE", f"/documents/{scratch_id}", who=ENG)
    r["get_deleted"] = call("GET", f"/documents/{scratch_id}", who=ENG)
    r["delete_again"] = call("DELETE", f"/documents/{scratch_id}", who=ENG)
    r["stats_eng_after_delete"] = call("GET", "/stats", who=ENG)

    # a client path in the file name is dropped (Django does so itself; the others are made to agree)
    body, ctype = multipart(
        {"acl": "group:finance"}, {"file": ("../private/notes.md", b"# Notes\n\nQ3 budget.", "text/plain")}
    )
    r["upload_path_filename"] = call("POST", "/documents", who="!trusted", body=body, content_type=ctype)

    # nothing stored: 422 with the error contract beside the report; the views agree on the failure
    body, ctype = multipart({"source_id": "broken"}, {"file": ("broken.pdf", CORRUPT_PDF, "application/pdf")})
    r["upload_failed"] = call("POST", "/documents", who="!trusted", body=body, content_type=ctype)
    failed_id = r["upload_failed"].body["documents"][0]["document_id"]
    r["list_failed"] = call("GET", "/documents", who="!trusted", query={"source_id": "broken"})
    r["get_failed"] = call("GET", f"/documents/{failed_id}", who="!trusted", query={"include_text": "false"})

    # a rename onto a name its source already holds under the same ACL (names are unique per visibility)
    r["patch_rename_conflict"] = call(
        "PATCH", f"/documents/{hr_id}", who="!trusted", json_body={"name": "holidays.html", "acl": []}
    )

    # history: the versions a caller may see, and a read as of an earlier revision
    r["versions"] = call("GET", f"/documents/{hr_id}/versions")
    r["versions_hidden"] = call("GET", f"/documents/{hr_id}/versions", who=ENG)
    filed_at = r["ingest_text"].body["documents"][0]["revision"]  # a caller's handle, passed back as as_of
    r["get_as_of_first"] = call("GET", f"/documents/{hr_id}", query={"as_of": filed_at})
    r["get_as_of_bad"] = call("GET", f"/documents/{hr_id}", query={"as_of": "later"})

    # governed tools: listed and run for the caller's principals only
    r["tools_list"] = call("GET", "/tools")
    r["tools_list_other"] = call("GET", "/tools", who="group:other")
    r["tool_run"] = call("POST", "/tools/execute", json_body={"name": "fn_add", "arguments": {"a": 1, "b": 2}})
    r["tool_hidden"] = call(
        "POST", "/tools/execute", who="group:other", json_body={"name": "fn_add", "arguments": {"a": 1, "b": 2}}
    )
    r["tool_bad_arguments"] = call("POST", "/tools/execute", json_body={"name": "fn_add", "arguments": {"a": 1}})

    # operational: no auth asked, nothing but a status told
    r["health"] = call("GET", "/health", token=None, who="!boom")
    r["ready"] = call("GET", "/ready", token=None, who="!boom")
    # the OAuth popup's return: unauthenticated, a flow state nobody started is refused in the page
    r["oauth_callback_unknown_state"] = call(
        "GET", "/tools/oauth/callback", token=None, query={"state": "not-a-flow", "code": "x"}
    )
    r["health_wrong_method"] = call("POST", "/health", token=None, json_body={})

    # the host's callables refusing
    r["auth_missing"] = call("GET", "/stats", token=None)
    r["auth_wrong"] = call("GET", "/stats", token="wrong")
    r["auth_error"] = call("GET", "/stats", token="revoked")
    r["principals_none"] = call("GET", "/stats", who="!none")
    r["principals_raise"] = call("GET", "/stats", who="!boom")

    # framework-level: unknown paths, wrong methods
    r["unknown_route"] = call("GET", "/nope")
    r["unknown_nested"] = call("POST", "/documents/x/y", json_body={})
    r["mount_root"] = call("GET", "/")
    r["double_slash"] = call("GET", "//documents")
    r["wrong_method_search"] = call("PUT", "/search", json_body={"query": "x"})
    r["wrong_method_documents"] = call("DELETE", "/documents")
    r["wrong_method_options"] = call("OPTIONS", "/stats")
    r["wrong_method_unauthenticated"] = call("PATCH", "/stats", token=None)

    # query parameters hold to their declared schema; a cursor the server did not issue says so alike
    r["tools_bad_kind"] = call("GET", "/tools", query={"kind": "AAA"})
    r["tools_bad_cursor"] = call("GET", "/tools", query={"cursor": "bm90LWlzc3VlZA"})
    r["list_forged_cursor"] = call("GET", "/documents", query={"cursor": "bm90LWlzc3VlZA"})

    # a list refused whole answers as its first entry would alone
    r["ingest_list_forbidden_acl"] = call(
        "POST", "/documents", json_body=[{"text": "x", "acl": ["group:finance"]}, {"text": "y", "acl": ["group:x"]}]
    )
    return r


def acl_parts_form(count: int) -> tuple[bytes, str]:
    """A multipart upload naming ``count`` principals, one ``acl`` part each."""
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="acl"\r\n\r\ngroup:part-{i}\r\n'.encode()
        for i in range(count)
    ]
    parts.append(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="source_id"\r\n\r\nparts\r\n'.encode())
    parts.append(
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="parts-{count}.md"\r\n'
        f"Content-Type: text/plain\r\n\r\nA note filed under {count} groups.\r\n".encode()
    )
    parts.append(f"--{BOUNDARY}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={BOUNDARY}"


def _add(a: int, b: int) -> int:
    return a + b


# ---------------------------------------------------------------------------------- recording
@dataclass
class Transcript:
    adapter: str
    replies: dict[str, Reply]
    host: HostLog

    def __getitem__(self, step: str) -> Reply:
        return self.replies[step]


@pytest.fixture(scope="module")
def recorder(pg_base_url: str) -> Callable[[str], Transcript]:
    """Runs the scenario once per adapter (on its own fresh database) and keeps the transcript."""
    done: dict[str, Transcript] = {}

    def record(adapter: str) -> Transcript:
        if adapter not in done:
            with fresh_database(pg_base_url) as url:
                engine = ContextEngine(make_config(url, ingest={"max_file_bytes": UPLOAD_CAP}))
                engine.register_function_tool(_add, name="add", description="adds two numbers", acl=["group:hr"])
                log = HostLog()
                auth, principals = host_callables(log)
                with CLIENTS[adapter](engine, auth, principals) as send:
                    done[adapter] = Transcript(adapter, run_scenario(Caller(send)), log)
        return done[adapter]

    return record


@pytest.fixture(scope="module", params=ADAPTERS)
def t(request: pytest.FixtureRequest, recorder: Callable[[str], Transcript]) -> Transcript:
    return recorder(request.param)


def err(reply: Reply) -> tuple[int, str, str]:
    assert reply.body.keys() == {"error"}, reply.body
    assert reply.body["error"].keys() == {"code", "message"}, reply.body
    return reply.status, reply.body["error"]["code"], reply.body["error"]["message"]


def names(docs: list[dict[str, Any]]) -> set[str]:
    return {d["name"] for d in docs}


def hit_names(reply: Reply) -> set[str]:
    assert reply.status == 200, reply.body
    return {h["document_name"] for h in reply.body["hits"]}


# ---------------------------------------------------------------------------------- ingest
def test_ingest_json_text_is_201_with_a_report(t: Transcript) -> None:
    reply = t["ingest_text"]
    assert reply.status == 201, reply.body
    (doc,) = reply.body["documents"]
    assert doc["status"] == "completed" and doc["name"] == "hr-policy.md" and doc["chunks"] >= 1
    assert doc["mime"] == "text/markdown" and doc["error"] is None
    totals = reply.body["totals"]
    assert {key: totals[key] for key in ("files", "completed", "failed", "skipped", "chunks")} == {
        "files": 1,
        "completed": 1,
        "failed": 0,
        "skipped": 0,
        "chunks": doc["chunks"],
    }


def test_ingest_duplicate_is_200_skipped(t: Transcript) -> None:
    reply = t["ingest_duplicate"]
    assert reply.status == 200, reply.body
    (doc,) = reply.body["documents"]
    assert doc["status"] == "skipped" and doc["skip_reason"] == "unchanged"
    assert doc["document_id"] == t["ingest_text"].body["documents"][0]["document_id"]


@pytest.mark.parametrize(
    ("step", "name", "mime"),
    [("upload_md", "runbook.md", "text/markdown"), ("upload_html", "holidays.html", "text/html")],
)
def test_multipart_upload(t: Transcript, step: str, name: str, mime: str) -> None:
    reply = t[step]
    assert reply.status == 201, reply.body
    (doc,) = reply.body["documents"]
    assert (doc["status"], doc["name"], doc["mime"]) == ("completed", name, mime)


def test_upload_file_name_loses_its_client_path(t: Transcript) -> None:
    reply = t["upload_path_filename"]
    assert reply.status == 201, reply.body
    assert reply.body["documents"][0]["name"] == "notes.md"


def test_upload_fields_are_applied(t: Transcript) -> None:
    doc = t["list_trusted_source"].body["documents"]
    assert [(d["name"], d["source_id"], d["acl"]) for d in doc] == [("runbook.md", "ops", ["group:eng"])]


def test_upload_over_the_byte_cap_is_413_naming_the_knob(t: Transcript) -> None:
    reply = t["upload_too_large"]
    body, _ = multipart({"acl": "group:eng"}, {"file": ("big.md", b"x" * (UPLOAD_CAP + 500), "text/markdown")})
    assert err(reply) == (
        413,
        "too_large",
        f"ingest.max_file_bytes is {UPLOAD_CAP} bytes; this input is {len(body)} bytes. "
        "Raise ingest.max_file_bytes (or set it to None) to accept it.",
    )


def test_an_unauthenticated_upload_is_refused_before_its_size(t: Transcript) -> None:
    assert err(t["upload_too_large_unauthenticated"])[:2] == (401, "unauthorized")


@pytest.mark.parametrize("step", ["upload_no_boundary", "upload_garbage"])
def test_malformed_multipart_is_400(t: Transcript, step: str) -> None:
    status, code, message = err(t[step])
    assert (status, code) == (400, "invalid_multipart")
    assert "multipart body could not be parsed" in message


def test_upload_without_a_file_part_is_400(t: Transcript) -> None:
    assert err(t["upload_without_file"]) == (400, "invalid_request", "multipart body needs a 'file' part")


def test_upload_with_bad_attributes_is_400(t: Transcript) -> None:
    assert err(t["upload_bad_attributes"]) == (400, "invalid_request", "attributes: must be valid JSON")


def test_ingest_under_an_acl_not_held_is_403(t: Transcript) -> None:
    assert err(t["ingest_forbidden_acl"])[:2] == (403, "forbidden")


def test_ingest_wrong_field_type_is_400_naming_it(t: Transcript) -> None:
    status, code, message = err(t["ingest_wrong_type"])
    assert (status, code) == (400, "invalid_request") and message.startswith("text:")


# ---------------------------------------------------------------------------------- list
def test_list_is_paged(t: Transcript) -> None:
    first, second = t["list_page1"].body, t["list_page2"].body
    assert t["list_page1"].status == t["list_page2"].status == 200
    assert len(first["documents"]) == len(second["documents"]) == 1
    assert first["next_cursor"] and second["next_cursor"]  # four documents visible, one a page
    assert first["documents"][0]["id"] != second["documents"][0]["id"]
    assert all(d["text"] is None for d in first["documents"] + second["documents"])


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ("list_hr", {"hr-policy.md", "holidays.html"}),
        ("list_eng", {"runbook.md", "holidays.html", "scratch.md"}),
        ("list_anon", {"holidays.html"}),
    ],
)
def test_list_shows_only_what_the_caller_may_see(t: Transcript, step: str, expected: set[str]) -> None:
    reply = t[step]
    assert reply.status == 200 and names(reply.body["documents"]) == expected
    assert reply.body["next_cursor"] is None


@pytest.mark.parametrize(
    ("step", "fragment"),
    [("list_bad_limit", "limit"), ("list_limit_not_int", "limit: must be an integer")],
)
def test_list_bad_parameters_are_400(t: Transcript, step: str, fragment: str) -> None:
    status, code, message = err(t[step])
    assert (status, code) == (400, "invalid_request") and fragment in message


@pytest.mark.parametrize("step", ["list_bad_cursor", "list_forged_cursor", "tools_bad_cursor"])
def test_a_cursor_the_server_did_not_issue_is_400_invalid_cursor(t: Transcript, step: str) -> None:
    status, code, message = err(t[step])
    assert (status, code) == (400, "invalid_cursor") and "cursor" in message


def test_a_query_value_outside_its_enum_is_400(t: Transcript) -> None:
    assert err(t["tools_bad_kind"]) == (400, "invalid_request", "kind: must be one of http, db, mcp, function")


def test_a_list_refused_whole_answers_as_its_first_entry_alone(t: Transcript) -> None:
    reply = t["ingest_list_forbidden_acl"]
    assert reply.body.keys() == {"error", "items", "totals"}  # the error contract beside the items
    assert (reply.status, reply.body["error"]["code"]) == err(t["ingest_forbidden_acl"])[:2] == (403, "forbidden")
    assert [item["error"]["code"] for item in reply.body["items"]] == ["forbidden", "forbidden"]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_acl_parts_past_the_forms_cap_are_400_on_every_adapter(adapter: str, pg_base_url: str) -> None:
    """Up to the form's cap stored; past it refused; past the framework's own cap on parts refused alike."""
    replies = {}
    with fresh_database(pg_base_url) as url:
        engine = ContextEngine(make_config(url))
        auth, principals = host_callables(HostLog())
        with CLIENTS[adapter](engine, auth, principals) as send, ExitStack() as stack:
            if adapter == "django":  # Django's default cap on form bytes, not the small one of this suite
                from django.test import override_settings

                stack.enter_context(override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=2_621_440))
            call = Caller(send)
            for count in (500, 501, 1200):
                body, ctype = acl_parts_form(count)
                replies[count] = call("POST", "/documents", who="!trusted", body=body, content_type=ctype)
    assert replies[500].status == 201, replies[500].body
    assert replies[500].body["documents"][0]["status"] == "completed"
    status, code, message = err(replies[501])
    assert (status, code) == (400, "invalid_request") and "at most 500 parts" in message
    status, code, message = err(replies[1200])
    assert (status, code) == (400, "invalid_request") and "more parts than this server reads" in message


# ---------------------------------------------------------------------------------- get
def test_get_visible_document(t: Transcript) -> None:
    reply = t["get_visible"]
    assert reply.status == 200
    assert reply.body["name"] == "hr-policy.md" and reply.body["acl"] == ["group:hr"]
    assert "parental leave lasts 16 weeks" in reply.body["text"]
    assert t["get_without_text"].status == 200 and t["get_without_text"].body["text"] is None


def test_get_invisible_reads_exactly_like_missing(t: Transcript) -> None:
    invisible, missing = t["get_invisible"], t["get_missing"]
    runbook_id = t["upload_md"].body["documents"][0]["document_id"]
    assert err(invisible) == (404, "not_found", f"document {runbook_id} not found")
    assert err(missing) == (404, "not_found", f"document {MISSING_ID} not found")
    assert invisible.raw.replace(runbook_id.encode(), MISSING_ID.encode()) == missing.raw
    assert err(t["get_not_an_id"]) == (404, "not_found", "document not-an-id not found")


def test_get_bad_boolean_is_400(t: Transcript) -> None:
    assert err(t["get_bad_bool"]) == (400, "invalid_request", "include_text: must be true or false")


# ---------------------------------------------------------------------------------- patch
def test_patch_with_an_acl_held(t: Transcript) -> None:
    reply = t["patch_held"]
    assert reply.status == 200, reply.body
    assert reply.body["acl"] == ["group:eng"] and reply.body["attributes"] == {"team": "sre"}


def test_patch_to_an_acl_not_held_is_403(t: Transcript) -> None:
    assert err(t["patch_unheld"]) == (403, "forbidden", "you may only file a document under an ACL you hold")


def test_patch_invisible_is_404(t: Transcript) -> None:
    assert err(t["patch_invisible"])[:2] == (404, "not_found")


def test_patch_unknown_field_is_400_naming_it(t: Transcript) -> None:
    assert err(t["patch_unknown_field"]) == (400, "invalid_request", "owner: Extra inputs are not permitted")


# ---------------------------------------------------------------------------------- search
@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ("search_hr", {"hr-policy.md", "holidays.html"}),
        ("search_eng", {"runbook.md", "holidays.html", "scratch.md"}),
        ("search_anon", {"holidays.html"}),
        ("search_trusted", {"hr-policy.md", "runbook.md", "holidays.html", "scratch.md"}),
    ],
)
def test_search_hits_respect_the_acl(t: Transcript, step: str, expected: set[str]) -> None:
    assert hit_names(t[step]) == expected
    assert t[step].body["usage"]["kind"] == "search"


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ("search_empty", "query must be a non-empty string"),
        ("search_whitespace", "query must be a non-empty string"),
        ("search_top_k_0", "top_k must be an integer between 1 and 100"),
        ("search_top_k_1000", "top_k must be an integer between 1 and 100"),
        ("search_top_k_str", "top_k: Input should be a valid integer"),
        ("search_top_k_numeric_str", "top_k: Input should be a valid integer"),
        ("search_top_k_bool", "top_k: Input should be a valid integer"),
        ("search_unknown_field", "limit: Extra inputs are not permitted"),
        ("search_no_body", "a JSON body is required"),
        ("search_array_body", "the body must be a JSON object"),
    ],
)
def test_search_refusals_are_400(t: Transcript, step: str, message: str) -> None:
    assert err(t[step]) == (400, "invalid_request", message)


def test_search_invalid_json_is_400(t: Transcript) -> None:
    status, code, message = err(t["search_invalid_json"])
    assert (status, code) == (400, "invalid_json") and message.startswith("the body is not valid JSON")


@pytest.mark.parametrize("step", ["search_multipart_body", "search_text_plain", "search_no_content_type"])
def test_a_body_not_declared_json_is_415(t: Transcript, step: str) -> None:
    status, code, message = err(t[step])
    assert (status, code) == (415, "unsupported_media_type") and "application/json" in message


def test_a_json_suffix_media_type_is_json(t: Transcript) -> None:
    assert hit_names(t["search_json_suffix"]) == {"hr-policy.md", "holidays.html"}


def test_the_large_body_sits_between_the_two_caps() -> None:
    size = len(json.dumps({"query": "leave", "source_ids": ["default", *(f"unused-source-{i}" for i in range(100))]}))
    assert DJANGO_BODY_CAP < size < JSON_CAP


def test_large_json_body_under_the_cap_is_answered(t: Transcript) -> None:
    assert hit_names(t["search_large_body"]) == {"hr-policy.md", "holidays.html"}


def test_json_body_over_max_json_bytes_is_413(t: Transcript) -> None:
    size = len(json.dumps({"query": "leave", "pad": "x" * (JSON_CAP + 100)}).encode())
    assert err(t["search_too_large"]) == (
        413,
        "too_large",
        f"the request body is {size} bytes; the limit is {JSON_CAP}",
    )


# ---------------------------------------------------------------------------------- knowledge query
@pytest.mark.parametrize(
    ("step", "allowed"), [("knowledge_hr", {"hr-policy.md", "holidays.html"}), ("knowledge_anon", {"holidays.html"})]
)
def test_knowledge_query_respects_the_acl(t: Transcript, step: str, allowed: set[str]) -> None:
    reply = t[step]
    assert reply.status == 200, reply.body
    assert {m["sourceName"] for m in reply.body["matches"]} <= allowed and reply.body["matches"]
    assert reply.body["trace"]["queries"] == ["holidays and leave policy"]


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ("knowledge_empty", "query must be a non-empty string"),
        ("knowledge_top_k_21", "topK: Input should be less than or equal to 20"),
    ],
)
def test_knowledge_query_refusals_are_400(t: Transcript, step: str, message: str) -> None:
    assert err(t[step]) == (400, "invalid_request", message)


# ---------------------------------------------------------------------------------- stats
@pytest.mark.parametrize(
    ("step", "documents", "sources"),
    [
        ("stats_hr", 2, {"default": 2}),
        ("stats_eng", 3, {"default": 2, "ops": 1}),
        ("stats_anon", 1, {"default": 1}),
        ("stats_trusted", 4, {"default": 3, "ops": 1}),
        ("stats_trailing_slash", 2, {"default": 2}),
        ("stats_eng_after_delete", 2, {"default": 1, "ops": 1}),
    ],
)
def test_stats_respect_the_acl(t: Transcript, step: str, documents: int, sources: dict[str, int]) -> None:
    reply = t[step]
    assert reply.status == 200, reply.body
    assert reply.body["documents"] == documents and reply.body["sources"] == sources


# ---------------------------------------------------------------------------------- delete
def test_delete_then_get_is_404(t: Transcript) -> None:
    scratch_id = t["ingest_scratch"].body["documents"][0]["document_id"]
    assert err(t["delete_invisible"])[:2] == (404, "not_found")
    reply = t["delete"]
    assert reply.status == 200 and reply.body["id"] == scratch_id and reply.body["deleted"] is True
    assert isinstance(reply.body["revision"], int)
    assert err(t["get_deleted"])[:2] == (404, "not_found")
    assert err(t["delete_again"])[:2] == (404, "not_found")


# ---------------------------------------------------------------------------------- host callables
@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ("auth_missing", (401, "unauthorized", "missing or invalid credentials")),
        ("auth_wrong", (401, "unauthorized", "missing or invalid credentials")),
        ("auth_error", (401, "unauthorized", "this token was revoked")),
        (
            "principals_none",
            (
                500,
                "principals_unresolved",
                "the principals resolver returned None; return a list (or TRUSTED), never None",
            ),
        ),
        ("principals_raise", (500, "internal_error", "the server failed to handle this request")),
    ],
)
def test_host_callables_refusing(t: Transcript, step: str, expected: tuple[int, str, str]) -> None:
    assert err(t[step]) == expected


NATIVE = {
    "fastapi": "starlette.requests.Request",
    "flask": "flask.wrappers.Request",
    "django": "django.core.handlers.wsgi.WSGIRequest",
}


def test_host_callables_get_the_native_request_outside_any_event_loop(t: Transcript) -> None:
    kinds = {kind for kind, _ in t.host.calls}
    assert kinds == {NATIVE[t.adapter]}
    # a sync callable may block or use the Django ORM: it never runs on an event loop's thread
    assert not any(running for _, running in t.host.calls)


# ---------------------------------------------------------------------------------- statuses
def test_an_ingest_that_stores_nothing_is_422_with_error_and_report(t: Transcript) -> None:
    reply = t["upload_failed"]
    assert reply.status == 422, reply.body
    assert reply.body.keys() == {"error", "documents", "totals"}
    (doc,) = reply.body["documents"]
    assert doc["status"] == "failed" and doc["failure_reason"] == "extraction_failed"
    assert reply.body["error"] == {"code": doc["failure_reason"], "message": doc["failure_message"]}
    assert reply.body["totals"]["failed"] == 1 and reply.body["totals"]["completed"] == 0


def test_the_report_list_and_detail_agree_on_a_failure(t: Transcript) -> None:
    (reported,) = t["upload_failed"].body["documents"]
    (listed,) = t["list_failed"].body["documents"]
    detail = t["get_failed"].body
    for view in (listed, detail):
        assert (view["status"], view["failure_reason"], view["failure_message"]) == (
            "failed",
            reported["failure_reason"],
            reported["failure_message"],
        )


def test_a_rename_onto_a_taken_name_is_409(t: Transcript) -> None:
    assert err(t["patch_rename_conflict"]) == (
        409,
        "conflict",
        "a document with that name already exists in this source",
    )


def test_health_and_ready_need_no_auth_and_say_only_a_status(t: Transcript) -> None:
    assert (t["health"].status, t["health"].body) == (200, {"status": "ok"})
    # the one other thing /ready says is a fixed sentence about the configuration (this engine has no
    # secret_key, so stored tools are off), never anything that depends on the data
    assert (t["ready"].status, t["ready"].body) == (200, {"status": "ready", "disabled": {"tools": NO_SECRET_KEY}})
    assert err(t["health_wrong_method"])[:2] == (405, "method_not_allowed") and t["health_wrong_method"].allow == "GET"


# ---------------------------------------------------------------------------------- framework level
@pytest.mark.parametrize(
    ("step", "message"),
    [
        ("unknown_route", "no route for GET /nope"),
        ("unknown_nested", "no route for POST /documents/x/y"),
        ("mount_root", "no route for GET /"),
        ("double_slash", "no route for GET //documents"),
    ],
)
def test_unknown_paths_under_the_mount_are_404_json(t: Transcript, step: str, message: str) -> None:
    assert err(t[step]) == (404, "route_not_found", message)


@pytest.mark.parametrize(
    ("step", "allow"),
    [
        ("wrong_method_search", "POST"),
        ("wrong_method_documents", "POST, GET"),
        ("wrong_method_options", "GET"),
        ("wrong_method_unauthenticated", "GET"),
    ],
)
def test_wrong_method_is_405_json_with_allow(t: Transcript, step: str, allow: str) -> None:
    status, code, _ = err(t[step])
    assert (status, code) == (405, "method_not_allowed")
    assert t[step].allow == allow


def test_every_reply_is_json_and_every_failure_the_error_contract(t: Transcript) -> None:
    for step, reply in t.replies.items():
        assert b"Traceback" not in reply.raw and b'File "' not in reply.raw, step
        if step == "oauth_callback_unknown_state":  # the popup's page: HTML by design, its outcome in the page
            assert reply.status == 200 and reply.content_type.split(";")[0] == "text/html", step
            assert '"code":"state_invalid"' in reply.body, step
            continue
        assert reply.content_type.split(";")[0] == "application/json", step
        if reply.status == 422:  # the error contract beside the ingest report
            assert reply.body.keys() == {"error", "documents", "totals"}, step
            assert reply.body["error"].keys() == {"code", "message"}, step
        elif reply.status >= 400 and "items" in reply.body:  # ... or beside a refused list's items
            assert reply.body.keys() == {"error", "items", "totals"}, step
            assert reply.body["error"].keys() == {"code", "message"}, step
        elif reply.status >= 400:
            err(reply)


def test_the_scenario_covers_every_route(t: Transcript) -> None:
    assert {(r.method, r.path) for r in ROUTES} == {
        ("POST", "/documents"),
        ("GET", "/documents"),
        ("GET", "/documents/{document_id}"),
        ("PATCH", "/documents/{document_id}"),
        ("DELETE", "/documents/{document_id}"),
        ("POST", "/search"),
        ("POST", "/knowledge/query"),
        ("GET", "/stats"),
        ("GET", "/health"),
        ("GET", "/ready"),
        ("POST", "/tools/execute"),
        ("GET", "/tools"),
        ("GET", "/documents/{document_id}/versions"),
        ("GET", "/tools/oauth/callback"),
    }, "a route was added: add it to run_scenario"


# ---------------------------------------------------------------------------------- the three agree
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HANDLES = ("revision", "valid_from", "valid_to", "chunk_id", "chunkId")
#: the reference a popup page carries, one per reply
_CORRELATION = re.compile(r"mcpoauth_[0-9a-f]{32}")
_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?$")


def normalise(value: Any, ids: dict[str, str]) -> Any:
    """Replace what differs per run: ids, revisions and chunk ids (numbered by first appearance),
    timestamps, cursors, timings."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in ("timings_ms", "timings"):
                out[key] = "<timings>"
            elif key == "next_cursor" and item is not None:
                out[key] = "<cursor>"
            elif key in _HANDLES and isinstance(item, int | str) and not isinstance(item, bool):
                # a non-trusted caller's revisions and chunk ids are handles of each store's own key
                kind = "chunk" if key in ("chunk_id", "chunkId") else "revision"
                out[key] = ids.setdefault(f"{kind}:{item}", f"<{kind}{len(ids) + 1}>")
            else:
                out[key] = normalise(item, ids)
        return out
    if isinstance(value, list):
        return [normalise(item, ids) for item in value]
    if isinstance(value, str):
        if _TIMESTAMP.match(value):
            return "<timestamp>"
        value = _CORRELATION.sub(lambda m: ids.setdefault(m.group(0), f"<reference{len(ids) + 1}>"), value)
        return _UUID.sub(lambda m: ids.setdefault(m.group(0), f"<id{len(ids) + 1}>"), value)
    return value


def comparable(transcript: Transcript) -> dict[str, tuple[int, str | None, Any]]:
    ids: dict[str, str] = {}
    return {step: (r.status, r.allow, normalise(r.body, ids)) for step, r in transcript.replies.items()}


def test_adapters_agree(recorder: Callable[[str], Transcript]) -> None:
    base, *others = (comparable(recorder(adapter)) for adapter in ADAPTERS)
    for adapter, other in zip(ADAPTERS[1:], others, strict=True):
        assert other.keys() == base.keys()
        differing = [step for step in base if other[step] != base[step]]
        assert not differing, "\n".join(
            f"{step}: {ADAPTERS[0]}={base[step]!r}\n{' ' * len(step)}  {adapter}={other[step]!r}" for step in differing
        )


# ---------------------------------------------------------------------------------- mounting
def _factory(adapter: str) -> Callable[..., Any]:
    import context_engine

    if adapter == "django":
        configure_django()
    return getattr(
        context_engine,
        {"fastapi": "create_router", "flask": "create_flask_blueprint", "django": "create_django_urlpatterns"}[adapter],
    )


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_mount_without_auth_or_principals_is_refused(adapter: str) -> None:
    engine = ContextEngine(make_config("postgresql://unused@localhost/unused"))  # lazy: never connects
    create = _factory(adapter)
    with pytest.raises(TypeError, match="auth is required"):
        create(engine, auth=None, principals=lambda request: [])
    with pytest.raises(TypeError, match="principals is required"):
        create(engine, auth=lambda request: True, principals=None)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_async_host_callables_work_in_every_adapter(adapter: str, pg_base_url: str) -> None:
    async def auth(request: Any) -> bool:
        await asyncio.sleep(0)
        return request.headers.get("Authorization") == f"Bearer {TOKEN}"

    async def principals(request: Any) -> list[str]:
        await asyncio.sleep(0)
        return ["group:hr"]

    with fresh_database(pg_base_url) as url:
        engine = ContextEngine(make_config(url))
        with CLIENTS[adapter](engine, auth, principals) as send:
            call = Caller(send)
            reply = call("GET", "/stats")
            assert reply.status == 200 and reply.body["documents"] == 0, reply.body
            assert err(call("GET", "/stats", token=None))[:2] == (401, "unauthorized")


def test_tools_are_listed_and_run_for_the_callers_principals(t: Transcript) -> None:
    assert t["tools_list"].status == 200 and [x["name"] for x in t["tools_list"].body["tools"]] == ["fn_add"]
    assert t["tools_list_other"].body == {"tools": [], "next_cursor": None}
    assert t["tool_run"].status == 200 and t["tool_run"].body["result"] == 3
    assert err(t["tool_hidden"])[:2] == (404, "tool_not_found")
    assert t["tool_bad_arguments"].status == 400


def test_history_is_readable_through_every_mount(t: Transcript) -> None:
    versions = t["versions"].body["versions"]
    assert t["versions"].status == 200 and [v["version"] for v in versions] == sorted(v["version"] for v in versions)
    assert versions[-1]["valid_to"] is None and all(v["valid_from"] >= 1 for v in versions)
    assert t["versions_hidden"].status == 404
    assert t["get_as_of_first"].status == 200 and t["get_as_of_first"].body["name"] == "hr-policy.md"
    assert t["get_as_of_bad"].status == 400
