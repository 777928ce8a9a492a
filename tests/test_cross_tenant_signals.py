"""No signal crosses tenants: what a non-trusted caller is told depends only on rows it may read.

Two stores run the same script of one tenant's writes and reads. In the quiet store nobody else
writes; in the noisy one another tenant has many times the caller's rows and writes (ingests, a
batch, re-ACLs, renames, deletes) between every step of the caller. Everything the caller is told
(write responses of ingest, ingest_many, update and delete; search, grouped search, get, list,
versions, stats, the knowledge query, the knowledge tool's discover and search, the provider, as_of
reads at every revision it was given, and the refusals) must be the same in both, except for values
that are opaque tokens to it: document ids (random), revision handles and chunk ids. Those are
compared by their pattern (which of them are equal), the only thing a caller can read off a token
without the store's key. Timestamps are left out: they are the caller's own clock readings.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import text

from context_engine import TRUSTED, UNSCOPED, ContextEngine
from context_engine.errors import ContextEngineError
from context_engine.knowledge.provider import KnowledgeScope, local_knowledge
from context_engine.revisions import view as revision_view
from tests.conftest import make_config
from tests.fakes.word_embedder import WordEmbedder
from tests.revisions_support import fresh_database, sibling_url

A = ["tenant:a"]
#: fields whose integer values are revision handles or chunk ids: tokens to the caller
TOKEN_FIELDS = {"revision", "valid_from", "valid_to", "chunk_id", "chunkId", "as_of", "oldest", "value"}
#: the caller's own clock readings and where the read ran: not about anyone's rows
DROPPED_FIELDS = {"created_at", "updated_at", "timings_ms", "timings", "read_from", "elapsed_ms"}
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class Tokens:
    """Replaces each distinct token by the order it was first seen in."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, Any], str] = {}

    def __call__(self, kind: str, value: Any) -> str:
        return self.seen.setdefault((kind, value), f"{kind}#{len(self.seen)}")

    def shape(self, value: Any, field: str | None = None) -> Any:
        if hasattr(value, "model_dump"):
            value = value.model_dump(mode="json")
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        if isinstance(value, dict):
            return {k: self.shape(v, k) for k, v in sorted(value.items()) if k not in DROPPED_FIELDS}
        if isinstance(value, list | tuple):
            shaped = [self.shape(v, field) for v in value]
            if shaped and all(isinstance(v, dict) and "id" in v and "name" in v for v in shaped):
                # a page is ordered by creation time, then by the (random) id: documents filed in
                # one batch share a time, so their order is the ids' and not about anyone's rows
                shaped.sort(key=lambda v: (str(v["name"]), str(v.get("version"))))
            return shaped
        if field in TOKEN_FIELDS and isinstance(value, int | str) and not isinstance(value, bool):
            kind = "chunk" if field in ("chunk_id", "chunkId") else "revision"
            return self(kind, str(value))
        if isinstance(value, str):
            return UUID.sub(lambda m: self("id", m.group(0)), value)
        return value


async def _answer(tokens: Tokens, work: Awaitable[Any]) -> Any:
    try:
        return tokens.shape(await work)
    except ContextEngineError as exc:
        return ("error", exc.status, exc.code, tokens.shape(exc.message), tokens.shape(exc.details))


async def _field(name: str, work: Awaitable[Any]) -> dict[str, Any]:
    return {name: await work}


class Hidden:
    """Another tenant's activity: many rows, and writes of every kind between the caller's steps."""

    def __init__(self, engine: ContextEngine) -> None:
        self.engine, self.docs, self.n = engine, [], 0

    async def burst(self, size: int = 6) -> None:
        for _ in range(size):
            self.n += 1
            report = await self.engine.ingest(
                text=f"harbour ledger zebra copper hidden {self.n}", name=f"b{self.n}.md", source_id="a",
                acl=["tenant:b"], principals=["tenant:b"],
            )
            self.docs.append(report.documents[0].document_id)
        await self.engine.ingest_many(
            [{"text": f"zebra orbit hidden batch {self.n} {i}", "name": f"m{self.n}-{i}.md", "acl": ["tenant:b"]}
             for i in range(3)],
            principals=["tenant:b"],
        )
        await self.engine.update_document(self.docs[-1], acl=["tenant:c"], principals=TRUSTED)
        await self.engine.update_document(self.docs[-2], name=f"renamed-{self.n}.md", principals=["tenant:b"])
        await self.engine.delete_document(self.docs.pop(0), principals=["tenant:b"])


