"""Many ingests at once: none deadlocks the pool, none fails for its turn, searches keep answering.

Every test here runs on the default pool (``storage.pool_size`` 5 + ``max_overflow`` 10). Before
ingest kept to its share of the pool, each run held one connection for its identity lock and asked
for a second: from 15 concurrent ingests upward every one of them failed with a pool timeout.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from context_engine import TRUSTED, ContextEngine
from routing_core import sync_bridge
from tests.conftest import make_config
from tests.fakes.http_server import FakeHTTPServer, fake_embedding, fake_http_server, fake_openai_embeddings  # noqa: F401
from tests.waiting import HANG_GUARD, finishes, until_async

DIM = 8
TOKEN = "load-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def _auth(request: Any) -> bool:
    return request.headers.get("Authorization") == f"Bearer {TOKEN}"


def _principals(_request: Any) -> Any:
    return TRUSTED


def _remote_config(database_url: str, server: FakeHTTPServer) -> Any:
    # every request must get its turn at the pool however slow the machine: a busy one waits longer
    # than the default 30 s, and a 503 then says nothing about the concurrency under test
    return make_config(
        database_url, embedding=fake_embedding(server, DIM), storage={"auto_migrate": True, "pool_timeout": 600}
    )


def _body(i: int) -> str:
    return f"# Ledger {i}\n\nShipment {i} of harbour cranes left dock {i % 7} on schedule."


async def test_two_hundred_concurrent_ingests_complete_while_sixteen_searches_answer(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    async with ContextEngine(_remote_config(database_url, fake_http_server)) as engine:
        await engine.ingest(text="Harbour cranes are inspected every spring.", name="seed")
        finished = asyncio.Event()
        answers = [0] * 16

        async def searcher(slot: int) -> None:
            while not finished.is_set() or answers[slot] == 0:
                result = await finishes(engine.search("harbour cranes", principals=TRUSTED), "a search during ingest")
                assert result.hits
                answers[slot] += 1
                await asyncio.sleep(0.5)  # a steady stream of searches, not a busy loop

        searches = [asyncio.create_task(searcher(i)) for i in range(16)]
        reports = await finishes(
            asyncio.gather(*(engine.ingest(text=_body(i), name=f"ledger-{i}") for i in range(200))), "200 ingests"
        )
        finished.set()
        await asyncio.gather(*searches)
        await _check_two_hundred(engine, reports, answers)


async def _check_two_hundred(engine: ContextEngine, reports: list[Any], answers: list[int]) -> None:
    """Every ingest completed, every searcher was answered, nothing is left pending or leased."""
    assert Counter(r.documents[0].status for r in reports) == {"completed": 200}
    assert all(n >= 1 for n in answers)  # every searcher got answers while ingest ran
    assert (await engine.stats(principals=TRUSTED)).documents == 201
    sql = await engine._ready()
    async with sql.connect() as conn:
        pending = await conn.scalar(text("SELECT count(*) FROM ce_chunks WHERE embedding IS NULL"))
        leased = await conn.scalar(text("SELECT count(*) FROM ce_documents WHERE lease_holder IS NOT NULL"))
    assert (pending, leased) == (0, 0)


async def test_unnamed_documents_are_separate_and_identical_text_is_unchanged(engine: ContextEngine) -> None:
    first = (await engine.ingest(text="Quarterly audit of the north warehouse.")).documents[0]
    second = (await engine.ingest(text="Menu for the staff canteen on Friday.")).documents[0]
    again = (await engine.ingest(text="Quarterly audit of the north warehouse.")).documents[0]

    assert first.status == second.status == "completed"
    assert first.document_id != second.document_id and first.version == second.version == 1
    assert first.name.startswith("untitled-") and second.name.startswith("untitled-") and first.name != second.name
    assert (again.status, again.skip_reason, again.document_id) == ("skipped", "unchanged", first.document_id)
    # the first stays searchable: the second did not become its version 2
    hits = (await engine.search("north warehouse audit", principals=TRUSTED)).hits
    assert first.document_id in {h.document_id for h in hits}
    assert (await engine.stats(principals=TRUSTED)).documents == 2


async def test_the_same_unnamed_text_under_another_acl_is_another_document(engine: ContextEngine) -> None:
    note = "Locker codes are changed on the first Monday of the month."
    mine = (await engine.ingest(text=note, acl=["group:a"], principals=["group:a"])).documents[0]
    theirs = (await engine.ingest(text=note, acl=["group:b"], principals=["group:b"])).documents[0]
    # no refusal that would tell group:b the text exists under an ACL it does not hold
    assert mine.status == theirs.status == "completed"
    assert mine.document_id != theirs.document_id
    seen_by_b = (await engine.list_documents(principals=["group:b"])).documents
    assert [d.id for d in seen_by_b] == [theirs.document_id]


async def test_concurrent_unnamed_posts_of_one_text_make_one_document(engine: ContextEngine) -> None:
    reports = await asyncio.gather(*(engine.ingest(text="The same note, sent five times.") for _ in range(5)))
    ids = {r.documents[0].document_id for r in reports if r.documents[0].document_id}
    statuses = Counter(r.documents[0].status for r in reports)
    assert statuses["completed"] == 1 and statuses["skipped"] == 4
    assert len(ids) == 1
    assert (await engine.stats(principals=TRUSTED)).documents == 1


def _post_all(send: Callable[[int], tuple[int, Any]], count: int) -> list[tuple[int, Any]]:
    """``send(i)`` from ``count`` threads at once (a WSGI server's worker threads)."""
    results: list[tuple[int, Any] | None] = [None] * count
    start = threading.Barrier(count)

    def worker(i: int) -> None:
        start.wait()
        results[i] = send(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=HANG_GUARD)
    assert not any(t.is_alive() for t in threads), "a request hung"
    return [r for r in results if r is not None]


def _check_posts(replies: list[tuple[int, Any]], count: int) -> None:
    assert len(replies) == count
    assert Counter(status for status, _ in replies) == {201: count}, [b for s, b in replies if s != 201][:3]
    names = {body["documents"][0]["name"] for _, body in replies}
    assert len(names) == count  # 64 unnamed texts, 64 documents
    assert all(body["documents"][0]["status"] == "completed" for _, body in replies)


async def test_sixty_four_concurrent_posts_through_fastapi(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    from fastapi import FastAPI

    from context_engine import create_router

    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    async with ContextEngine(_remote_config(database_url, fake_http_server)) as engine:
        app = FastAPI()
        app.include_router(create_router(engine, auth=_auth, principals=_principals), prefix="/context")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver", timeout=HANG_GUARD) as client:

            async def post(i: int) -> tuple[int, Any]:
                resp = await client.post("/context/documents", json={"text": _body(i)}, headers=HEADERS)
                return resp.status_code, resp.json()

            replies = await asyncio.gather(*(post(i) for i in range(64)))
        _check_posts(list(replies), 64)
        assert (await engine.stats(principals=TRUSTED)).documents == 64


def test_sixty_four_concurrent_posts_through_flask(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    import flask

    from context_engine import create_flask_blueprint

    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    engine = ContextEngine(_remote_config(database_url, fake_http_server))
    app = flask.Flask(__name__)
    app.register_blueprint(create_flask_blueprint(engine, auth=_auth, principals=_principals), url_prefix="/context")
    try:

        def send(i: int) -> tuple[int, Any]:
            resp = app.test_client().post("/context/documents", json={"text": _body(i)}, headers=HEADERS)
            return resp.status_code, resp.get_json()

        _check_posts(_post_all(send, 64), 64)
        assert sync_bridge.run(engine.stats(principals=TRUSTED)).documents == 64
    finally:
        sync_bridge.run(engine.aclose())


def test_sixty_four_concurrent_posts_through_django(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    import json
    import types

    from tests.test_conformance import configure_django

    configure_django()
    from django.test import Client, override_settings
    from django.urls import include, path

    from context_engine import create_django_urlpatterns

    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    engine = ContextEngine(_remote_config(database_url, fake_http_server))
    urlconf = types.ModuleType("context_engine_load_urls")
    urlconf.urlpatterns = [  # type: ignore[attr-defined]
        path("context/", include(create_django_urlpatterns(engine, auth=_auth, principals=_principals)))
    ]
    try:
        with override_settings(ROOT_URLCONF=urlconf):

            def send(i: int) -> tuple[int, Any]:
                resp = Client().post(
                    "/context/documents",
                    data=json.dumps({"text": _body(i)}),
                    content_type="application/json",
                    headers={"Authorization": HEADERS["Authorization"]},
                )
                return resp.status_code, json.loads(resp.content)

            _check_posts(_post_all(send, 64), 64)
        assert sync_bridge.run(engine.stats(principals=TRUSTED)).documents == 64
    finally:
        sync_bridge.run(engine.aclose())


@pytest.mark.parametrize("pool", [(1, 0), (2, 1)])
async def test_a_tiny_pool_still_serves_every_ingest_and_search(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
    pool: tuple[int, int],
) -> None:
    fake_http_server.route("POST", "/v1/embeddings", fake_openai_embeddings(DIM))
    config = _remote_config(database_url, fake_http_server)
    config.storage.pool_size, config.storage.max_overflow = pool
    async with ContextEngine(config) as engine:
        results = await finishes(
            asyncio.gather(
                *(engine.ingest(text=_body(i), name=f"tiny-{i}") for i in range(30)),
                *(engine.search("harbour cranes", principals=TRUSTED) for _ in range(10)),
            ),
            "30 ingests and 10 searches on a tiny pool",
        )
        statuses = Counter(r.documents[0].status for r in results[:30])
        assert statuses == {"completed": 30}
        assert (await engine.stats(principals=TRUSTED)).documents == 30


async def test_ingests_waiting_for_the_model_hold_no_connection_and_searches_answer(
    database_url: str,
    fake_http_server: FakeHTTPServer,  # noqa: F811
) -> None:
    ok = fake_openai_embeddings(DIM)
    release = threading.Event()
    query = "harbour cranes"

    def held(body: Any, headers: dict[str, str], target: Any) -> Any:
        if body.get("input") != [query]:  # documents wait for the model; the search's query does not
            release.wait(HANG_GUARD)
        return ok(body, headers, target)

    fake_http_server.route("POST", "/v1/embeddings", held)
    config = _remote_config(database_url, fake_http_server)
    config.storage.pool_timeout = 5
    async with ContextEngine(config) as engine:
        release.set()
        await engine.ingest(text="Harbour cranes are inspected every spring.", name="seed")
        release.clear()
        fake_http_server.clear()
        runs = [asyncio.create_task(engine.ingest(text=_body(i), name=f"waiting-{i}")) for i in range(40)]
        try:
            # until every run let in has written its document and waits for the model
            await until_async(lambda: len(fake_http_server.requests) >= 7, "seven runs waiting for the model")
            pool = (await engine._ready()).pool
            assert pool.checkedout() == 0  # type: ignore[attr-defined]  # none held while the model works
            result = await finishes(engine.search(query, principals=TRUSTED), "a search while ingests wait")
            assert result.hits
        finally:
            release.set()
        reports = await finishes(asyncio.gather(*runs), "the released ingests")
    assert Counter(r.documents[0].status for r in reports) == {"completed": 40}
