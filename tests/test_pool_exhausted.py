"""A request that cannot get a pooled connection within ``storage.pool_timeout`` answers a stable
503 ``storage_busy`` (HTTP) or a retry sentence (knowledge tool), never a 500, and runs nothing."""

from __future__ import annotations

import httpx
from sqlalchemy import text

from context_engine import TRUSTED, UNSCOPED, ContextEngine
from tests.conftest import make_config

TOKEN = "busy-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def _config(database_url: str):  # type: ignore[no-untyped-def]
    return make_config(
        database_url, storage={"auto_migrate": True, "pool_size": 1, "max_overflow": 0, "pool_timeout": 0.3}
    )


async def test_an_exhausted_pool_answers_503_storage_busy_and_stores_nothing(database_url: str) -> None:
    from fastapi import FastAPI

    from context_engine import create_router

    async with ContextEngine(_config(database_url)) as engine:
        await engine.ingest(text="Harbour cranes are inspected every spring.", name="seed")
        app = FastAPI()
        app.include_router(
            create_router(
                engine, auth=lambda r: r.headers.get("Authorization") == f"Bearer {TOKEN}", principals=lambda r: TRUSTED
            ),
            prefix="/context",
        )
        db = await engine.database()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            async with db.connect() as held:  # the pool's only connection, held for the whole request
                await held.execute(text("SELECT 1"))
                search = await client.post("/context/search", json={"query": "harbour cranes"}, headers=HEADERS)
                post = await client.post(
                    "/context/documents", json={"text": "New text.", "name": "late"}, headers=HEADERS
                )
            assert search.status_code == 503
            assert search.json() == {
                "error": {"code": "storage_busy", "message": "every database connection is in use; retry shortly"}
            }
            assert post.status_code == 503 and post.json()["error"]["code"] == "storage_busy"
            # released: the same requests answer, and the refused ingest left nothing behind
            search = await client.post("/context/search", json={"query": "harbour cranes"}, headers=HEADERS)
            assert search.status_code == 200 and search.json()["hits"]
        names = [d.name for d in (await engine.list_documents(principals=TRUSTED)).documents]
        assert names == ["seed"]


async def test_an_exhausted_pool_gives_the_knowledge_tool_a_retry_sentence(database_url: str) -> None:
    async with ContextEngine(_config(database_url)) as engine:
        await engine.ingest(text="Harbour cranes are inspected every spring.", name="seed")
        db = await engine.database()
        async with db.connect() as held:
            await held.execute(text("SELECT 1"))
            answer = await engine.search_knowledge_base(
                action="search", query="harbour cranes", scope=UNSCOPED, principals=TRUSTED
            )
        assert answer == {"success": False, "error": "the knowledge base is busy right now; try again shortly."}
        answer = await engine.search_knowledge_base(
            action="search", query="harbour cranes", principals=TRUSTED, scope=UNSCOPED
        )
        assert answer["success"] is True