async def _script(engine: ContextEngine, between: Callable[[], Awaitable[None]]) -> tuple[dict[str, Any], Tokens]:
    """The caller's writes with ``between`` run before each, then every read it can make."""
    tokens = Tokens()
    told: list[Any] = []
    handles: list[int] = []

    async def write(work: Awaitable[Any]) -> Any:
        await between()
        result = await work
        told.append(tokens.shape({"revision": result} if isinstance(result, int) else result))
        return result

    first = await write(engine.ingest(text="harbour ledger zebra", name="a1.md", source_id="a", acl=A, principals=A))
    second = await write(engine.ingest(text="zebra orbit tides", name="a2.md", source_id="a", acl=A, principals=A))
    a1, a2 = first.documents[0].document_id, second.documents[0].document_id
    handles += [first.documents[0].revision, second.documents[0].revision]
    renamed = await write(engine.update_document(a1, name="a1-renamed.md", principals=A))
    handles.append(renamed.revision)
    batch = await write(engine.ingest_many(
        [{"text": "copper harbour notes", "name": "a3.md", "source_id": "a", "acl": A},
         {"text": "ledger of the orbit", "name": "a4.md", "source_id": "a", "acl": A}],
        principals=A,
    ))
    handles += [item.report.revision for item in batch.items if item.report is not None]
    handles.append(await write(engine.delete_document(a2, principals=A)))
    await between()

    provider = local_knowledge(engine)
    scope = KnowledgeScope(source_ids=("a",), principals=tuple(A))
    reads: dict[str, Callable[[], Awaitable[Any]]] = {
        "stats": lambda: engine.stats(principals=A),
        "revision": lambda: _field("revision", engine.revision(principals=A)),
        "list": lambda: engine.list_documents(principals=A),
        "get a1": lambda: engine.get_document(a1, principals=A),
        "get a2 (deleted)": lambda: engine.get_document(a2, principals=A),
        "get missing": lambda: engine.get_document(str(uuid.uuid4()), principals=A),
        "versions a1": lambda: engine.document_versions(a1, principals=A),
        "versions a2": lambda: engine.document_versions(a2, principals=A),
        "knowledge": lambda: engine.knowledge_query("harbour zebra", principals=A, expand=False, rerank=False),
        "discover": lambda: engine.search_knowledge_base(action="discover", principals=A, scope=UNSCOPED),
        "tool search": lambda: engine.search_knowledge_base(
            action="search", query="harbour ledger", principals=A, scope=UNSCOPED),
        "provider revision": lambda: provider.revision(scope),
        "provider search": lambda: provider.search(scope, "harbour zebra", k=10),
        "as_of no handle": lambda: engine.search("harbour", principals=A, as_of=10_000),
        "min_revision no handle": lambda: engine.list_documents(principals=A, min_revision=10_000),
    }
    for query in ("harbour ledger", "zebra", "orbit copper"):
        reads[f"search {query}"] = lambda q=query: engine.search(q, principals=A, top_k=10)
        reads[f"grouped {query}"] = lambda q=query: engine.search(q, principals=A, top_k=5, group_by="document")
    seen: dict[str, Any] = {"writes": told}
    for name, read in reads.items():
        seen[name] = await _answer(tokens, read())
    stats, discover = await engine.stats(principals=A), await engine.search_knowledge_base(
        action="discover", principals=A, scope=UNSCOPED)
    handles += [stats.revision, discover["revision"]]
    for i, handle in enumerate(handles):  # every revision it was told, passed back
        at = f"as_of {tokens('revision', str(handle))} ({i})"
        seen[f"{at} search"] = await _answer(tokens, engine.search("harbour zebra", principals=A, as_of=handle))
        seen[f"{at} list"] = await _answer(tokens, engine.list_documents(principals=A, as_of=handle))
        seen[f"{at} get a1"] = await _answer(tokens, engine.get_document(a1, principals=A, as_of=handle))
        seen[f"{at} stats"] = await _answer(tokens, engine.stats(principals=A, as_of=handle))
        seen[f"{at} knowledge"] = await _answer(tokens, engine.knowledge_query(
            "harbour", principals=A, expand=False, rerank=False, as_of=handle))
        seen[f"{at} provider"] = await _answer(tokens, provider.search(scope, "harbour zebra", as_of=handle))
    return seen, tokens


