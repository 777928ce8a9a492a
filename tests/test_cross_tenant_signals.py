"""No signal crosses tenants: writes a caller cannot see change nothing it is told. Its revision
(stats, the knowledge tool's ``discover``, an ``as_of`` ahead of the store), its counts, what a
search reports about how it ran (``usage`` without timings; no vector plan, whose figures are sized
by the whole index), its lists and its errors are the same before and after another tenant's
ingests, re-ACLs and deletes."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from context_engine import TRUSTED, UNSCOPED, ContextEngine
from context_engine.errors import NotFound
from tests.conftest import make_config
from tests.fakes.word_embedder import WordEmbedder

A = ["tenant:a"]


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in usage.items() if k not in ("timings_ms", "read_from")}


async def _observe(engine: ContextEngine, doc_id: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    stats = await engine.stats(principals=A)
    seen["stats"] = (stats.documents, stats.chunks, stats.by_status, stats.sources, stats.revision)
    for query in ("harbour ledger", "zebra"):
        result = await engine.search(query, principals=A, top_k=10)
        seen[f"search {query}"] = ([(h.chunk_id, h.score) for h in result.hits], _usage(result.usage))
        grouped = await engine.search(query, principals=A, top_k=5, group_by="document")
        seen[f"grouped {query}"] = _usage(grouped.usage)
    far = await engine.search("harbour", principals=A, as_of=10_000)
    seen["as_of ahead"] = [(h.chunk_id, h.score) for h in far.hits]
    seen["list"] = [(d.id, d.version, d.revision) for d in (await engine.list_documents(principals=A)).documents]
    discover = await engine.search_knowledge_base(action="discover", principals=A, scope=UNSCOPED)
    seen["discover"] = (discover["revision"], discover["count"])
    answer = await engine.knowledge_query("harbour", principals=A, expand=False, rerank=False)
    seen["knowledge"] = ([m.chunk_id for m in answer.matches], answer.trace.candidate_count)
    for missing in (str(uuid.uuid4()), doc_id):
        try:
            await engine.get_document(missing, principals=["tenant:z"])
        except NotFound as exc:
            seen.setdefault("errors", []).append((exc.status, exc.code, exc.message.replace(missing, "ID")))
    return seen


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_hidden_writes_change_nothing_a_caller_sees(database_url: str) -> None:
    async with ContextEngine(make_config(database_url), embedder=WordEmbedder()) as engine:
        own = await engine.ingest(text="harbour ledger zebra", name="a1.md", source_id="a", acl=A, principals=A)
        await engine.ingest(text="zebra orbit", name="a2.md", source_id="a", acl=A, principals=A)
        doc_id = own.documents[0].document_id
        before = await _observe(engine, doc_id)
        # another tenant, many times the caller's size: ingests, a re-ACL, a rename, deletes
        hidden = []
        for i in range(40):
            report = await engine.ingest(
                text=f"harbour ledger zebra copper {i}", name=f"b{i}.md", source_id="b", acl=["tenant:b"],
                principals=TRUSTED,
            )
            hidden.append(report.documents[0].document_id)
        await engine.update_document(hidden[0], acl=["tenant:c"], principals=TRUSTED)
        await engine.update_document(hidden[1], name="renamed.md", principals=TRUSTED)
        for doc in hidden[2:6]:
            await engine.delete_document(doc, principals=TRUSTED)
        assert await engine.revision() > before["stats"][4] + 40
        after = await _observe(engine, doc_id)
        assert after == before
        # a trusted caller is still told the plan and the store's revision
        trusted = await engine.search("zebra", principals=TRUSTED)
        assert "vector_plan" in trusted.usage
        assert (await engine.search("zebra", principals=A)).usage.get("vector_plan") is None
