"""``POST /knowledge/query`` through FastAPI, Flask and Django: scopes, the per-caller rate limit with
``Retry-After``, body refusals, agents and the model path, answered identically by the three mounts.

The plain no-model cases also run in ``tests/test_conformance.py``; this suite covers what needs a
host ``auth`` that reports scopes and identities, a small rate limit and a scripted LLM server, and
it records response headers (the conformance transcript keeps only ``Allow``).
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from context_engine import TRUSTED, ContextEngine
from routing_core import sync_bridge
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer
from tests.knowledge_fakes import chat, split_into
from tests.test_conformance import configure_django, fresh_database, normalise

ADAPTERS = ("fastapi", "flask", "django")
LIMIT = 3
COMPOUND = "What is the notice period and who signs the lease?"
LEASE = (
    "# Termination\n\nThe tenant may terminate the lease by giving six months' notice by registered letter.\n\n"
    "# Signatures\n\nThe lease is signed by the managing director and by the landlord."
)
PARKING = "Parking spaces are assigned by the facilities team."


@dataclass
class Grant:
    """An ``auth`` result as an object: scopes and identity as attributes."""

    scopes: tuple[str, ...]
    identity: str


def auth(request: Any) -> Any:
    """The host's side: what each test token is granted."""
    token = (request.headers.get("Authorization") or "").removeprefix("Bearer ")
    if token.startswith("key:"):  # every scope, one rate-limit bucket per key
        return {"identity": token[4:]}
    if token == "search-only":
        return {"scopes": ["search"], "identity": "search-only"}
    if token == "knowledge-string":
        return {"scopes": "search knowledge", "identity": "knowledge-string"}
    if token == "knowledge-object":
        return Grant(("knowledge",), "knowledge-object")
    return token == "trusted-host"


def principals(request: Any) -> Any:
    raw = request.headers.get("X-Principals")
    return TRUSTED if raw is None else [p for p in raw.split(",") if p]


# ---------------------------------------------------------------------------------- clients
@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    raw: bytes

    @property
    def body(self) -> Any:
        return json.loads(self.raw) if self.raw else None


Send = Callable[[str, str, bytes | None, dict[str, str]], Reply]


