"""``ContextEngine``: the one object behind every door (methods, routes, CLI).

Construction is cheap and lazy: nothing connects until the first call that needs the
database, and ``aclose()`` releases the pool, the providers the engine built, and the embedded
server handle.
"""

from __future__ import annotations

import copy
import logging
import os
import uuid
from collections.abc import Iterable, Sequence
from typing import IO, Any

from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.config import ContextEngineConfig
from context_engine.embeddings.base import Embedder
from context_engine.errors import (
    ContextEngineError,
    Forbidden,
    InvalidRequest,
    NotFound,
)
from context_engine.hooks import Hooks
from context_engine.ingest.pipeline import Ingestor, open_source
from context_engine.knowledge.models import AgentLinks, KnowledgeResult
from context_engine.models import (
    FAILURE_MESSAGES,
    Document,
    DocumentPage,
    DocumentReport,
    IngestReport,
    SearchResult,
    Stats,
)
from context_engine.principals import TRUSTED, holds_acl, resolve
from context_engine.redaction import RedactionPolicy
from context_engine.redaction.apply import IngestScrubber, Redactor, effective_key
from context_engine.retrieval.retriever import Retriever
from context_engine.retrieval.search import search as run_search
from context_engine.services import HttpClientFactory, Services
from context_engine.storage import repository as repo
from context_engine.storage.predicates import ReadScope

log = logging.getLogger("context_engine")

FileInput = bytes | str | os.PathLike[str] | IO[bytes]
MAX_QUERY_CHARS = 4000
KNOWLEDGE_MAX_TOP_K = 20
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
        #: what the pipelines behind this front door share (one pool, one embedder); views share it too
        self.services = Services(
            self.config, http_client_factory=http_client_factory, embedder=embedder, hooks=hooks
        )
        self.hooks = self.services.hooks
        self._retriever = Retriever(self.services)
        self._ingestor = Ingestor(self)
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
        await self.services.aclose()

    @property
    def embedder(self) -> Embedder:
        return self.services.embedder

    @property
    def text_search_config(self) -> str:
        """The text-search configuration the schema was migrated with (the configured one until first use)."""
        return self.services.text_search_config

    @property
    def _text_search_config(self) -> str:
        return self.services.text_search_config

    async def _ready(self) -> AsyncEngine:
        """The pool for the running loop; migrates (or checks) the schema once per engine."""
        return await self.services.db()

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
        name = scrub.text(name)
        attributes = scrub.obj(dict(attributes or {}))
        if text is not None and mime is None:
            mime = "text/html" if name.lower().endswith((".html", ".htm")) else "text/markdown"
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
        group_by: str = "chunk",
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> SearchResult:
        """Hybrid search: every registered leg (full-text, trigram, vector, ...) fused by ``fusion.method``.

        ``group_by="document"`` counts distinct documents in ``top_k`` (up to
        ``search.max_top_documents``), each with its best passages (``SearchResult.documents``).
        Hits are redacted by the output policy (the engine's, the view's, or this call's)
        before they are returned.
        """
        query = _check_query(query)
        if group_by not in ("chunk", "document"):
            raise InvalidRequest('group_by must be "chunk" (passages) or "document"')
        cfg = self.config.search
        top_k = _check_top_k(top_k, cfg.max_top_documents if group_by == "document" else cfg.max_top_k)
        caller = resolve(principals)  # type: ignore[arg-type]
        red = self._redactor(caller, redaction, redaction_secret_key)
        scope = ReadScope(caller, _check_ids("source_ids", source_ids), _check_uuids(document_ids))
        return await run_search(self._retriever, red, query, scope, top_k=top_k, group_by=group_by)

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
        row = await repo.get_document(await self._ready(), doc_id, ReadScope(caller), with_text=include_text)
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
            await self._ready(), ReadScope(caller, _check_ids("source_ids", source_ids)), limit=limit + 1, after=after
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
        db = await self._ready()
        try:
            revision = await repo.update_document(
                db, doc_id, ReadScope(caller), acl=acl_list, attributes=attributes, name=name
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
        revision = await repo.delete_document(await self._ready(), _check_uuid(document_id), ReadScope(caller))
        if revision is None:
            raise NotFound(f"document {document_id} not found")
        return revision

    async def stats(
        self, *, principals: Iterable[str] | object | None = None, source_ids: Sequence[str] | None = None
    ) -> Stats:
        caller = resolve(principals)  # type: ignore[arg-type]
        data = await repo.stats(await self._ready(), ReadScope(caller, _check_ids("source_ids", source_ids)))
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

        query = _check_query(query)
        top_k = _check_top_k(top_k, KNOWLEDGE_MAX_TOP_K)
        if not isinstance(expand, bool) or not isinstance(rerank, bool):
            raise InvalidRequest("expand and rerank must be booleans")
        caller = resolve(principals)  # type: ignore[arg-type]
        return await knowledge_query(
            self._retriever,
            self._redactor(caller, redaction, redaction_secret_key),
            query,
            caller=caller,
            top_k=top_k,
            agent_id=agent_id,
            expand=expand,
            rerank=rerank,
            source_ids=_check_ids("source_ids", source_ids),
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

    # ------------------------------------------------------------------ graph
    async def migrate_graph(self) -> list[str]:
        """Create the graph tables (``context-engine migrate --graph``); returns the revisions applied."""
        from context_engine.graph import names
        from context_engine.storage.migrate import migrate

        db = await self._ready()
        announce = logging.getLogger("context_engine.migrate").info  # a library logs its index builds
        report = await migrate(
            db, dim=self.embedder.dim, text_search_config=self._text_search_config, announce=announce, graph=True
        )
        names.forget(db)
        return report.applied

    async def extract_graph(self, document_id: str, *, principals: Iterable[str] | object = TRUSTED) -> Any:
        """Build the graph facts of a stored document (what ``ingest(mode="graph")`` runs after storing it)."""
        from context_engine.graph.document import extract_document

        doc = await self.get_document(document_id, principals=principals, include_text=False)
        return await extract_document(self.services, doc.id)

    async def repair_graph(self, document_id: str) -> Any:
        """Remove what a deleted or replaced document's closed chunks stated (what ``delete_document`` runs after)."""
        from context_engine.graph.document import repair_document

        return await repair_document(self.services, _check_uuid(document_id))

    async def graph_query(
        self,
        action: str,
        *,
        principals: Iterable[str] | object | None = None,
        source_ids: Sequence[str] | None = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
        **arguments: Any,
    ) -> dict[str, Any]:
        """One navigation action (``get_neighbors``, ``traverse``, ``find_related``, ``community_summary``)
        under the caller's ACL, its text fields redacted by the output policy (ids are not)."""
        from context_engine.graph.navigate import run_action
        from context_engine.graph.redact import redact_answer

        caller = resolve(principals)  # type: ignore[arg-type]
        scope = ReadScope(caller, _check_ids("source_ids", source_ids))
        answer = await run_action(await self._ready(), scope, action, arguments)
        return redact_answer(answer, self._redactor(caller, redaction, redaction_secret_key))


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
