"""``ContextEngine``: the one object behind every door (methods, routes, CLI).

Construction is cheap and lazy: nothing connects until the first call that needs the
database, and ``aclose()`` releases the pool, the providers the engine built, and the embedded
server handle. Each method delegates to the module of :mod:`context_engine.operations` that does
that kind of work, which documents it in full.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.config import ContextEngineConfig
from context_engine.embeddings.base import Embedder
from context_engine.errors import ContextEngineError
from context_engine.hooks import Hooks
from context_engine.ingest.batch_poll import BatchOutcome
from context_engine.ingest.bulk import BulkReport
from context_engine.knowledge import agents
from context_engine.knowledge.models import AgentLinks, KnowledgeResult
from context_engine.knowledge.tool.dispatch import run_knowledge_tool
from context_engine.models import Document, DocumentPage, IngestManyReport, IngestReport, SearchResult, Stats
from context_engine.operations import (
    document_reads,
    document_writes,
    graph,
    ingest_many,
    model_actions,
    revisions,
    search,
    tools,
)
from context_engine.operations import ingest as ingesting
from context_engine.operations.context import EngineContext
from context_engine.operations.ingest import FileInput
from context_engine.principals import TRUSTED, Principals
from context_engine.redaction import RedactionPolicy
from context_engine.redaction.apply import Redactor
from context_engine.revisions.models import DocumentVersion, VacuumReport
from context_engine.services import Consistency, HttpClientFactory, Services, Shared
from context_engine.write_access import WritePolicy


class ContextEngine:
    """Ingest, search and manage documents on PostgreSQL with ACLs enforced in SQL."""

    def __init__(
        self,
        config: ContextEngineConfig | None = None,
        *,
        http_client_factory: HttpClientFactory | None = None,
        embedder: Embedder | None = None,
        hooks: Hooks | None = None,
        code_runner: Any = None,
        mcp_resolver: Any = None,
        write_policy: WritePolicy | None = None,
    ):
        #: what the pipelines behind this front door share (one pool, one embedder); views share it too.
        #: ``write_policy`` (``context_engine.write_access``) decides who may change a stored document
        #: before the default rule; ``access.writers`` in the config lists who may change public ones.
        self.services = Services(
            config or ContextEngineConfig(),
            http_client_factory=http_client_factory,
            embedder=embedder,
            hooks=hooks,
            write_policy=write_policy,
        )
        #: what every operation reads: these services, the tools, and this engine's (or view's) redaction
        self._ctx = EngineContext.root(self.services, code_runner=code_runner, mcp_resolver=mcp_resolver)
        #: whether this is the engine (which owns what it built) rather than a view of one
        self._owner = True

    @property
    def code_runner(self) -> Any:
        """The host's code runner given to the engine (None: the built-in worker, when switched on)."""
        return self._ctx.code_runner

    def with_redaction(self, policy: RedactionPolicy, *, secret_key: str | bytes | None = None) -> ContextEngine:
        """A view applying ``policy`` (and hashing with ``secret_key``) on every method.

        It shares this engine's pool, providers and hooks; closing it closes nothing.
        """
        if not isinstance(policy, RedactionPolicy):
            raise TypeError("policy must be a RedactionPolicy")
        view = copy.copy(self)
        view._owner = False
        view._ctx = self._ctx.with_policy(policy, secret_key)
        return view

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> ContextEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if not self._owner:
            return  # a view owns nothing
        await self._ctx.oauth_flows.aclose()
        await self.services.aclose()

    config = Shared[ContextEngineConfig](
        "The settings every pipeline reads on each call (replacing them takes effect on the next call).",
        writable=True,
    )
    hooks = Shared[Hooks]("The host's hooks (progress, usage, errors, tool calls), shared by every pipeline.",
                          writable=True)  # fmt: skip
    embedder = Shared[Embedder]("The embedder every pipeline embeds with (the host's, or the one configured).")
    text_search_config = Shared[str](
        "The text-search configuration the schema was migrated with (the configured one until first use)."
    )

    async def _ready(self) -> AsyncEngine:
        """The pool for the running loop; migrates (or checks) the schema once per engine."""
        return await self._ctx.db()

    async def database(self) -> AsyncEngine:
        """The connection pool, migrated or checked: for reads that live outside this class."""
        return await self._ctx.db()

    def output_redactor(
        self,
        caller: tuple[str, ...] | None,
        redaction: RedactionPolicy | None = None,
        secret_key: str | bytes | None = None,
    ) -> Redactor:
        """The output redaction one call applies (``caller`` as ``principals.resolve`` returns it)."""
        return self._ctx.redactor(caller, redaction, secret_key)

    # ------------------------------------------------------------------ revisions, replicas
    async def revision(self, *, principals: Principals = None) -> int:
        """The store's current revision, or the handle of a non-trusted caller's view of it."""
        return await revisions.revision(self._ctx, principals=principals)

    async def revision_handle(self, revision: int) -> int:
        """The handle non-trusted callers are told for the store's ``revision``."""
        return await revisions.revision_handle(self._ctx, revision)

    async def read_replicas(self) -> list[dict[str, Any]]:
        """Each configured read replica: reachable or not, its applied revision and its lag."""
        return await revisions.read_replicas(self._ctx)

    # ------------------------------------------------------------------ ingest
    async def ingest(
        self, *, text: str | None = None, file: FileInput | None = None, name: str | None = None,
        source_id: str = "default", acl: Sequence[str] | None = None, attributes: dict[str, Any] | None = None,
        mime: str | None = None, principals: Principals = TRUSTED, mode: str = "hybrid",
        idempotency_key: str | None = None, batch: bool = False,
    ) -> IngestReport:
        """Ingest one document; a bad document is a ``failed`` report (:func:`operations.ingest.ingest`)."""
        return await ingesting.ingest(
            self._ctx, text=text, file=file, name=name, source_id=source_id, acl=acl, attributes=attributes,
            mime=mime, principals=principals, mode=mode, idempotency_key=idempotency_key, batch=batch,
        )

    async def bulk_ingest(
        self, documents: Iterable[Any], *, build_index: bool = True, batch_chunks: int = 20_000,
        principals: Principals = TRUSTED, maintenance_work_mem: str = "1GB", parallel_workers: int | None = None,
    ) -> BulkReport:
        """Load many new documents fast with binary COPY (:func:`operations.ingest.bulk_ingest`)."""
        return await ingesting.bulk_ingest(
            self._ctx, documents, build_index=build_index, batch_chunks=batch_chunks, principals=principals,
            maintenance_work_mem=maintenance_work_mem, parallel_workers=parallel_workers,
        )

    async def ingest_many(
        self, documents: Sequence[Mapping[str, Any]], *, principals: Principals = TRUSTED
    ) -> IngestManyReport:
        """Ingest many documents in one call, one item per document (:mod:`operations.ingest_many`)."""
        return await ingest_many.ingest_many(self._ctx, documents, principals=principals)

    async def resume_embeddings(self, document_id: str | None = None) -> IngestReport:
        """Embed only the rows still missing a vector, for one document or every resumable one."""
        return await ingesting.resume_embeddings(self._ctx, document_id)

    async def poll_batches(self) -> list[BatchOutcome]:
        """Ask the provider once about every embedding batch ``ingest(batch=True)`` submitted."""
        return await ingesting.poll_embedding_batches(self._ctx)

    # ------------------------------------------------------------------ search
    async def search(
        self, query: str, *, source_ids: Sequence[str] | None = None, document_ids: Sequence[str] | None = None,
        principals: Principals = None, top_k: int = 10, group_by: str = "chunk", compress_to_tokens: int | None = None,
        redaction: RedactionPolicy | None = None, redaction_secret_key: str | bytes | None = None,
        as_of: int | None = None, consistency: Consistency = "replica", min_revision: int | None = None,
        mode: str | None = None, explain: bool = False,
    ) -> SearchResult:
        """Hybrid search: every registered leg fused by ``fusion.method`` (:func:`operations.search.search`)."""
        return await search.search(
            self._ctx, query, source_ids=source_ids, document_ids=document_ids, principals=principals, top_k=top_k,
            group_by=group_by, compress_to_tokens=compress_to_tokens, redaction=redaction,
            redaction_secret_key=redaction_secret_key, as_of=as_of, consistency=consistency,
            min_revision=min_revision, mode=mode, explain=explain,
        )

    async def knowledge_query(
        self, query: str, *, top_k: int = 5, agent_id: str | None = None, expand: bool = True, rerank: bool = True,
        principals: Principals = None, source_ids: Sequence[str] | None = None,
        redaction: RedactionPolicy | None = None, redaction_secret_key: str | bytes | None = None,
        as_of: int | None = None, consistency: Consistency = "replica", min_revision: int | None = None,
    ) -> KnowledgeResult:
        """The passages that best answer ``query``, with a trace (:func:`operations.search.knowledge_query`)."""
        return await search.knowledge_query(
            self._ctx, query, top_k=top_k, agent_id=agent_id, expand=expand, rerank=rerank, principals=principals,
            source_ids=source_ids, redaction=redaction, redaction_secret_key=redaction_secret_key, as_of=as_of,
            consistency=consistency, min_revision=min_revision,
        )

    # ------------------------------------------------------------------ documents
    async def get_document(
        self, document_id: str, *, principals: Principals = None, include_text: bool = True,
        redaction: RedactionPolicy | None = None, redaction_secret_key: str | bytes | None = None,
        as_of: int | None = None, version: int | None = None, consistency: Consistency = "replica",
        min_revision: int | None = None,
    ) -> Document:
        """The document now, as of revision ``as_of``, or one ``version`` of it."""
        return await document_reads.get_document(
            self._ctx, document_id, principals=principals, include_text=include_text, redaction=redaction,
            redaction_secret_key=redaction_secret_key, as_of=as_of, version=version, consistency=consistency,
            min_revision=min_revision,
        )

    async def document_versions(
        self, document_id: str, *, principals: Principals = None, redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> list[DocumentVersion]:
        """Every version of the document the caller may see, oldest first, with its revision range."""
        return await document_reads.document_versions(
            self._ctx, document_id, principals=principals, redaction=redaction,
            redaction_secret_key=redaction_secret_key,
        )

    async def list_documents(
        self, *, principals: Principals = None, source_ids: Sequence[str] | None = None, limit: int = 50,
        cursor: str | None = None, redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None, as_of: int | None = None,
        consistency: Consistency = "replica", min_revision: int | None = None,
    ) -> DocumentPage:
        """A page of the documents the caller may see, now or as of revision ``as_of``."""
        return await document_reads.list_documents(
            self._ctx, principals=principals, source_ids=source_ids, limit=limit, cursor=cursor, redaction=redaction,
            redaction_secret_key=redaction_secret_key, as_of=as_of, consistency=consistency,
            min_revision=min_revision,
        )

    async def update_document(
        self, document_id: str, *, principals: Principals = None, acl: Sequence[str] | None = None,
        attributes: dict[str, Any] | None = None, name: str | None = None, redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> Document:
        """A new revision of the document's ACL, attributes or name."""
        return await document_writes.update_document(
            self._ctx, document_id, principals=principals, acl=acl, attributes=attributes, name=name,
            redaction=redaction, redaction_secret_key=redaction_secret_key,
        )

    async def delete_document(
        self, document_id: str, *, principals: Principals = None, idempotency_key: str | None = None
    ) -> int:
        """Delete from the next revision on; returns that revision (as a handle to a non-trusted caller)."""
        return await document_writes.delete_document(
            self._ctx, document_id, principals=principals, idempotency_key=idempotency_key
        )

    async def vacuum_revisions(self, keep_after: int) -> VacuumReport:
        """Remove history no revision from ``keep_after`` on can see."""
        return await document_writes.vacuum_revisions(self._ctx, keep_after)

    async def stats(
        self, *, principals: Principals = None, source_ids: Sequence[str] | None = None, as_of: int | None = None
    ) -> Stats:
        return await document_reads.stats(self._ctx, principals=principals, source_ids=source_ids, as_of=as_of)

    # ------------------------------------------------------------------ agents
    async def link_agent_sources(
        self, agent_id: str, *, document_ids: Sequence[str] | None = None, source_ids: Sequence[str] | None = None
    ) -> AgentLinks:
        """Let ``agent_id`` retrieve from these documents and/or whole sources (idempotent).

        Links are configuration, not permissions: queries through the agent still apply the caller's ACL.
        """
        return await agents.link(await self._ctx.db(), agent_id, document_ids=document_ids, source_ids=source_ids)

    async def unlink_agent_sources(
        self, agent_id: str, *, document_ids: Sequence[str] | None = None, source_ids: Sequence[str] | None = None
    ) -> AgentLinks:
        """Remove these links, or every link of the agent when neither list is given."""
        return await agents.unlink(await self._ctx.db(), agent_id, document_ids=document_ids, source_ids=source_ids)

    async def agent_sources(self, agent_id: str) -> AgentLinks:
        """The documents and sources linked to ``agent_id`` (both empty for an unknown agent)."""
        return await agents.links(await self._ctx.db(), agent_id)

    # ------------------------------------------------------------------ knowledge tool
    async def search_knowledge_base(
        self, *, action: str | None = None, principals: Principals = None, scope: Any,
        redaction: RedactionPolicy | None = None, secret_key: str | bytes | None = None, compute: Any = None,
        map_reduce: Any = None, **model_args: Any,
    ) -> dict[str, Any]:
        """The knowledge tool (``context_engine.knowledge.tool``): one ``action`` per call.

        ``scope`` is the host's ceiling and has no default (``None`` raises); ``principals=None``
        warns and means trusted. Model mistakes answer ``{"success": false, "error": ...}``.
        """
        return await run_knowledge_tool(
            self, action=action, principals=principals, scope=scope, redaction=redaction, secret_key=secret_key,
            compute=compute, map_reduce=map_reduce, model_args=model_args,
        )

    # ------------------------------------------------------------------ tools
    async def register_tool(self, tool: Any) -> dict[str, Any]:
        """Store an http, db or mcp tool, its config encrypted; returns its listing."""
        return await tools.register_tool(self._ctx, tool)

    async def start_mcp_oauth(self, tool_id: str) -> dict[str, Any]:
        """Start (again) the OAuth authorization of a stored mcp tool that has an ``oauth`` section."""
        return await tools.start_mcp_oauth(self._ctx, tool_id)

    async def complete_mcp_oauth(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The popup's message for the provider's callback query; never raises for a bad callback."""
        return await tools.complete_mcp_oauth(self._ctx, params)

    async def mcp_oauth_popup(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], str, dict[str, str]]:
        """:meth:`complete_mcp_oauth`, with the callback's HTML page and its headers."""
        return await tools.mcp_oauth_popup(self._ctx, params)

    def register_function_tool(
        self, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None,
        acl: Sequence[str] | None = None, requires_approval: bool = False,
    ) -> dict[str, Any]:
        """Offer a Python callable as tool ``fn_<name>`` (kept in memory, never persisted)."""
        return tools.register_function_tool(
            self._ctx, fn, name=name, description=description, acl=acl, requires_approval=requires_approval
        )

    async def list_tools(self, *, principals: Principals = None) -> list[dict[str, Any]]:
        """Every tool the caller may see (function tools first, then stored ones, oldest first)."""
        return await tools.list_tools(self._ctx, principals=principals)

    async def search_tools(
        self, query: str = "", *, principals: Principals = None, kind: str | Sequence[str] | None = None,
        name_contains: str | None = None, requires_approval: bool | None = None, limit: int = 20,
        cursor: str | None = None,
    ) -> list[dict[str, Any]]:
        """A page (a list with ``next_cursor``) of the caller's tools that pass every filter."""
        return await tools.search_tools(
            self._ctx, query, principals=principals, kind=kind, name_contains=name_contains,
            requires_approval=requires_approval, limit=limit, cursor=cursor,
        )

    async def delete_tool(self, tool_id: str, *, principals: Principals = None) -> None:
        """Remove a stored tool (``tool_id``) or a function tool (its call name)."""
        await tools.delete_tool(self._ctx, tool_id, principals=principals)

    async def execute_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *, principals: Principals = None,
        tool_id: str | None = None, approval_scope: str | None = None, result_max_chars: int | None = 8000,
        result_max_rows: int | None = 100, response_mode: str | None = None, approval_ttl_seconds: float = 3600,
        redaction: RedactionPolicy | None = None, redaction_secret_key: str | bytes | None = None,
    ) -> dict[str, Any]:
        """Run tool ``name`` for the caller, or ask for approval (:func:`operations.tools.execute_tool`)."""
        return await tools.execute_tool(
            self._ctx, name, arguments, principals=principals, tool_id=tool_id, approval_scope=approval_scope,
            result_max_chars=result_max_chars, result_max_rows=result_max_rows, response_mode=response_mode,
            approval_ttl_seconds=approval_ttl_seconds, redaction=redaction, redaction_secret_key=redaction_secret_key,
        )

    async def resolve_tool_approval(self, approval_id: str, decision: str, *, approver: str | None = None) -> Any:
        """Approve or deny a pending approval (``context_engine.tools.resolve_approval`` calls this)."""
        return await tools.resolve_tool_approval(self._ctx, approval_id, decision, approver=approver)

    async def get_tool_approval(self, approval_id: str) -> Any:
        """One approval record (an ``ApprovalRecord``), for a host showing it to an approver."""
        return await tools.get_tool_approval(self._ctx, approval_id)

    async def tool_calls(self, *, limit: int = 100, tool_id: str | None = None) -> list[dict[str, Any]]:
        """The latest tool-call audit rows, newest first (already redacted when written)."""
        return await tools.tool_calls(self._ctx, limit=limit, tool_id=tool_id)

    # ------------------------------------------------------------------ model-driven actions
    async def compute(
        self, question: str, *, principals: Principals = None, source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None, settings: Any = None, code_runner: Any = None, runner: Any = None,
        redaction: RedactionPolicy | None = None, redaction_secret_key: str | bytes | None = None,
    ) -> dict[str, Any]:
        """A figure over every row of the spreadsheets in scope: see :mod:`context_engine.compute`."""
        return await model_actions.compute(
            self._ctx, question, principals=principals, source_ids=source_ids, document_ids=document_ids,
            settings=settings, code_runner=code_runner, runner=runner, redaction=redaction,
            redaction_secret_key=redaction_secret_key,
        )

    async def compute_over_frames(
        self, frames: dict[str, Any], question: str, *, settings: Any = None, code_runner: Any = None,
        redaction: RedactionPolicy | None = None, redaction_secret_key: str | bytes | None = None,
    ) -> dict[str, Any]:
        """``compute`` over dataframes the host already holds (no document involved)."""
        return await model_actions.compute_over_frames(
            self._ctx, frames, question, settings=settings, code_runner=code_runner, redaction=redaction,
            redaction_secret_key=redaction_secret_key,
        )

    async def map_reduce(
        self, instruction: str, *, principals: Principals = None, source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None, limit: int | None = None, runner: Any = None,
        redaction: RedactionPolicy | None = None, redaction_secret_key: str | bytes | None = None,
    ) -> dict[str, Any]:
        """The same question asked of each document in scope: see :mod:`context_engine.mapreduce`."""
        return await model_actions.map_reduce(
            self._ctx, instruction, principals=principals, source_ids=source_ids, document_ids=document_ids,
            limit=limit, runner=runner, redaction=redaction, redaction_secret_key=redaction_secret_key,
        )

    async def query_meta(
        self, question: str, *, principals: Principals = None, source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None, limit: int = 50, redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> dict[str, Any]:
        """The extracted fields a question names, per document: see :mod:`context_engine.document_fields`."""
        return await model_actions.query_meta(
            self._ctx, question, principals=principals, source_ids=source_ids, document_ids=document_ids,
            limit=limit, redaction=redaction, redaction_secret_key=redaction_secret_key,
        )

    async def extract_fields(self, document_id: str, *, field_hints: dict[str, str] | None = None) -> dict[str, Any]:
        """Structured extraction for one stored document (the step ingest runs when it is enabled)."""
        return await model_actions.extract_fields(self._ctx, document_id, field_hints=field_hints)

    # ------------------------------------------------------------------ graph
    async def migrate_graph(self) -> list[str]:
        """Create the graph tables (``context-engine migrate --graph``); returns the revisions applied."""
        return await graph.migrate_graph(self._ctx)

    async def extract_graph(self, document_id: str, *, principals: Principals = TRUSTED) -> Any:
        """Build the graph facts of a stored document (what ``ingest(mode="graph")`` runs after storing it)."""
        return await graph.extract_graph(self._ctx, document_id, principals=principals)

    async def repair_graph(self, document_id: str) -> Any:
        """Remove what a deleted or replaced document's closed chunks stated (what ``delete_document`` runs after)."""
        return await graph.repair_graph(self._ctx, document_id)

    async def graph_query(
        self, action: str, *, principals: Principals = None, source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None, redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None, **arguments: Any,
    ) -> dict[str, Any]:
        """One navigation action under the caller's ACL, its text redacted (:func:`operations.graph.graph_query`)."""
        return await graph.graph_query(
            self._ctx, action, principals=principals, source_ids=source_ids, document_ids=document_ids,
            redaction=redaction, redaction_secret_key=redaction_secret_key, **arguments,
        )


__all__ = ["ContextEngine", "ContextEngineError"]