def _fastapi(engine: ContextEngine) -> AbstractContextManager[Send]:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from context_engine import create_router

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        yield
        await engine.aclose()

    app = FastAPI(lifespan=lifespan)
    app.include_router(create_router(engine, auth=auth, principals=principals), prefix="/context")

    @contextmanager
    def session() -> Iterator[Send]:
        with TestClient(app) as client:

            def send(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Reply:
                resp = client.request(method, url, content=body, headers=headers)
                return Reply(resp.status_code, {k.lower(): v for k, v in resp.headers.items()}, resp.content)

            yield send

    return session()


def _flask(engine: ContextEngine) -> AbstractContextManager[Send]:
    import flask

    from context_engine import create_flask_blueprint

    app = flask.Flask(__name__)
    app.testing = True
    app.register_blueprint(create_flask_blueprint(engine, auth=auth, principals=principals), url_prefix="/context")

    @contextmanager
    def session() -> Iterator[Send]:
        client = app.test_client()

        def send(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Reply:
            headers = dict(headers)
            content_type = headers.pop("Content-Type", None)
            resp = client.open(url, method=method, data=body, headers=headers, content_type=content_type)
            return Reply(resp.status_code, {k.lower(): v for k, v in resp.headers.items()}, resp.data)

        try:
            yield send
        finally:
            sync_bridge.run(engine.aclose())

    return session()


def _django(engine: ContextEngine) -> AbstractContextManager[Send]:
    configure_django()
    from django.test import Client, override_settings
    from django.urls import include, path

    from context_engine import create_django_urlpatterns

    urlconf = types.ModuleType("knowledge_route_test_urls")
    urlconf.urlpatterns = [  # type: ignore[attr-defined]
        path("context/", include(create_django_urlpatterns(engine, auth=auth, principals=principals)))
    ]

    @contextmanager
    def session() -> Iterator[Send]:
        client = Client()

        def send(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> Reply:
            headers = dict(headers)
            content_type = headers.pop("Content-Type", "application/octet-stream")
            resp = client.generic(method, url, data=body or b"", content_type=content_type, headers=headers)
            return Reply(resp.status_code, {k.lower(): v for k, v in resp.headers.items()}, resp.content)

        try:
            with override_settings(ROOT_URLCONF=urlconf):
                yield send
        finally:
            sync_bridge.run(engine.aclose())

    return session()


CLIENTS = {"fastapi": _fastapi, "flask": _flask, "django": _django}


# ---------------------------------------------------------------------------------- the scenario
def run_scenario(send: Send) -> dict[str, Reply]:
    def call(body: Any, token: str | None = "key:default", who: str | None = None, raw: bytes | None = None) -> Reply:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if who is not None:
            headers["X-Principals"] = who
        data = raw if raw is not None else json.dumps(body).encode()
        return send("POST", "/context/knowledge/query", data, headers)

    def ingest(text: str, name: str, acl: list[str]) -> None:
        reply = send(
            "POST",
            "/context/documents",
            json.dumps({"text": text, "name": name, "acl": acl}).encode(),
            {"Content-Type": "application/json", "Authorization": "Bearer trusted-host"},
        )
        assert reply.status == 201, reply.body

    ingest(LEASE, "lease.md", ["group:legal"])
    ingest(PARKING, "parking.md", ["group:facilities"])
    r: dict[str, Reply] = {}
    r["expanded"] = call({"query": COMPOUND, "topK": 3, "rerank": False}, token="key:expanded")
    r["no_model"] = call({"query": COMPOUND, "topK": 2, "expand": False, "rerank": False}, token="key:no-model")
    r["anonymous"] = call({"query": "parking", "expand": False}, token="key:anonymous", who="")
    r["facilities"] = call({"query": "parking", "expand": False}, token="key:facilities", who="group:facilities")
    r["missing_query"] = call({"topK": 3}, token="key:missing")
    r["empty_query"] = call({"query": "  "}, token="key:empty")
    r["top_k_0"] = call({"query": "lease", "topK": 0}, token="key:k0")
    r["top_k_21"] = call({"query": "lease", "topK": 21}, token="key:k21")
    r["snake_case"] = call({"query": "lease", "top_k": 3}, token="key:snake")
    r["bad_json"] = call(None, token="key:bad-json", raw=b'{"query": ')
    r["unknown_agent"] = call({"query": "lease", "agentId": "nobody"}, token="key:agent")
    r["unauthenticated"] = call({"query": "lease"}, token=None)
    r["wrong_token"] = call({"query": "lease"}, token="nope")
    r["scope_denied"] = call({"query": "lease"}, token="search-only")
    # the same passages through every other door need the same scope (routing_core.access.scope_for)
    search_only = {"Content-Type": "application/json", "Authorization": "Bearer search-only"}
    r["search_scope_denied"] = send("POST", "/context/search", json.dumps({"query": "lease"}).encode(), search_only)
    r["list_scope_denied"] = send("GET", "/context/documents", None, search_only)
    r["stats_scope_denied"] = send("GET", "/context/stats", None, search_only)
    r["search_with_scope"] = send(
        "POST",
        "/context/search",
        json.dumps({"query": "lease"}).encode(),
        {"Content-Type": "application/json", "Authorization": "Bearer knowledge-string"},
    )
    r["scope_string"] = call({"query": "lease", "expand": False, "rerank": False}, token="knowledge-string")
    r["scope_object"] = call({"query": "lease", "expand": False, "rerank": False}, token="knowledge-object")
    for n in range(1, LIMIT + 1):
        r[f"within_limit_{n}"] = call({"query": "lease", "expand": False, "rerank": False}, token="key:busy")
    r["over_limit"] = call({"query": "lease", "expand": False, "rerank": False}, token="key:busy")
    r["over_limit_bad_body"] = call({"query": ""}, token="key:busy")
    r["other_caller"] = call({"query": "lease", "expand": False, "rerank": False}, token="key:calm")
    return r


@dataclass
class Transcript:
    adapter: str
    replies: dict[str, Reply]
    llm_requests: int

    def __getitem__(self, step: str) -> Reply:
        return self.replies[step]


@pytest.fixture(scope="module")
def recorder(pg_base_url: str) -> Callable[[str], Transcript]:
    done: dict[str, Transcript] = {}

    def record(adapter: str) -> Transcript:
        if adapter not in done:
            with fresh_database(pg_base_url) as url, FakeHTTPServer() as llm:
                subs = ("What is the notice period?", "Who signs the lease?")
                llm.route("POST", "/v1/chat/completions", chat(sub_queries=split_into(*subs)))
                config = make_config(
                    url,
                    llm={"provider": "custom", "base_url": llm.url("/v1"), "model": "fake", "max_retries": 0},
                    knowledge={"rate_limit_per_minute": LIMIT},
                )
                with CLIENTS[adapter](ContextEngine(config)) as send:
                    done[adapter] = Transcript(adapter, run_scenario(send), len(llm.requests))
        return done[adapter]

    return record


@pytest.fixture(scope="module", params=ADAPTERS)
def t(request: pytest.FixtureRequest, recorder: Callable[[str], Transcript]) -> Transcript:
    return recorder(request.param)


def err(reply: Reply) -> tuple[int, str, str]:
    assert reply.body.keys() == {"error"} and reply.body["error"].keys() == {"code", "message"}, reply.body
    return reply.status, reply.body["error"]["code"], reply.body["error"]["message"]


# ---------------------------------------------------------------------------------- answers
def test_the_answer_is_camel_case_with_every_field(t: Transcript) -> None:
    reply = t["expanded"]
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"].startswith("application/json")
    trace = reply.body["trace"]
    assert trace["queries"] == [COMPOUND, "What is the notice period?", "Who signs the lease?"]
    assert trace["vectorBackend"] == "pgvector" and trace["rerankApplied"] is False and trace["tokensUsed"] == 50
    assert set(trace["timings"]) == {"expandMs", "searchMs", "rerankMs"}
    assert all(isinstance(v, int) for v in trace["timings"].values())
    match = reply.body["matches"][0]
    assert set(match) == {
        "sourceId", "sourceName", "collectionId", "dossierName", "chunkId", "section", "page", "content",
        "similarity", "score", "matchedBy", "rerankScore",
    }  # fmt: skip
    assert match["sourceName"] == "lease.md" and match["collectionId"] == match["dossierName"] == "default"
    assert isinstance(match["chunkId"], str) and match["page"] is None and match["rerankScore"] is None
    assert 0 <= match["similarity"] <= 1 and isinstance(match["score"], float)
    assert set(match["matchedBy"]) <= {"vector", "fts"}
    assert t.llm_requests == 1  # the expansion; every other step called no model


def test_the_no_model_path(t: Transcript) -> None:
    reply = t["no_model"]
    assert reply.status == 200 and len(reply.body["matches"]) == 2
    assert reply.body["trace"]["queries"] == [COMPOUND] and reply.body["trace"]["tokensUsed"] == 0


def test_the_acl_applies_and_an_empty_answer_is_200(t: Transcript) -> None:
    empty = t["anonymous"]  # both documents carry an ACL the anonymous caller does not hold
    assert empty.status == 200 and empty.body["matches"] == [] and empty.body["trace"]["candidateCount"] == 0
    reply = t["facilities"]
    assert reply.status == 200 and {m["sourceName"] for m in reply.body["matches"]} == {"parking.md"}


# ---------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ("missing_query", (400, "invalid_request", "query: Field required")),
        ("empty_query", (400, "invalid_request", "query must be a non-empty string")),
        ("top_k_0", (400, "invalid_request", "topK: Input should be greater than or equal to 1")),
        ("top_k_21", (400, "invalid_request", "topK: Input should be less than or equal to 20")),
        ("snake_case", (400, "invalid_request", "top_k: Extra inputs are not permitted")),
        ("unknown_agent", (404, "agent_not_found", "agent nobody has no linked sources")),
        ("unauthenticated", (401, "unauthorized", "missing or invalid credentials")),
        ("wrong_token", (401, "unauthorized", "missing or invalid credentials")),
        ("scope_denied", (403, "scope_denied", "these credentials lack the 'knowledge' scope")),
        ("search_scope_denied", (403, "scope_denied", "these credentials lack the 'knowledge' scope")),
        ("list_scope_denied", (403, "scope_denied", "these credentials lack the 'knowledge' scope")),
        ("stats_scope_denied", (403, "scope_denied", "these credentials lack the 'knowledge' scope")),
    ],
)
def test_refusals(t: Transcript, step: str, expected: tuple[int, str, str]) -> None:
    assert err(t[step]) == expected


def test_invalid_json_is_400(t: Transcript) -> None:
    assert err(t["bad_json"])[:2] == (400, "invalid_json")


@pytest.mark.parametrize("step", ["scope_string", "scope_object", "search_with_scope"])
def test_the_knowledge_scope_admits(t: Transcript, step: str) -> None:
    assert t[step].status == 200, t[step].body


# ---------------------------------------------------------------------------------- the rate limit
def test_past_the_rate_limit_is_429_with_retry_after(t: Transcript) -> None:
    for n in range(1, LIMIT + 1):
        assert t[f"within_limit_{n}"].status == 200
    reply = t["over_limit"]
    status, code, message = err(reply)
    assert (status, code) == (429, "rate_limited") and f"more than {LIMIT} knowledge queries per minute" in message
    assert 1 <= int(reply.headers["retry-after"]) <= 60
    assert err(t["over_limit_bad_body"])[:2] == (429, "rate_limited")  # counted before the body is read
    assert t["other_caller"].status == 200  # per caller


# ---------------------------------------------------------------------------------- the three agree
def comparable(transcript: Transcript) -> dict[str, Any]:
    ids: dict[str, str] = {}
    return {
        step: (r.status, r.headers.get("retry-after") is not None, normalise(r.body, ids))
        for step, r in transcript.replies.items()
    }


def test_adapters_agree(recorder: Callable[[str], Transcript]) -> None:
    base, *others = (comparable(recorder(adapter)) for adapter in ADAPTERS)
    for adapter, other in zip(ADAPTERS[1:], others, strict=True):
        differing = [step for step in base if other[step] != base[step]]
        assert not differing, f"{adapter} differs from fastapi on {differing}"
