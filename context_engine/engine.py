"""``ContextEngine``: the one object behind every door (methods, routes, CLI).

Construction is cheap and lazy: nothing connects until the first call that needs the
database, and ``aclose()`` releases the pool, the providers the engine built, and the embedded
server handle.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import IO, Any

import httpx
from sqlalchemy import text as sql_text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.config import ContextEngineConfig
from context_engine.embeddings.base import Embedder
from context_engine.errors import (
    ContextEngineError,
    Forbidden,
    InvalidRequest,
    NotFound,
    StorageUnavailable,
)
from context_engine.hooks import Hooks
from context_engine.ingest.pipeline import Ingestor, open_source
from context_engine.knowledge.models import AgentLinks, KnowledgeResult
from context_engine.models import (
    FAILURE_MESSAGES,
    Document,
    DocumentPage,
    DocumentReport,
    Hit,
    IngestReport,
    SearchResult,
    Stats,
)
from context_engine.principals import TRUSTED, holds_acl, resolve
from context_engine.redaction import RedactionPolicy
from context_engine.redaction.apply import IngestScrubber, Redactor, effective_key
from context_engine.retrieval import fusion, legs, query_shape
from context_engine.retrieval.legs import Scope
from context_engine.storage import repository as repo
from context_engine.storage.database import Database
from context_engine.storage.migrate import migrate

log = logging.getLogger("context_engine")

HttpClientFactory = Callable[[str], "httpx.AsyncClient | None"]
FileInput = bytes | str | os.PathLike[str] | IO[bytes]
MAX_QUERY_CHARS = 4000
_EMBED_BATCH = 64


class ContextEngine:
    """Ingest, search and manage documents on PostgreSQL with ACLs enforced in SQL."""

    def __init__(
        self,
        config: ContextEngineConfig | None = None,
        *,
        http_client_factory: HttpClientFactory | None = None,
        embedder: Embedder | None = None,
        hooks: Hooks | None = None,
    ):
        self.config = config or ContextEngineConfig()
        self._http_client_factory = http_client_factory
        self._db = Database(self.config)
        self._embedder = embedder
        self._owns_embedder = embedder is None
        self._schema_checked = False
        self.hooks = hooks or Hooks()
        self._ingestor = Ingestor(self)
        self._text_search_config = self.config.search.text_search_config
        #: the engine a view was made from (itself for an engine)
        self._root: ContextEngine = self
        self._policy: RedactionPolicy = self.config.redaction
        self._policy_key = effective_key(self._policy, None, self.config.redaction_secret_key, self.config.secret_key)

    def with_redaction(self, policy: RedactionPolicy, *, secret_key: str | bytes | None = None) -> ContextEngine:
        """A view applying ``policy`` (and hashing with ``secret_key``) on every method.

        It shares this engine's pool, providers and hooks; closing it closes nothing.
        """
        if not isinstance(policy, RedactionPolicy):
            raise TypeError("policy must be a RedactionPolicy")
        view = copy.copy(self)
        view._root = self._root
        view._policy = policy
        view._policy_key = effective_key(policy, secret_key, self.config.redaction_secret_key, self.config.secret_key)
        view._ingestor = Ingestor(view)
        return view

    def _redactor(
        self, caller: tuple[str, ...] | None, redaction: RedactionPolicy | None, key: str | bytes | None
    ) -> Redactor:
        """The output redaction for one call: a per-call pair wins over the engine's or view's."""
        if redaction is None:
            return Redactor(self._policy, key if key is not None else self._policy_key, caller)
        resolved = effective_key(
            redaction,
            key if key is not None else self._policy_key,
            self.config.redaction_secret_key,
            self.config.secret_key,
        )
        return Redactor(redaction, resolved, caller)

    def _scrubber(self) -> IngestScrubber:
        return IngestScrubber(self._policy, self._policy_key)

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> ContextEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._root is not self:
            return  # a view owns nothing
        if self._embedder is not None and self._owns_embedder:
            await self._embedder.aclose()
            self._embedder = None
        await self._db.aclose()

    @property
    def embedder(self) -> Embedder:
        if self._root is not self:
            return self._root.embedder
        if self._embedder is None:
            from context_engine.embeddings.factory import build_embedder

            self._embedder = build_embedder(self.config.embedding, self._http_client_factory)
        return self._embedder

    async def _ready(self) -> AsyncEngine:
        """The pool for the running loop; migrates (or checks) the schema once per engine."""
        if self._root is not self:
            sql = await self._root._ready()
            self._text_search_config = self._root._text_search_config
            return sql
        sql = await self._db.engine()
        if not self._schema_checked:
            if self._db.embedded or self.config.storage.auto_migrate:
                # idempotent and serialised by an advisory lock, so a race here is harmless
                report = await migrate(
                    sql, dim=self.embedder.dim, text_search_config=self.config.search.text_search_config
                )
                self._text_search_config = report.text_search_config
            else:
                self._text_search_config = await self._check_schema(sql)
            self._schema_checked = True
        return sql

    async def _check_schema(self, sql: AsyncEngine) -> str:
        try:
            async with sql.connect() as conn:
                rows = dict((await conn.execute(sql_text("SELECT key, value FROM ce_meta"))).all())
        except Exception as exc:
            raise StorageUnavailable(
                "the database has no context-engine schema; run "
                f"`context-engine migrate --database-url URL --dim {self.embedder.dim}` first"
            ) from exc
        if int(rows.get("embedding_dim", 0)) != self.embedder.dim:
            from context_engine.errors import DimensionMismatch

            raise DimensionMismatch(
                f"the database is locked to embedding dimension {rows.get('embedding_dim')}, "
                f"but the configured model produces {self.embedder.dim}"
            )
        return rows.get("text_search_config", "english")

    async def revision(self) -> int:
        """The store's current monotonic revision."""
        return await repo.current_revision(await self._ready())

    # ------------------------------------------------------------------ ingest
    async def ingest(
        self,
        *,
        text: str | None = None,
        file: FileInput | None = None,
        name: str | None = None,
        source_id: str = "default",
        acl: Sequence[str] | None = None,
        attributes: dict[str, Any] | None = None,
        mime: str | None = None,
        principals: Iterable[str] | object = TRUSTED,
    ) -> IngestReport:
        """Ingest one document. A bad document becomes a ``failed`` report, never an exception.

        Raises only for a bad call (both or neither of text/file, an ACL the caller does not hold)
        and for ``IngestTooLarge`` (an intake cap refuses, it never trims). A provider failure
        mid-embedding leaves the document in status ``embedding``; see ``resume_embeddings``.
        """
        if (text is None) == (file is None):
            raise InvalidRequest("pass exactly one of text= or file=")
        caller = resolve(principals)  # type: ignore[arg-type]
        acl_list = _clean_acl(acl)
        if not holds_acl(acl_list, caller):
            raise Forbidden("you may only file a document under an ACL you hold")
        if not isinstance(source_id, str) or not source_id.strip():
            raise InvalidRequest("source_id must be a non-empty string")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise InvalidRequest("name must be a non-empty string")
        source, name = open_source(text, file, name, self.config.ingest.max_file_bytes)
        scrub = self._scrubber()
        name = scrub.text(name) if name is not None else None  # None: named after its content
        attributes = scrub.obj(dict(attributes or {}))
        if text is not None and mime is None:
            mime = "text/html" if name and name.lower().endswith((".html", ".htm")) else "text/markdown"
        report = await self._ingestor.ingest(
            source,
            name=name,
            source_id=source_id,
            acl=acl_list,
            attributes=attributes,
            mime=mime,
            caller=caller,
        )
        red = self._redactor(caller, None, None)
        report.name = red.text(report.name) or report.name
        report.error = red.text(report.error)
        return _totals([report])

    async def resume_embeddings(self, document_id: str | None = None) -> IngestReport:
        """Embed only the rows still missing a vector, for one document or every resumable one.

        A sweep (no id) skips documents whose run is still moving (its lock is held).
        """
        doc_id = _check_uuid(document_id) if document_id is not None else None
        return _totals(await self._ingestor.resume(doc_id))

    # ------------------------------------------------------------------ search
    async def search(
        self,
        query: str,
        *,
        source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None,
        principals: Iterable[str] | object | None = None,
        top_k: int = 10,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> SearchResult:
        """Hybrid search: full-text, trigram and vector legs fused (``fusion.method``).

        Hits are redacted by the output policy (the engine's, the view's, or this call's)
        before they are returned.
        """
        started = time.perf_counter()
        query = _check_query(query)
        top_k = _check_top_k(top_k, self.config.search.max_top_k)
        caller = resolve(principals)  # type: ignore[arg-type]
        red = self._redactor(caller, redaction, redaction_secret_key)
        scope = Scope(caller, _check_ids("source_ids", source_ids), _check_uuids(document_ids))
        sql = await self._ready()
        cfg, weights = self.config.search, self.config.fusion.weights
        limit = max(cfg.candidates, top_k)
        timings: dict[str, float] = {}

        async def timed(name: str, coro: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await coro
            finally:
                timings[name] = round((time.perf_counter() - t0) * 1000, 2)

        tasks: dict[str, Any] = {}
        lexical_pass: dict[str, Any] = {}
        if weights.get("fts", 0) > 0:
            tasks["fts"] = timed("fts", self._fts_leg(sql, query, scope, limit, lexical_pass))
        words = query_shape.length_units(query)
        if weights.get("trigram", 0) > 0 and (cfg.trgm_max_query_words is None or words <= cfg.trgm_max_query_words):
            threshold = cfg.trgm_limit or query_shape.trigram_threshold(query)
            tasks["trigram"] = timed("trigram", legs.trigram_leg(sql, query, scope, limit=limit, threshold=threshold))
        plan: legs.VectorPlan | None = None
        if weights.get("vector", 0) > 0:

            async def vector() -> list[tuple[int, float]]:
                nonlocal plan
                vec, plan = await asyncio.gather(
                    timed("embed", self.embedder.embed([query], kind="query")),
                    self._plan_vector(sql, scope),
                )
                found = await legs.vector_leg(sql, vec[0], scope, limit=limit, plan=plan)
                if cfg.vector_floor == "adaptive":
                    floor = query_shape.vector_floor(query)
                    found = [pair for pair in found if pair[1] >= floor]
                return found

            tasks["vector"] = timed("vector", vector())
        results = dict(zip(tasks, await asyncio.gather(*tasks.values()), strict=True))
        t0 = time.perf_counter()
        ranked = fusion.fuse(self.config.fusion.method, results, weights, self.config.fusion.k)
        fused = ranked[:top_k]
        rows = await repo.fetch_hits(sql, [i for i, _ in fused], scope)
        similarity = dict(results.get("vector", []))
        found_by = {leg: {i for i, _ in pairs} for leg, pairs in results.items()}
        hits = [
            Hit(
                document_id=str(row["document_id"]),
                document_name=red.text(row["document_name"]),
                chunk_text=red.text(row["text"]),
                score=round(score, 6),
                source_id=row["source_id"],
                chunk_idx=row["position"],
                chunk_id=cid,
                section=red.text(row["section"]),
                page=row["page"],
                matched_by=[leg for leg in ("fts", "trigram", "vector") if cid in found_by.get(leg, set())],
                similarity=round(similarity[cid], 6) if cid in similarity else None,
            )
            for cid, score in fused
            if (row := rows.get(cid)) is not None
        ]
        timings["fuse"] = round((time.perf_counter() - t0) * 1000, 2)
        timings["total"] = round((time.perf_counter() - started) * 1000, 2)
        usage: dict[str, Any] = {
            "kind": "search",
            "legs": list(results),
            "leg_hits": {leg: len(pairs) for leg, pairs in results.items()},
            "candidates": len(ranked),
            "fusion": self.config.fusion.method,
            "timings_ms": timings,
        }
        if plan is not None:
            usage["vector_plan"] = plan.usage()
        if lexical_pass:
            usage["lexical_pass"] = lexical_pass
        return SearchResult(hits=hits, usage=usage)

    def _fts_leg(
        self, sql: AsyncEngine, query: str, scope: Scope, limit: int, report: dict[str, Any] | None = None
    ) -> Any:
        """The full-text leg with this engine's lexical settings (shared by search and knowledge)."""
        cfg = self.config.search
        return legs.fts_leg(
            sql,
            query,
            scope,
            limit=limit,
            config=self._text_search_config,
            match=cfg.lexical_match,
            rank=cfg.lexical_rank,
            normalization=cfg.lexical_normalization,
            stopwords=cfg.lexical_stopwords,
            bm25_k1=cfg.bm25.k1,
            bm25_b=cfg.bm25.b,
            report=report,
        )

    def _plan_vector(self, sql: AsyncEngine, scope: Scope) -> Any:
        """The vector leg's plan with this engine's storage settings (shared by search and knowledge)."""
        storage = self.config.storage
        return legs.plan_vector(
            sql,
            scope,
            threshold=storage.ann_exact_threshold,
            unfiltered_min_rows=storage.ann_unfiltered_min_rows,
            spread_min_share=storage.ann_spread_min_share,
        )

    # ------------------------------------------------------------------ documents
    async def get_document(
        self,
        document_id: str,
        *,
        principals: Iterable[str] | object | None = None,
        include_text: bool = True,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> Document:
        caller = resolve(principals)  # type: ignore[arg-type]
        red = self._redactor(caller, redaction, redaction_secret_key)
        doc_id = _check_uuid(document_id)
        row = await repo.get_document(await self._ready(), doc_id, Scope(caller), with_text=include_text)
        if row is None:
            raise NotFound(f"document {document_id} not found")
        return _document(row, trusted=caller is None, red=red)

    async def list_documents(
        self,
        *,
        principals: Iterable[str] | object | None = None,
        source_ids: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> DocumentPage:
        caller = resolve(principals)  # type: ignore[arg-type]
        red = self._redactor(caller, redaction, redaction_secret_key)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 500:
            raise InvalidRequest("limit must be an integer between 1 and 500")
        after = _decode_cursor(cursor) if cursor else None
        rows = await repo.list_documents(
            await self._ready(), Scope(caller, _check_ids("source_ids", source_ids)), limit=limit + 1, after=after
        )
        more = len(rows) > limit
        rows = rows[:limit]
        docs = [_document(r, trusted=caller is None, red=red) for r in rows]
        next_cursor = _encode_cursor(rows[-1]) if more and rows else None
        return DocumentPage(documents=docs, next_cursor=next_cursor)

    async def update_document(
        self,
        document_id: str,
        *,
        principals: Iterable[str] | object | None = None,
        acl: Sequence[str] | None = None,
        attributes: dict[str, Any] | None = None,
        name: str | None = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> Document:
        caller = resolve(principals)  # type: ignore[arg-type]
        doc_id = _check_uuid(document_id)
        scrub = self._scrubber()  # ingest rules cover what is stored by an update too
        if attributes is not None:
            attributes = scrub.obj(attributes)
        if name is not None and isinstance(name, str):
            name = scrub.text(name)
        acl_list = _clean_acl(acl) if acl is not None else None
        if acl_list is not None and not holds_acl(acl_list, caller):
            raise Forbidden("you may only file a document under an ACL you hold")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise InvalidRequest("name must be a non-empty string")
        sql = await self._ready()
        try:
            revision = await repo.update_document(
                sql, doc_id, Scope(caller), acl=acl_list, attributes=attributes, name=name
            )
        except Exception as exc:
            if "ux_ce_documents_identity" in str(exc):
                raise InvalidRequest(
                    "a document with that name already exists in this source", code="conflict"
                ) from exc
            raise
        if revision is None:
            raise NotFound(f"document {document_id} not found")
        return await self.get_document(
            doc_id,
            principals=TRUSTED if caller is None else list(caller),
            include_text=False,
            redaction=redaction,
            redaction_secret_key=redaction_secret_key,
        )

    async def delete_document(self, document_id: str, *, principals: Iterable[str] | object | None = None) -> int:
        """Delete from the next revision on; returns that revision."""
        caller = resolve(principals)  # type: ignore[arg-type]
        revision = await repo.delete_document(await self._ready(), _check_uuid(document_id), Scope(caller))
        if revision is None:
            raise NotFound(f"document {document_id} not found")
        return revision

    async def stats(
        self, *, principals: Iterable[str] | object | None = None, source_ids: Sequence[str] | None = None
    ) -> Stats:
        caller = resolve(principals)  # type: ignore[arg-type]
        data = await repo.stats(await self._ready(), Scope(caller, _check_ids("source_ids", source_ids)))
        return Stats(**data)

    # ------------------------------------------------------------------ knowledge
    async def knowledge_query(
        self,
        query: str,
        *,
        top_k: int = 5,
        agent_id: str | None = None,
        expand: bool = True,
        rerank: bool = True,
        principals: Iterable[str] | object | None = None,
        source_ids: Sequence[str] | None = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> KnowledgeResult:
        """The passages that best answer ``query``, with a trace of how they were found.

        Expansion, per-query vector + full-text search, fusion, enumeration widening and a guarded
        rerank: see :mod:`context_engine.knowledge.pipeline`. ``expand=False, rerank=False`` calls no
        model. ``agent_id`` narrows to the agent's links (an unknown agent is ``NotFound``). Output
        redaction applies as for ``search``, to the judge's view of the passages as well.
        """
        from context_engine.knowledge.pipeline import knowledge_query

        return await knowledge_query(
            self,
            query,
            top_k=top_k,
            agent_id=agent_id,
            expand=expand,
            rerank=rerank,
            principals=principals,
            source_ids=source_ids,
            redaction=redaction,
            redaction_secret_key=redaction_secret_key,
        )

    async def link_agent_sources(
        self, agent_id: str, *, document_ids: Sequence[str] | None = None, source_ids: Sequence[str] | None = None
    ) -> AgentLinks:
        """Let ``agent_id`` retrieve from these documents and/or whole sources (idempotent).

        Links are configuration, not permissions: queries through the agent still apply the caller's ACL.
        """
        from context_engine.knowledge import agents

        return await agents.link(await self._ready(), agent_id, document_ids=document_ids, source_ids=source_ids)

    async def unlink_agent_sources(
        self, agent_id: str, *, document_ids: Sequence[str] | None = None, source_ids: Sequence[str] | None = None
    ) -> AgentLinks:
        """Remove these links, or every link of the agent when neither list is given."""
        from context_engine.knowledge import agents

        return await agents.unlink(await self._ready(), agent_id, document_ids=document_ids, source_ids=source_ids)

    async def agent_sources(self, agent_id: str) -> AgentLinks:
        """The documents and sources linked to ``agent_id`` (both empty for an unknown agent)."""
        from context_engine.knowledge import agents

        return await agents.links(await self._ready(), agent_id)


# ---------------------------------------------------------------------- helpers
def _totals(reports: list[DocumentReport]) -> IngestReport:
    totals = {"files": len(reports), "completed": 0, "failed": 0, "skipped": 0, "embedding": 0, "chunks": 0}
    for report in reports:
        totals[report.status] = totals.get(report.status, 0) + 1
        totals["chunks"] += report.chunks
    return IngestReport(documents=reports, totals=totals)


def _clean_acl(acl: Sequence[str] | None) -> list[str]:
    if acl is None:
        return []
    if isinstance(acl, str) or not all(isinstance(a, str) and a.strip() for a in acl):
        raise InvalidRequest("acl must be a list of non-empty strings")
    return sorted(set(acl))


def _check_query(query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidRequest("query must be a non-empty string")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidRequest(f"query is longer than {MAX_QUERY_CHARS} characters")
    return query.strip()


def _check_top_k(top_k: Any, maximum: int) -> int:
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= maximum:
        raise InvalidRequest(f"top_k must be an integer between 1 and {maximum}")
    return top_k


def _check_ids(field: str, values: Sequence[str] | None) -> list[str] | None:
    if values is None:
        return None
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise InvalidRequest(f"{field} must be a list of strings")
    return list(values)


def _check_uuid(value: Any) -> str:
    try:
        return str(uuid.UUID(str(value)))
    except (ValueError, TypeError):
        raise NotFound(f"document {value} not found") from None


def _check_uuids(values: Sequence[str] | None) -> list[str] | None:
    if values is None:
        return None
    checked = _check_ids("document_ids", values) or []
    try:
        return [str(uuid.UUID(v)) for v in checked]
    except ValueError:
        raise InvalidRequest("document_ids must be document id strings (UUIDs)") from None


def _document(row: dict[str, Any], *, trusted: bool, red: Redactor) -> Document:
    reason = row.get("failure_reason")
    return Document(
        id=str(row["id"]),
        name=red.text(row["name"]),
        source_id=row["source_id"],
        mime=row["mime"],
        acl=list(row["acl"]),
        attributes=red.obj(row["attributes"] or {}),
        status=row["status"],
        failure_reason=reason,
        failure_message=FAILURE_MESSAGES.get(reason) if reason else None,
        error=red.text(row.get("error")) if trusted else None,
        version=row["version"],
        revision=row["updated_revision"],
        chunk_count=row["chunk_count"],
        meta=red.obj(row["meta"] or {}),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        text=red.text(row.get("text")),
    )


def _encode_cursor(row: dict[str, Any]) -> str:
    import base64

    raw = f"{row['created_at'].isoformat()}|{row['id']}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[str, str]:
    import base64
    from datetime import datetime

    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, doc_id = raw.split("|", 1)
        datetime.fromisoformat(created)
        return created, str(uuid.UUID(doc_id))
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest("cursor is not valid; pass the next_cursor of a previous page") from None


__all__ = ["ContextEngine", "ContextEngineError"]
