"""A tool's secrets never leave in any encoding a transport applies, over real HTTP against a fake
tool server on 127.0.0.1 that echoes what it received in every form (the raw query string, form
encoding, lower-case hex escapes, JSON with and without ``\\/``, HTML, the Basic header): not in the
result, the audit row, the hook event, an error, or any log record (httpx's request line, a host
client's own logger, a traceback). And a call argument cannot override a fixed query parameter or
header: 400 ``fixed_parameter_override`` naming it, and nothing is sent."""

from __future__ import annotations

import base64
import html
import json
import logging
import re
from typing import Any
from urllib.parse import quote, quote_plus, urlencode

import httpx
import pytest

from context_engine import ContextEngine
from context_engine.hooks import Hooks
from context_engine.tools import ToolConfig, ToolConfigInvalid
from context_engine.tools.errors import FixedParameterOverride
from tests import tools_support
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer, Target
from tests.tools_support import SECRET_KEY, HookLog, table_rows

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated()

hook_log = tools_support.hook_log  # a shared fixture

QUERY_SECRET = "qs+ABC/def=ghi&j k"  # the issue's own value
HEADER_SECRET = 'hdr"A/B\\c+d=e&f<g>'
URL_QUERY_SECRET = "sig/9+8=7&zz"
USER, PASSWORD = "svc-user", "p@ss:w/rd+Q 9\u00e9"
BASIC = f"{USER}:{PASSWORD}"


def lower_hex(text: str) -> str:
    """``text`` with its percent escapes in lower case (``%2b``), as some encoders write them."""
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)


