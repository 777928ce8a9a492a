"""The knowledge tool's model-driven actions run the engine's built-ins when no host runner is given:
``query_meta`` over fields extracted at ingest (``ingest.extract_fields``), ``map_reduce`` one model
call per document, ``compute`` in the worker once code execution is switched on; each answers OFF with
its fixed sentence while what it needs is missing. A scripted model on 127.0.0.1 answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from context_engine import TRUSTED, UNSCOPED, ContextEngine, call_knowledge_tool
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer
from tests.knowledge_fakes import completion
from tests.test_document_fields import HINTS, INVOICE, FieldModel


class Model(FieldModel):
    """Extraction and field resolution as ``FieldModel``; map_reduce answers; compute's code."""

    def __call__(self, body: Any, headers: dict[str, str], t: Any) -> Any:
        prompt = body["messages"][-1]["content"]
        fmt = body.get("response_format") or {}
        name = fmt.get("json_schema", {}).get("name") if fmt.get("type") == "json_schema" else None
        if name == "map_answer" or "Does this invoice" in prompt:
            self.bodies.append(body)
            return 200, {}, completion(json.dumps({"answer": "Customer: acme" in prompt}), 30)
        if "dfs" in json.dumps(body):
            self.bodies.append(body)
            return 200, {}, completion(json.dumps({"code": "result = float(dfs['sales']['amount'].sum())"}), 60)
        return super().__call__(body, headers, t)


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        fake.route("POST", "/v1/chat/completions", Model())
        yield fake


def llm(server: FakeHTTPServer) -> dict[str, Any]:
    return {"provider": "custom", "base_url": server.url("/v1"), "model": "m", "max_retries": 0, "timeout": 30}


async def ask(engine: ContextEngine, **args: Any) -> dict[str, Any]:
    return await call_knowledge_tool(engine, principals=TRUSTED, scope=UNSCOPED, **args)


async def test_without_a_model_the_three_actions_are_off(engine: ContextEngine) -> None:
    for action in ("query_meta", "map_reduce", "compute"):
        answer = await ask(engine, action=action, query="total of every invoice")
        assert answer["success"] is False and answer["error"].startswith(f"{action} is off")
    listed = (await ask(engine, action="discover"))["available_actions"]
    assert "query_meta" in json.dumps(listed) and "off" in json.dumps(listed).lower()


async def test_query_meta_and_map_reduce_answer_from_the_built_ins(database_url: str, server: FakeHTTPServer) -> None:
    config = make_config(database_url, llm=llm(server), ingest={"extract_fields": True, "field_hints": HINTS})
    async with ContextEngine(config) as engine:
        for n, who, total in ((1, "acme", "10.5"), (2, "globex", "20")):
            text = INVOICE.format(n=n, who=who, total=total)
            await engine.ingest(text=text, name=f"inv-{n}.txt", source_id="fin", mime="text/plain")
        meta = await ask(engine, action="query_meta", query="the total of each invoice")
        mapped = await ask(engine, action="map_reduce", query="Does this invoice name acme?")
        compute_off = await ask(engine, action="compute", query="total amount")
    assert meta["success"] is True and [f["name"] for f in meta["resolved_fields"]] == ["total"]
    assert sorted(d["structured_data"]["total"] for d in meta["documents"]) == [10.5, 20.0]
    assert mapped["success"] is True and mapped["processed"] == 2
    answers = {r["document_name"]: r["data"] for r in mapped["results"]}
    assert answers == {"inv-1.txt": {"answer": True}, "inv-2.txt": {"answer": False}}
    assert compute_off["success"] is False and compute_off["error"].startswith("compute is off")


async def test_compute_runs_in_the_worker_once_switched_on(database_url: str, server: FakeHTTPServer) -> None:
    config = make_config(
        database_url, llm=llm(server), compute={"enable_code_execution": True, "cpu_seconds": 5, "wall_seconds": 60}
    )
    rows = "region,amount\n" + "\n".join(f"north,{i}" for i in range(1, 101))
    async with ContextEngine(config) as engine:
        await engine.ingest(file=rows.encode(), name="sales.csv", source_id="fin")
        answer = await ask(engine, action="compute", query="total amount")
    assert answer["success"] is True and answer["result"] == float(sum(range(1, 101)))