@pytest.fixture
def noisy_url(database_url: str) -> Iterator[str]:
    with fresh_database(sibling_url(database_url, "_noisy")) as url:
        yield url


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_hidden_rows_and_writes_change_nothing_a_caller_is_told(database_url: str, noisy_url: str) -> None:
    async def nothing() -> None:
        return None

    async with ContextEngine(make_config(database_url), embedder=WordEmbedder()) as engine:
        quiet, _ = await _script(engine, nothing)
    async with ContextEngine(make_config(noisy_url), embedder=WordEmbedder()) as engine:
        hidden = Hidden(engine)
        await hidden.burst(40)  # many times the caller's rows before it starts
        noisy, tokens = await _script(engine, hidden.burst)
        store = await engine.revision()
        assert store > 100
        async with (await engine.database()).connect() as conn:
            last_chunk = int(await conn.scalar(text("SELECT max(id) FROM ce_chunks")))
        # the tokens are no numbers of the store: a revision or chunk id told as itself would count,
        # in its gaps, the hidden writes (the pattern comparison below cannot see that)
        told = {kind: [int(v) for k, v in tokens.seen if k == kind] for kind in ("revision", "chunk")}
        assert told["revision"] and told["chunk"]
        assert all(v > store for v in told["revision"]) and all(v > last_chunk for v in told["chunk"])
        # a trusted caller is still told the plan and the store's revision
        trusted = await engine.search("zebra", principals=TRUSTED)
        assert "vector_plan" in trusted.usage
        assert (await engine.search("zebra", principals=A)).usage.get("vector_plan") is None
    differ = {k: (quiet[k], noisy.get(k)) for k in quiet if quiet[k] != noisy.get(k)}
    assert differ == {} and noisy == quiet
    seen = quiet
    # the script did read something: hits, its documents, its history, a refusal without numbers
    assert seen["search zebra"]["hits"] and len(seen["list"]["documents"]) == 3
    assert [v["version"] for v in seen["versions a1"]] == [1, 2]
    assert seen["as_of no handle"][:3] == ("error", 400, "invalid_request")
    assert not re.search(r"\d", seen["as_of no handle"][3])


async def test_revision_handles_count_nothing_and_are_refused_when_made_up(database_url: str) -> None:
    """A caller's handles for consecutive revisions are not consecutive, a trusted caller still
    reads the store's numbers, and a number no handle of a reached revision is refused."""
    async with ContextEngine(make_config(database_url), embedder=WordEmbedder()) as engine:
        told = []
        for i in range(5):
            report = await engine.ingest(text=f"zebra {i}", name=f"z{i}.md", acl=A, principals=A)
            told.append(report.documents[0].revision)
        store = await engine.revision()
        assert [await engine.revision_handle(r) for r in range(store - 4, store + 1)] == told
        assert not all(b - a == 1 for a, b in itertools.pairwise(told))  # the steps count nothing
        assert all(0 <= h < 2**53 for h in told)  # survives a JSON parser that reads doubles
        doc = await engine.get_document(report.documents[0].document_id, principals=TRUSTED)
        assert doc.revision == store
        for made_up in (store, store + 1, 2**60):
            with pytest.raises(ContextEngineError) as refused:
                await engine.search("zebra", principals=A, as_of=made_up)
            assert refused.value.code == "invalid_request" and str(made_up) not in refused.value.message
        past = await engine.search("zebra", principals=A, as_of=told[0], top_k=10)
        assert [h.chunk_text for h in past.hits] == ["zebra 0"]
        # which path a read as of its last write takes depends on its own rows only: hidden writes
        # since leave it on the current (indexed) path, its own next write moves it to history's
        db = await engine.database()
        revs = await revision_view.for_caller(db, tuple(A))
        await engine.ingest(text="zebra hidden", name="h.md", acl=["tenant:b"], principals=["tenant:b"])
        assert await engine.revision() == store + 1
        assert await revision_view.resolve(db, store, revs, tuple(A)) is None
        await engine.ingest(text="zebra 5", name="z5.md", acl=A, principals=A)
        assert await revision_view.resolve(db, store, revs, tuple(A)) == store
