"""The Python snippets of the reference documents, executed against this package as written.

The snippets are read from the reference documents at test time (``CONTEXT_ENGINE_REFERENCE_DOCS`` names their
folder; ``.ci/run`` sets it), so nothing of them is copied here. Each runs in a namespace that holds
what its prose assumes already exists — an ``engine`` on a fresh database, a ``config``, an ``app``,
the host's ``my_auth`` — with two mechanical fills, the same for every snippet:

* a keyword argument written ``name=...`` takes the namespace's ``name``;
* the example host ``https://api.example.com`` is a fake HTTP server on 127.0.0.1: the engine's
  resolver answers a public documentation address for it (so the egress check judges it as the
  public host it stands for) and the host's HTTP client carries its requests to the fake.

A snippet that differs from ours on purpose is listed in :data:`DIFFERS` with the error it raises
here and the reason (the same table is in README, "Where we differ from the reference"); the test
holds that it still raises exactly that, so a fix shows up as a failure to update the table.
Snippets that only speak of the reference's own hosted product are left out by
:func:`product_specific`.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from context_engine import ContextEngine
from context_engine.tools.egress import system_resolver
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer, json_reply
from tests.filegen import make_pdf
from tests.knowledge_fakes import completion

FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
PLACEHOLDER = re.compile(r"\b(\w+)=\.\.\.")
EXAMPLE_HOST = "https://api.example.com"
#: what the example host resolves to for the egress check (a public address; nothing connects to it)
EXAMPLE_ADDRESS = "93.184.215.14"
SECRET = "reference-snippets-secret-key-0123456789"


def reference_dir() -> Path | None:
    named = os.environ.get("CONTEXT_ENGINE_REFERENCE_DOCS")
    return Path(named) if named else None


@dataclass(frozen=True)
class Snippet:
    where: str
    code: str

    def named(self, table: dict[str, Any]) -> Any:
        """The entry of ``table`` whose key (a phrase of the snippet's code) this snippet contains."""
        return next((value for phrase, value in table.items() if phrase in self.code), None)


def product_specific(snippet: Snippet) -> bool:
    """The reference's own hosted API (its URLs and API key), which is not ours to run."""
    return "requests.post(" in snippet.code and "_API_KEY" in snippet.code


def snippets() -> list[Snippet]:
    folder = reference_dir()
    if folder is None or not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Snippet(f"{path.name}:{line}", match.group(1)))
    return [s for s in found if not product_specific(s)]


#: a phrase of the snippet -> (the error it raises here, why we differ)
DIFFERS: dict[str, tuple[type[BaseException], str]] = {
    "presidio_detectors([": (
        ImportError,
        "Presidio is the optional `[presidio]` extra (spaCy and its model), not part of the test install",
    ),
}


def _missing(name: str) -> Exception:
    return NameError(f"the snippet uses {name!r}, which its prose defines elsewhere")


class Namespace(dict):
    """Module globals for a snippet; names its prose takes for granted resolve from ``given``."""

    def __init__(self, given: dict[str, Any]):
        super().__init__()
        self.given = given

    def __missing__(self, name: str) -> Any:
        if name in self.given:
            return self.given[name]
        if name == "approval_id" and "out" in self:  # the prose: "the approval id of the reply above"
            return self["out"]["approval_required"]["approval_id"]
        import builtins

        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise _missing(name)


def fill(code: str) -> str:
    return PLACEHOLDER.sub(r"\1=\1", code)