def forms(value: str) -> set[str]:
    """How a transport or an echoing server may spell ``value`` (written out here, independently of
    the engine's own list)."""
    percent = {quote(value, safe=""), quote(value), quote_plus(value), urlencode({"k": value})[2:]}
    percent |= {lower_hex(p) for p in percent}
    escaped = {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    escaped |= {e.replace("/", "\\/") for e in escaped}
    return {value, html.escape(value), *percent, *escaped}


LEAKS = sorted(
    {
        *forms(QUERY_SECRET),
        *forms(HEADER_SECRET),
        *forms(URL_QUERY_SECRET),
        *forms(PASSWORD),
        *forms(BASIC),
        base64.b64encode(BASIC.encode()).decode(),
    }
)


def echo_everything(body: Any, headers: dict[str, str], target: Target) -> tuple[int, dict[str, str], Any]:
    """A careless API that echoes its request in every spelling it knows."""
    authorization = headers.get("authorization", "")
    decoded = base64.b64decode(authorization.split(" ", 1)[1]).decode() if authorization.startswith("Basic ") else ""
    query = target.raw.split("?", 1)[1] if "?" in target.raw else ""
    return (
        200,
        {"Content-Type": "application/json"},
        {
            "raw_query": query,
            "lower_hex": lower_hex(query),
            "form": urlencode(target.query),
            "decoded": target.query,
            "headers": headers,
            "headers_as_json": json.dumps(headers),
            "headers_as_php_json": json.dumps(headers, ensure_ascii=False).replace("/", "\\/"),
            "html": html.escape(json.dumps(target.query, ensure_ascii=False)),
            "basic": decoded,
            "body": body,
        },
    )


def config(server: FakeHTTPServer, **extra: Any) -> dict[str, Any]:
    host = server.url("/echo").split("://", 1)[1]
    url = f"http://{quote(USER, safe='')}:{quote(PASSWORD, safe='')}@{host}?sig={quote_plus(URL_QUERY_SECRET)}"
    return {
        "url": url,
        "headers": {"X-Api-Key": HEADER_SECRET},
        "query": {"api_key": QUERY_SECRET},
        "allowed_hosts": ["127.0.0.1"],
        **extra,
    }


def leaked(texts: list[str]) -> list[tuple[str, str]]:
    return [(form, text[:200]) for text in texts for form in LEAKS if form in text]


async def test_no_secret_leaves_in_any_encoding_anywhere(
    database_url: str, hook_log: HookLog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, every level
    host_log = logging.getLogger("host.outbound")

    async def log_request(request: httpx.Request) -> None:
        host_log.info("sending %s %s with %s", request.method, request.url, dict(request.headers))
        try:
            raise RuntimeError(f"host hook saw {request.url}")
        except RuntimeError:
            host_log.exception("host hook traceback")

    host_client = httpx.AsyncClient(event_hooks={"request": [log_request]})
    with FakeHTTPServer() as server:
        server.route("GET", "/echo", echo_everything)
        server.route("POST", "/echo", echo_everything)
        own = make_config(database_url, secret_key=SECRET_KEY)
        async with ContextEngine(own, hooks=Hooks(on_tool_call=hook_log)) as eng:
            await eng.register_tool(ToolConfig(name="echo", kind="http", config=config(server)))
            await eng.register_tool(ToolConfig(name="post_echo", kind="http", config=config(server, method="POST")))
            results = [
                await eng.execute_tool("http_echo", {"city": "Oslo"}, principals=[]),
                await eng.execute_tool("http_post_echo", {"city": "Oslo"}, principals=[]),
            ]
        hosted = make_config(database_url, secret_key=SECRET_KEY)
        async with ContextEngine(hosted, http_client_factory=lambda purpose: host_client) as eng:
            results.append(await eng.execute_tool("http_echo", {"city": "Rome"}, principals=[]))
        await host_client.aclose()
        sent = server.requests
    # the secrets really went out, encoded: the scrubbing below is tested against real traffic
    assert quote_plus(QUERY_SECRET, safe="") in sent[0].raw_target and sent[0].query["api_key"] == QUERY_SECRET
    assert sent[0].header("x-api-key") == HEADER_SECRET
    assert sent[0].header("authorization") == "Basic " + base64.b64encode(BASIC.encode()).decode()
    assert results[0]["result"]["data"]["decoded"]["city"] == "Oslo"  # the rest of the echo is kept
    assert results[0]["result"]["data"]["headers"]["authorization"] == "Basic [secret]"
    assert any("HTTP Request: GET" in r.getMessage() for r in caplog.records)  # httpx's INFO line was made
    assert any(r.name == "host.outbound" for r in caplog.records)
    texts = [json.dumps(r, ensure_ascii=False) for r in results] + [json.dumps(r) for r in results]
    texts += [json.dumps(table_rows(database_url, "SELECT * FROM ce_tool_calls"), default=str, ensure_ascii=False)]
    texts += [json.dumps(e.__dict__, default=str, ensure_ascii=False) for e in hook_log.events]
    texts += [r.getMessage() for r in caplog.records] + [caplog.text]
    assert leaked(texts) == []


async def test_a_plain_text_echo_is_scrubbed_too(database_url: str, hook_log: HookLog) -> None:
    def echo_text(body: Any, headers: dict[str, str], target: Target) -> tuple[int, dict[str, str], Any]:
        lines = [target.raw, lower_hex(target.raw), headers.get("authorization", ""), json.dumps(headers)]
        return 403, {"Content-Type": "text/plain"}, "denied:\n" + "\n".join(lines)

    with FakeHTTPServer() as server:
        server.route("GET", "/echo", echo_text)
        own = make_config(database_url, secret_key=SECRET_KEY)
        async with ContextEngine(own, hooks=Hooks(on_tool_call=hook_log)) as eng:
            await eng.register_tool(ToolConfig(name="echo", kind="http", config=config(server)))
            out = await eng.execute_tool("http_echo", {"city": "Oslo"}, principals=[])
    assert out["result"]["status_code"] == 403 and out["result"]["data"].startswith("denied:")
    texts = [json.dumps(out), json.dumps(table_rows(database_url, "SELECT * FROM ce_tool_calls"), default=str)]
    texts += [json.dumps(e.__dict__, default=str) for e in hook_log.events]
    assert leaked(texts) == []


@pytest.mark.parametrize(
    ("method", "arguments", "named"),
    [
        ("GET", {"api_key": "override"}, "api_key"),
        ("GET", {"API_KEY": "override"}, "API_KEY"),
        ("GET", {"sig": "override"}, "sig"),
        ("GET", {"x-api-key": "override"}, "x-api-key"),
        ("POST", {"api_key": "override"}, "api_key"),
        ("DELETE", {"city": "Oslo", "Api_Key": "override"}, "Api_Key"),
        ("GET", {"api.key": "override"}, "api.key"),
        ("GET", {"api key": "override"}, "api key"),
        ("GET", {"api_key[]": "override"}, "api_key[]"),
        ("GET", {"X_API_KEY": "override"}, "X_API_KEY"),
    ],
)
async def test_a_call_argument_cannot_override_a_fixed_parameter(
    database_url: str, method: str, arguments: dict[str, Any], named: str
) -> None:
    with FakeHTTPServer() as server:
        server.route(method, "/echo", echo_everything)
        async with ContextEngine(make_config(database_url, secret_key=SECRET_KEY)) as eng:
            await eng.register_tool(ToolConfig(name="echo", kind="http", config=config(server, method=method)))
            with pytest.raises(FixedParameterOverride) as caught:
                await eng.execute_tool("http_echo", arguments, principals=[])
        assert server.requests == []
    assert caught.value.status == 400 and caught.value.code == "fixed_parameter_override"
    assert caught.value.details == {"parameter": named} and repr(named) in caught.value.message
    audit = table_rows(database_url, "SELECT outcome, error_code FROM ce_tool_calls")
    assert audit == [{"outcome": "invalid_arguments", "error_code": "fixed_parameter_override"}]


async def test_a_schema_that_names_a_fixed_parameter_is_refused_at_registration(database_url: str) -> None:
    with FakeHTTPServer() as server:
        schema = {"properties": {"city": {"type": "string"}, "Tenant_ID": {"type": "string"}}}
        fixed = config(server, parameters=schema, query={"tenant_id": "acme-tenant"})
        async with ContextEngine(make_config(database_url, secret_key=SECRET_KEY)) as eng:
            with pytest.raises(ToolConfigInvalid) as caught:
                await eng.register_tool(ToolConfig(name="echo", kind="http", config=fixed))
    assert "'Tenant_ID'" in caught.value.message and "acme-tenant" not in caught.value.message
