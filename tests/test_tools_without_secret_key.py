"""A deployment without ``secret_key`` serves with its stored tools off, says so, and never answers 500.

Stored (http, db, mcp) tool configs are encrypted under the key; a server started without it (a
restart that lost CE_SECRET_KEY) starts anyway: ``/ready`` and the knowledge tool's ``discover``
say the tools are off, and calling one is a 503 ``tools_disabled`` before anything is sent.
Function tools, which store no config, keep running.
"""

from __future__ import annotations

from typing import Any

import httpx

from context_engine import TRUSTED, UNSCOPED, ContextEngine, call_knowledge_tool, create_router
from context_engine.tools import ToolConfig
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer, fake_http_server, json_reply  # noqa: F401
from tests.tools_support import SECRET_KEY

AUTH = {"Authorization": "Bearer ops"}


def _weather(server: FakeHTTPServer) -> ToolConfig:
    return ToolConfig(
        name="weather",
        kind="http",
        description="the weather in a city",
        config={
            "url": server.url("/weather"),
            "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"]},
            "allowed_hosts": ["127.0.0.1"],
        },
    )


async def _call(engine: ContextEngine, method: str, path: str, body: Any = None) -> httpx.Response:
    from fastapi import FastAPI

    app = FastAPI()
    app.include_router(
        create_router(engine, auth=lambda r: r.headers.get("Authorization") == AUTH["Authorization"],
                      principals=lambda r: TRUSTED)
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        return await client.request(method, path, json=body, headers=AUTH)


async def test_without_the_key_stored_tools_are_off_said_so_and_never_a_500(
    database_url: str, fake_http_server: FakeHTTPServer  # noqa: F811
) -> None:
    fake_http_server.route("GET", "/weather", lambda body, headers, target: json_reply({"sky": "clear"}))
    async with ContextEngine(make_config(database_url, secret_key=SECRET_KEY)) as keyed:
        await keyed.register_tool(_weather(fake_http_server))
        ready = await _call(keyed, "GET", "/ready")
        assert ready.status_code == 200 and "disabled" not in ready.json()

    async with ContextEngine(make_config(database_url)) as engine:  # restarted without CE_SECRET_KEY
        engine.register_function_tool(lambda a, b: a + b, name="add", description="add two numbers")
        ready = await _call(engine, "GET", "/ready")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready" and "CE_SECRET_KEY" in ready.json()["disabled"]["tools"]

        discovered = await call_knowledge_tool(engine, principals=TRUSTED, scope=UNSCOPED, action="discover")
        assert discovered["governed_tools"].startswith("OFF: http, db and mcp tools are disabled")

        refused = await _call(engine, "POST", "/tools/execute", {"name": "http_weather", "arguments": {"city": "Oslo"}})
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "tools_disabled"
        assert fake_http_server.requests == []  # nothing was sent

        ran = await _call(engine, "POST", "/tools/execute", {"name": "fn_add", "arguments": {"a": 2, "b": 3}})
        assert ran.status_code == 200, ran.text