async def run(code: str, given: dict[str, Any]) -> Namespace:
    """Execute one snippet; an engine it makes of its own is closed afterwards, whatever happened."""
    filled = fill(code)
    namespace = Namespace(given)
    compiled = compile(filled, "<snippet>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    try:
        result = eval(compiled, {"__builtins__": __builtins__}, namespace)
        if asyncio.iscoroutine(result):
            await result
    finally:
        own = dict.get(namespace, "engine")
        if isinstance(own, ContextEngine) and own is not given["engine"]:
            given["made"].append(own)
    return namespace


class ExampleHostTransport(httpx.AsyncBaseTransport):
    """Sends a request for the example host to the fake server over real HTTP; others unchanged."""

    def __init__(self, fake_root: str):
        self.fake = httpx.URL(fake_root)
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == httpx.URL(EXAMPLE_HOST).host:
            request.url = request.url.copy_with(scheme=self.fake.scheme, host=self.fake.host, port=self.fake.port)
            request.headers["Host"] = self.fake.netloc.decode("ascii")
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def example_resolver(host: str, port: int) -> list[str]:
    if host == httpx.URL(EXAMPLE_HOST).host:
        return [EXAMPLE_ADDRESS]
    return await system_resolver(host, port)


@pytest.fixture
def example_api() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as server:
        server.route("GET", "/weather", json_reply(200, {"city": "Lahore", "temp_c": 31}))
        server.route("QUERY", "/orders", json_reply(200, [{"id": 1, "total": 9.5}]))
        yield server


@pytest.fixture
def model() -> Iterator[FakeHTTPServer]:
    """A scripted OpenAI-compatible model: code for compute, an invoice for structured calls."""

    def reply(body: Any, _headers: dict[str, str], _target: Any) -> Any:
        fmt = (body or {}).get("response_format") or {}
        name = (fmt.get("json_schema") or {}).get("name", "")
        if name == "invoice":
            return 200, {}, completion('{"total": 12.5}')
        return 200, {}, completion('{"code": "result = float(dfs[\\"expenses\\"][\\"amount\\"].sum())"}')

    with FakeHTTPServer() as server:
        server.route("POST", "/v1/chat/completions", reply)
        yield server


@pytest.fixture
async def given(database_url: str, model: FakeHTTPServer, example_api: FakeHTTPServer, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[dict[str, Any]]:
    import pandas as pd

    from context_engine import EmbeddingConfig, LLMConfig, RedactionPolicy, RedactionRule

    llm = LLMConfig(provider="custom", base_url=model.url("/v1"), model="scripted", max_retries=0, timeout=30)
    config = make_config(
        database_url,
        llm=llm,
        secret_key=SECRET,
        compute={"enable_code_execution": True},
    )
    (tmp_path / "policy.pdf").write_bytes(make_pdf(["Leave policy: two days per month."]))
    monkeypatch.chdir(tmp_path)

    async def my_auth(*_args: Any) -> dict[str, Any]:
        return {"sub": "user:a"}

    async def my_principals(*_args: Any) -> list[str]:
        return ["user:a"]

    example_client = httpx.AsyncClient(transport=ExampleHostTransport(example_api.url("")))

    def client_for(purpose: str) -> httpx.AsyncClient | None:
        return example_client if purpose == "tool_http" else None

    engine = ContextEngine(config, http_client_factory=client_for, mcp_resolver=example_resolver)
    await engine.ingest(text="Annual leave accrues at two days per month.", name="leave", source_id="hr-handbook",
                        acl=["group:hr"])
    made: list[ContextEngine] = [engine]
    import context_engine

    values = {
        **{name: getattr(context_engine, name) for name in context_engine.__all__ if not name.startswith("create_")},
        "engine": engine,
        "config": config,
        "database_url": database_url,
        "embedding": EmbeddingConfig(),
        "q": "annual leave",
        "user": SimpleNamespace(groups=["group:hr"]),
        "caller": ["group:hr"],
        "result": await engine.search("annual leave", principals=["group:hr"], mode="hybrid"),
        "df": pd.DataFrame({"amount": [1.5, 2.5, 8.5]}),
        "text": "Invoice 7: total due 12.50 EUR.",
        "my_auth": my_auth,
        "my_principals": my_principals,
        "tenant_policy": RedactionPolicy(rules=[RedactionRule(name="emails", detector="email")]),
        "tenant_hash_key": "tenant-hash-key-0123456789abcdef",
        "made": made,
        "cleanups": [],
    }
    yield values
    for each in made:
        await each.aclose()
    await example_client.aclose()
    for cleanup in values["cleanups"]:
        cleanup()


async def weather_tool(given: dict[str, Any], *, requires_approval: bool) -> None:
    """The weather tool an earlier snippet of the same section registered."""
    from context_engine import ToolConfig

    await given["engine"].register_tool(
        ToolConfig(
            name="get_weather",
            kind="http",
            description="Fetch the current weather for a city",
            config={
                "method": "GET",
                "url": EXAMPLE_HOST + "/weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
            requires_approval=requires_approval,
        )
    )


async def sales_tool(given: dict[str, Any]) -> None:
    """The ``sales`` db tool the section speaks of: a table ``orders`` in a database of its own, read
    through a least-privilege role made the way ``context-engine tools reader-role`` makes one."""
    import psycopg

    from context_engine import ToolConfig
    from context_engine.tools import reader_role
    from tests.tools_support import drop_role

    admin = given["database_url"]
    name = f"sales_{uuid.uuid4().hex[:12]}"
    role = f"sales_reader_{uuid.uuid4().hex[:8]}"
    head, _, options = admin.partition("?")
    sales_url = head.rsplit("/", 1)[0] + "/" + name + (f"?{options}" if options else "")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        drop_role(sales_url, role)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    given["cleanups"].append(drop)
    with psycopg.connect(sales_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, name text, total numeric)")
        conn.execute("INSERT INTO orders SELECT i, 'order ' || i, i * 1.5 FROM generate_series(1, 5) AS i")
    async with await psycopg.AsyncConnection.connect(sales_url) as conn:
        planned = await reader_role.plan(conn, sales_url, role, reader_role.new_password(), schemas=["public"])
        await reader_role.create(conn, planned)
    await given["engine"].register_tool(
        ToolConfig(name="sales", kind="db", config={"database_url": planned.url}, acl=["user:a"])
    )


#: a phrase of the snippet -> what the sections before it have set up
SETUP = {
    '"db_sales"': sales_tool,
    'engine.search_tools("weather"': lambda given: weather_tool(given, requires_approval=False),
    'approval_scope="run-42"': lambda given: weather_tool(given, requires_approval=True),
}


def app_for(code: str) -> Any:
    """The host application a routing snippet mounts into."""
    if "create_flask_blueprint" in code:
        from flask import Flask

        return Flask("reference")
    if "create_django_urlpatterns" in code:
        from django.conf import settings

        if not settings.configured:
            settings.configure(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], SECRET_KEY="snippets")
        return None
    from fastapi import FastAPI

    return FastAPI()


SNIPPETS = snippets()


def test_the_reference_documents_are_there() -> None:
    """In CI the reference documents are beside the checkout; elsewhere this module has nothing to run."""
    if os.environ.get("CI") and not SNIPPETS:
        pytest.fail("CONTEXT_ENGINE_REFERENCE_DOCS names no folder of reference documents with Python snippets")
    assert all(s.code.strip() for s in SNIPPETS)


async def run_snippet(snippet: Snippet, given: dict[str, Any]) -> None:
    given["app"] = app_for(snippet.code)
    setup = snippet.named(SETUP)
    if setup is not None:
        await setup(given)
    differs = snippet.named(DIFFERS)
    if differs is None:
        await run(snippet.code, given)
        return
    error, _reason = differs
    with pytest.raises(error):
        await run(snippet.code, given)


if SNIPPETS:  # without the reference documents there is nothing to parametrize (CI always has them)

    @pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.where for s in SNIPPETS])
    async def test_a_reference_snippet_runs_as_written(snippet: Snippet, given: dict[str, Any]) -> None:
        await run_snippet(snippet, given)
