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
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.config import ContextEngineConfig
from context_engine.embeddings.base import Embedder
from context_engine.errors import (
    ContextEngineError,
    Forbidden,
    InvalidCursor,
    InvalidRequest,
    NameTaken,
    NotFound,
)
from context_engine.hooks import Hooks, holding_ingest_usage
from context_engine.ingest import many
from context_engine.ingest.batch_embedding import batch_client
from context_engine.ingest.batch_poll import BatchOutcome, poll_batches
from context_engine.ingest.document import DocumentInput
from context_engine.ingest.pipeline import Ingestor, open_source
from context_engine.knowledge.models import AgentLinks, KnowledgeResult
from context_engine.limits import (
    INGEST_MANY_MAX,
    KNOWLEDGE_TOP_K_MAX,
    MAX_ATTRIBUTES_DEPTH,
    MAX_COMPRESS_TOKENS,
    MAX_NAME_CHARS,
    MAX_QUERY_CHARS,
    MAX_SOURCE_ID_CHARS,
)
from context_engine.models import (
    FAILURE_MESSAGES,
    Document,
    DocumentPage,
    DocumentReport,
    IngestManyError,
    IngestManyItem,
    IngestManyReport,
    IngestReport,
    SearchResult,
    Stats,
    shown_failure,
)
from context_engine.principals import TRUSTED, Principals, holds_acl, resolve
from context_engine.redaction import RedactionPolicy
from context_engine.redaction.apply import IngestScrubber, Redactor, effective_key
from context_engine.retrieval.retriever import Retriever
from context_engine.retrieval.search import search as run_search
from context_engine.revisions import idempotency, keyed, retention
from context_engine.revisions import view as revision_view
from context_engine.revisions.models import DocumentVersion, VacuumReport
from context_engine.services import Consistency, HttpClientFactory, Services
from context_engine.storage import repository as repo
from context_engine.storage import stored_text
from context_engine.storage.predicates import ReadScope
from context_engine.validation import check_json_object, check_question, check_text
from context_engine.write_access import WriteAccess, WritePolicy, WriteTarget

if TYPE_CHECKING:
    from context_engine.ingest.bulk import BulkReport

log = logging.getLogger("context_engine")

FileInput = bytes | str | os.PathLike[str] | IO[bytes]
_EMBED_BATCH = 64


def _stored(report: DocumentReport) -> bool:
    return report.status in ("completed", "embedding", "batch_pending") and report.document_id is not None


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
        self._retriever = Retriever(self.services)
        #: function tools registered on this engine (kept on the root; views share them)
        self._function_tools: Any = None
        #: mcp OAuth flows waiting for their callback (kept on the root; views share them)
        self._mcp_oauth_flows: Any = None
        #: the host's own isolation for generated code (sync or async), used when a call names none
        self._code_runner = code_runner
        #: resolves tool hosts for the egress check of mcp and http tools (default: the system's)
        self._mcp_resolver = mcp_resolver
        #: the engine a view was made from (itself for an engine)
        self._root: ContextEngine = self
        self._policy: RedactionPolicy = self.config.redaction
        self._policy_key = effective_key(self._policy, None, self.config.redaction_secret_key, self.config.secret_key)
        self._ingestor = Ingestor(self.services, self._scrubber())

    @property
    def code_runner(self) -> Any:
        """The host's code runner given to the engine (None: the built-in worker, when switched on)."""
        return self._code_runner

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
        view._ingestor = Ingestor(view.services, view._scrubber())
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
        if self._mcp_oauth_flows is not None:
            await self._mcp_oauth_flows.aclose()
        await self.services.aclose()

    @property
    def config(self) -> ContextEngineConfig:
        """The settings every pipeline reads on each call (replacing them takes effect on the next call)."""
        return self.services.config

    @config.setter
    def config(self, value: ContextEngineConfig) -> None:
        self.services.config = value

    @property
    def hooks(self) -> Hooks:
        """The host's hooks (progress, usage, errors, tool calls), shared by every pipeline."""
        return self.services.hooks

    @hooks.setter
    def hooks(self, value: Hooks) -> None:
        self.services.hooks = value

    @property
    def embedder(self) -> Embedder:
        return self.services.embedder

    @property
    def text_search_config(self) -> str:
        """The text-search configuration the schema was migrated with (the configured one until first use)."""
        return self.services.text_search_config

    async def _ready(self) -> AsyncEngine:
        """The pool for the running loop; migrates (or checks) the schema once per engine."""
        return await self.services.db()

    async def revision(self, *, principals: Principals = None) -> int:
        """The store's current monotonic revision; with non-trusted ``principals``, the handle of the
        revision of that caller's view (the last one that changed a document it may read), which is
        what every other answer to that caller is told (docs/revisions.md, "What a caller is told")."""
        db = await self._ready()
        caller = None if principals is None else resolve(principals)
        if caller is None:
            return await repo.current_revision(db)
        revs = await revision_view.for_caller(db, caller)
        return revs.told(await revision_view.view_revision(db, caller))

    async def revision_handle(self, revision: int) -> int:
        """The handle non-trusted callers are told for the store's ``revision`` (a host's call: e.g. to
        give a tenant a revision the host recorded with ``revision()``)."""
        if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
            raise InvalidRequest("revision must be a non-negative integer")
        revs = await revision_view.for_caller(await self._ready(), ())
        return revs.told(revision)

    async def _revisions(self, caller: tuple[str, ...] | None) -> revision_view.CallerRevisions:
        return await revision_view.for_caller(await self._ready(), caller)

    # ------------------------------------------------------------------ read replicas
    async def read_replicas(self) -> list[dict[str, Any]]:
        """Each configured read replica (``database.read_urls``): reachable or not, the revision it has
        applied and how many it is behind the writer. Asking also returns a reachable replica that had
        been set aside to the rotation. Empty when none is configured."""
        if not len(self.services.replicas):
            return []
        try:
            current: int | None = await self.revision()
        except ContextEngineError:
            current = None  # the writer is down: still say what each replica has
        return await self.services.replicas.status(current)

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
        principals: Principals = TRUSTED,
        mode: str = "hybrid",
        idempotency_key: str | None = None,
        batch: bool = False,
    ) -> IngestReport:
        """Ingest one document. A bad document becomes a ``failed`` report, never an exception.

        ``mode="graph"`` also extracts the document's entities and relationships once it is stored
        (the graph tables must exist: ``migrate --graph``; an ``llm`` is needed); a spreadsheet stays
        hybrid, and the report says which mode ran and why (``mode_used``, ``mode_reason``).

        Raises only for a bad call (both or neither of text/file, an ACL the caller does not hold)
        and for ``IngestTooLarge`` (an intake cap refuses, it never trims). A provider failure
        mid-embedding leaves the document in status ``embedding``; see ``resume_embeddings``.
        ``idempotency_key`` (per source): the same key with the same request returns the first
        report without writing; with other content it raises ``IdempotencyKeyReused`` (409).
        Ingests of one document take turns (each a complete version, in order); one whose turn does
        not come within ``ingest.write_wait_seconds`` answers ``skipped`` / ``in_progress``, which is
        retryable: nothing was written and its idempotency key was not spent.
        ``batch=True`` submits the stored chunk set through the provider's batch API: the document
        reports ``batch_pending`` until ``poll_batches`` completes it; a provider without a batch API
        raises ``BatchNotSupported`` (400) before anything is stored.
        """
        if (text is None) == (file is None):
            raise InvalidRequest("pass exactly one of text= or file=")
        if mode not in ("hybrid", "graph"):
            raise InvalidRequest('mode must be "hybrid" or "graph"')
        if not isinstance(batch, bool):
            raise InvalidRequest("batch must be true or false")
        if batch:  # refused before anything is read or stored
            batch_client(self.services)
        key = idempotency.check_key(idempotency_key) if idempotency_key is not None else None
        caller = resolve(principals)
        acl_list = _clean_acl(acl)
        if not holds_acl(acl_list, caller):
            raise Forbidden("you may only file a document under an ACL you hold")
        if not isinstance(source_id, str) or not source_id.strip():
            raise InvalidRequest("source_id must be a non-empty string")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise InvalidRequest("name must be a non-empty string")
        if mode == "graph":  # refused before anything is stored: no graph tables, or no model to extract with
            from context_engine.graph import store as graph_store
            from context_engine.graph.document import extraction_llm
            from context_engine.graph.errors import GraphDisabled, GraphNeedsLLM

            if not self.config.graph.enabled:
                raise GraphDisabled()
            await graph_store.require_graph(await self._ready())
            if extraction_llm(self.config) is None:
                raise GraphNeedsLLM()
        source, name = open_source(text, file, name, self.config.ingest.max_file_bytes)
        scrub = self._scrubber()
        name = scrub.text(name) if name is not None else None  # None: named after its content
        attributes = scrub.obj(dict(attributes or {}))
        if text is not None and mime is None:
            mime = "text/html" if name and name.lower().endswith((".html", ".htm")) else "text/markdown"

        async def run() -> DocumentReport:
            return await self._ingestor.ingest(
                source,
                name=name,
                source_id=source_id,
                acl=acl_list,
                attributes=attributes,
                mime=mime,
                caller=caller,
                batch=batch,
            )

        if mode == "graph":  # its usage event waits for the mode the graph step settles on
            with holding_ingest_usage() as held:
                report = await self._ingest_one(run, key, source, name, source_id, acl_list, attributes, mime, batch)
                await self._graph_step(report)
            for usage in held:
                usage.detail.update(mode=report.mode_used or "hybrid", mode_reason=report.mode_reason)
                await self.hooks.emit("on_usage", usage)
        else:
            report = await self._ingest_one(run, key, source, name, source_id, acl_list, attributes, mime, batch)
        red = self._redactor(caller, None, None)
        report.name = red.text(report.name) or report.name
        report.error = red.text(report.error)
        report.revision = (await self._revisions(caller)).told_or_none(report.revision)
        return _totals([report])

    async def _ingest_one(
        self,
        run: Callable[[], Awaitable[DocumentReport]],
        key: str | None,
        source: Any,
        name: str | None,
        source_id: str,
        acl_list: list[str],
        attributes: dict[str, Any],
        mime: str | None,
        batch: bool,
    ) -> DocumentReport:
        """One document through the pipeline (under its idempotency key when given), then its fields."""
        if key is None:
            report = await run()
        else:
            digest = keyed.ingest_fingerprint(
                await keyed.content_digest(source),
                name=name,
                source_id=source_id,
                acl=acl_list,
                attributes=attributes,
                mime=mime,
                batch=batch,
            )
            wait = float(self.config.ingest.write_wait_seconds)
            report = await _keyed_ingest(await self._ready(), source_id, key, digest, run, wait)
        if self.config.ingest.extract_fields and _stored(report):
            await self._extract_after_ingest(report.document_id)  # type: ignore[arg-type]
        return report

    async def _graph_step(self, report: DocumentReport) -> None:
        """Extract a stored document's graph facts; the report says which mode ran and why."""
        if not _stored(report):
            return
        from context_engine.graph.document import extract_document

        try:
            graph = await extract_document(self.services, report.document_id)  # type: ignore[arg-type]
            report.mode_used, report.mode_reason = graph.mode_used, graph.mode_reason
        except ContextEngineError as exc:  # stored and searchable; its graph facts are missing
            log.warning("graph extraction failed for document %s (%s)", report.document_id, exc.code)
            report.mode_used, report.mode_reason = "hybrid", exc.code

    # ------------------------------------------------------------------ bulk ingest
    async def bulk_ingest(
        self,
        documents: Iterable[Any],
        *,
        build_index: bool = True,
        batch_chunks: int = 20_000,
        principals: Principals = TRUSTED,
        maintenance_work_mem: str = "1GB",
        parallel_workers: int | None = None,
    ) -> BulkReport:
        """Load many new documents fast (``context_engine.ingest.bulk``): a batch of
        ``batch_chunks`` chunks per transaction, written with binary COPY. ``documents`` are
        mappings (``text``, ``name``, ``source_id``, ``acl``, ``attributes``, ``mime``) or
        ``BulkDocument``. With ``build_index`` the vector and text indexes are dropped for the load
        and built once after it (``maintenance_work_mem``, ``parallel_workers`` for that build). Documents
        whose identity is taken go through the ordinary ingest. Returns a ``BulkReport``."""
        from context_engine.ingest.bulk import BulkLoader

        loader = BulkLoader(self.services, self._ingestor)
        return await loader.load(
            documents,
            caller=resolve(principals),
            build_index=build_index,
            batch_chunks=batch_chunks,
            maintenance_work_mem=maintenance_work_mem,
            parallel_workers=parallel_workers,
        )

    async def _extract_after_ingest(self, document_id: str) -> None:
        """``ingest.extract_fields``: the stored document's structured fields; a model failure is
        logged and reported to ``on_error``, never a failed ingest (the document is stored)."""
        if self.config.llm is None:
            log.warning("ingest.extract_fields is on but no llm is configured; fields were not extracted")
            return
        try:
            found = await self.extract_fields(document_id, field_hints=self.config.ingest.field_hints)
        except ContextEngineError as exc:
            log.warning("structured extraction failed for document %s (%s)", document_id, exc.code)
            return
        if found["quality"] == "failed":
            log.warning("structured extraction failed for document %s (%s)", document_id, found["failure_reason"])

    async def resume_embeddings(self, document_id: str | None = None) -> IngestReport:
        """Embed only the rows still missing a vector, for one document or every resumable one.

        A sweep (no id) skips documents whose run is still moving (its lock is held).
        """
        doc_id = _check_uuid(document_id) if document_id is not None else None
        return _totals(await self._ingestor.resume(doc_id))

    # ------------------------------------------------------------------ batch embedding
    async def poll_batches(self) -> list[BatchOutcome]:
        """Ask the provider once about every embedding batch ``ingest(batch=True)`` submitted; store
        the vectors of finished ones (the document completes) and report what each poll did. A job
        that ended without every vector leaves its document in ``embedding`` (``batch_failed``), for
        ``resume_embeddings`` or a new batch ingest. An operator's call: it reads every source."""
        return await poll_batches(self.services, self._scrubber().text)

    # ------------------------------------------------------------------ ingest_many
    async def ingest_many(
        self, documents: Sequence[Mapping[str, Any]], *, principals: Principals = TRUSTED
    ) -> IngestManyReport:
        """Ingest many documents in one call: few transactions, set-based statements, one embedding
        run for all their chunks. Each document is a mapping with the keywords of :meth:`ingest`
        (``text`` or ``file``, ``name``, ``source_id``, ``acl``, ``attributes``, ``mime``,
        ``idempotency_key``). Every rule of ``ingest`` holds per document.

        Answers one item per document, in input order: its report, or the error that refused it
        (a bad field, an ACL the caller does not hold, a name a hidden document holds, a cap), which
        fails that document alone. Raises only for a bad call (not a list, more than
        ``INGEST_MANY_MAX`` documents). A name given twice is written in order, as two calls would be.
        """
        if isinstance(documents, str | bytes | Mapping) or not isinstance(documents, Sequence):
            raise InvalidRequest("documents must be a list of documents")
        if len(documents) > INGEST_MANY_MAX:
            raise InvalidRequest(f"at most {INGEST_MANY_MAX} documents may be ingested in one call")
        caller = resolve(principals)
        results: dict[int, DocumentReport | ContextEngineError] = {}
        entries: list[many.Entry] = []
        raw: dict[int, dict[str, Any]] = {}
        told: set[int] = set()
        for index, document in enumerate(documents):
            try:
                raw[index] = _batch_fields(document)
                entries.append(self._batch_entry(index, raw[index], caller))
            except ContextEngineError as exc:
                results[index] = exc

        async def single(entry: many.Entry) -> DocumentReport:
            fields = dict(raw[entry.index])
            if fields.get("file") is not None:
                fields["file"] = entry.doc.source  # already opened (and read back to its start)
            report = await self.ingest(**fields, principals=principals)
            told.add(entry.index)  # ingest already told its revision in the caller's terms
            return report.documents[0]

        results.update(await many.BatchIngestor(self._ingestor).ingest(entries, caller, single))
        red = self._redactor(caller, None, None)
        revs = await self._revisions(caller)
        items = []
        for index in range(len(documents)):
            outcome = results[index]
            if isinstance(outcome, ContextEngineError):
                error = IngestManyError(code=outcome.code, message=outcome.message, status=outcome.status)
                items.append(IngestManyItem(index=index, error=error))
                continue
            if self.config.ingest.extract_fields and outcome.status in ("completed", "embedding"):
                await self._extract_after_ingest(outcome.document_id)  # type: ignore[arg-type]
            outcome.name = red.text(outcome.name) or outcome.name
            outcome.error = red.text(outcome.error)
            if index not in told:
                outcome.revision = revs.told_or_none(outcome.revision)
            items.append(IngestManyItem(index=index, report=outcome))
        return IngestManyReport(items=items, totals=_batch_totals(items))

    def _batch_entry(self, index: int, fields: dict[str, Any], caller: tuple[str, ...] | None) -> many.Entry:
        """One document of a batch checked as :meth:`ingest` checks it, opened and scrubbed."""
        text, file = fields.get("text"), fields.get("file")
        if (text is None) == (file is None):
            raise InvalidRequest("pass exactly one of text or file")
        key = fields.get("idempotency_key")
        if key is not None:
            idempotency.check_key(key)
        acl = _clean_acl(fields.get("acl"))
        if not holds_acl(acl, caller):
            raise Forbidden("you may only file a document under an ACL you hold")
        source_id = fields.get("source_id", "default")
        if not isinstance(source_id, str) or not source_id.strip():
            raise InvalidRequest("source_id must be a non-empty string")
        name = fields.get("name")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise InvalidRequest("name must be a non-empty string")
        attributes = fields.get("attributes")
        if attributes is not None:  # what the database would refuse, refused here for this document alone
            attributes = check_json_object(attributes, "attributes", MAX_ATTRIBUTES_DEPTH)
        if isinstance(text, str):
            check_text(text, "text")
        if name is not None:
            check_text(name, "name", MAX_NAME_CHARS)
        check_text(source_id, "source_id", MAX_SOURCE_ID_CHARS)
        source, name = open_source(text, file, name, self.config.ingest.max_file_bytes)
        scrub = self._scrubber()
        name = scrub.text(name) if name is not None else None
        mime = fields.get("mime")
        if text is not None and mime is None:
            mime = "text/html" if name and name.lower().endswith((".html", ".htm")) else "text/markdown"
        doc = DocumentInput(source, name, source_id, acl, scrub.obj(dict(attributes or {})), mime)
        return many.Entry(index=index, doc=doc, single=key is not None, keyed=key is not None)

    # ------------------------------------------------------------------ search
    async def search(
        self,
        query: str,
        *,
        source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None,
        principals: Principals = None,
        top_k: int = 10,
        group_by: str = "chunk",
        compress_to_tokens: int | None = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
        as_of: int | None = None,
        consistency: Consistency = "replica",
        min_revision: int | None = None,
        mode: str | None = None,
        explain: bool = False,
    ) -> SearchResult:
        """Hybrid search: every registered leg (full-text, trigram, vector, ...) fused by ``fusion.method``.

        ``mode``: left out, the graph leg joins when the query names an entity the caller may see;
        ``"hybrid"`` leaves it out; ``"graph"`` asks for it and raises when this deployment has no
        graph. ``usage["mode"]`` / ``usage["mode_used"]`` say what was asked and what ran, and
        ``usage["graph"]["reason"]`` why (one of ``GRAPH_REASONS``).

        ``usage["vector_plan"]`` (the planner's choice and its figures, which are sized by the whole
        index) is reported to a trusted caller only, or with ``explain=True``: a host's own
        diagnostics, never to be passed on to the caller whose principals the search ran with.

        ``as_of`` searches the store as it was at that revision (``None``: the current one).
        With read replicas configured the search runs on one (``usage["read_from"]`` names the server):
        ``consistency="primary"`` reads the writer instead, and ``min_revision`` (or ``as_of``) picks a
        server that has applied that revision, so a caller sees its own ingest (docs/scaling.md).

        ``group_by="document"`` counts distinct documents in ``top_k`` (up to
        ``search.max_top_documents``), each with its best passages (``SearchResult.documents``).
        ``compress_to_tokens=N`` fits the hits to N tokens of the embedder's counter: the weakest hits
        go first, then the tails of the longest; ``usage["compression"]`` says what was cut.
        Hits are redacted by the output policy (the engine's, the view's, or this call's)
        before they are returned.
        """
        query = check_question(query, "query", MAX_QUERY_CHARS)
        if group_by not in ("chunk", "document"):
            raise InvalidRequest('group_by must be "chunk" (passages) or "document"')
        if mode is not None and mode not in ("auto", "hybrid", "graph"):
            raise InvalidRequest('mode must be "hybrid" or "graph" (or left out)')
        cfg = self.config.search
        top_k = _check_top_k(top_k, cfg.max_top_documents if group_by == "document" else cfg.max_top_k)
        caller = resolve(principals)
        red = self._redactor(caller, redaction, redaction_secret_key)
        sources, documents = _check_ids("source_ids", source_ids), _check_uuids(document_ids)
        if compress_to_tokens is not None and (
            not isinstance(compress_to_tokens, int)
            or isinstance(compress_to_tokens, bool)
            or not 1 <= compress_to_tokens <= MAX_COMPRESS_TOKENS
        ):
            raise InvalidRequest(f"compress_to_tokens must be an integer between 1 and {MAX_COMPRESS_TOKENS}")

        revs = await self._revisions(caller)
        at, floor = revs.heard(as_of), revs.heard(min_revision, "min_revision")

        async def read() -> SearchResult:
            db = await self.services.read_db()
            revision = await revision_view.resolve(db, at, revs, caller, source_ids=sources, document_ids=documents)
            scope = ReadScope(caller, sources, documents, as_of=revision)
            return await run_search(
                self._retriever,
                red,
                query,
                scope,
                top_k=top_k,
                group_by=group_by,
                compress_to_tokens=compress_to_tokens,
                mode=mode or "auto",
            )

        result, server = await self.services.reading(
            read, consistency=consistency, as_of=at, min_revision=floor, trusted=caller is None
        )
        result.usage["read_from"] = server
        if caller is not None and not explain:  # its figures count rows of every tenant
            result.usage.pop("vector_plan", None)
        if caller is not None:  # chunk ids come from one sequence for every tenant: told as handles
            passages = {id(h): h for h in result.hits}
            for grouped in result.documents or []:
                passages.update({id(h): h for h in grouped.passages})
            for hit in passages.values():
                hit.chunk_id = revs.told_chunk(hit.chunk_id)
        return result

    # ------------------------------------------------------------------ documents
    async def get_document(
        self,
        document_id: str,
        *,
        principals: Principals = None,
        include_text: bool = True,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
        as_of: int | None = None,
        version: int | None = None,
        consistency: Consistency = "replica",
        min_revision: int | None = None,
    ) -> Document:
        """The document now, as of revision ``as_of``, or one ``version`` of it; a past version is
        answered under the ACL it had then. Read replicas: as for ``search``; a ``version`` is a
        write's own token, so it is read on the writer, where a version just written is found."""
        caller = resolve(principals)
        red = self._redactor(caller, redaction, redaction_secret_key)
        doc_id = _check_uuid(document_id)
        if version is not None and as_of is not None:
            raise InvalidRequest("pass as_of or version, not both")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
            raise InvalidRequest("version must be a positive integer")

        revs = await self._revisions(caller)
        at, floor = revs.heard(as_of), revs.heard(min_revision, "min_revision")

        async def read() -> dict[str, Any] | None:
            db = await self.services.read_db()
            scope = ReadScope(caller, as_of=await revision_view.resolve(db, at, revs, caller, document_ids=[doc_id]))
            return await repo.get_document(db, doc_id, scope, with_text=include_text, version=version)

        where = "primary" if version is not None and consistency == "replica" else consistency
        row, _ = await self.services.reading(
            read, consistency=where, as_of=at, min_revision=floor, trusted=caller is None
        )
        if row is None:
            what = f"version {version} of document" if version is not None else "document"
            raise NotFound(f"{what} {document_id} not found")
        return _document(row, revs=revs, red=red)

    async def document_versions(
        self,
        document_id: str,
        *,
        principals: Principals = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> list[DocumentVersion]:
        """Every version of the document the caller may see (each under its own ACL), oldest first,
        with its revision range; ``NotFound`` when there is none."""
        caller = resolve(principals)
        red = self._redactor(caller, redaction, redaction_secret_key)
        doc_id = _check_uuid(document_id)
        rows = await repo.document_versions(await self._ready(), doc_id, ReadScope(caller))
        if not rows:
            raise NotFound(f"document {document_id} not found")
        revs = await self._revisions(caller)
        return [
            DocumentVersion(
                **{
                    **r,
                    "name": red.text(r["name"]),
                    "attributes": red.obj(r["attributes"] or {}),
                    "valid_from": revs.told(r["valid_from"]),
                    "valid_to": revs.told_or_none(r["valid_to"]),
                }
            )
            for r in rows
        ]

    async def list_documents(
        self,
        *,
        principals: Principals = None,
        source_ids: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
        as_of: int | None = None,
        consistency: Consistency = "replica",
        min_revision: int | None = None,
    ) -> DocumentPage:
        """A page of the documents the caller may see, now or as of revision ``as_of``. Read
        replicas: as for ``search``."""
        caller = resolve(principals)
        red = self._redactor(caller, redaction, redaction_secret_key)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 500:
            raise InvalidRequest("limit must be an integer between 1 and 500")
        after = _decode_cursor(cursor) if cursor else None
        sources = _check_ids("source_ids", source_ids)

        revs = await self._revisions(caller)
        at, floor = revs.heard(as_of), revs.heard(min_revision, "min_revision")

        async def read() -> list[dict[str, Any]]:
            db = await self.services.read_db()
            revision = await revision_view.resolve(db, at, revs, caller, source_ids=sources)
            scope = ReadScope(caller, sources, as_of=revision)
            return await repo.list_documents(db, scope, limit=limit + 1, after=after)

        rows, _ = await self.services.reading(
            read, consistency=consistency, as_of=at, min_revision=floor, trusted=caller is None
        )
        more = len(rows) > limit
        rows = rows[:limit]
        docs = [_document(r, revs=revs, red=red) for r in rows]
        next_cursor = _encode_cursor(rows[-1]) if more and rows else None
        return DocumentPage(documents=docs, next_cursor=next_cursor)

    async def update_document(
        self,
        document_id: str,
        *,
        principals: Principals = None,
        acl: Sequence[str] | None = None,
        attributes: dict[str, Any] | None = None,
        name: str | None = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> Document:
        caller = resolve(principals)
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
                db,
                doc_id,
                ReadScope(caller),
                acl=acl_list,
                attributes=attributes,
                name=name,
                access=self.services.write_access,
            )
        except Exception as exc:
            if "ux_ce_documents_identity" in str(exc):
                raise NameTaken() from exc
            raise
        if revision is None:
            raise NotFound(f"document {document_id} not found")
        return await self.get_document(
            doc_id,
            principals=TRUSTED if caller is None else list(caller),
            include_text=False,
            redaction=redaction,
            redaction_secret_key=redaction_secret_key,
            consistency="primary",  # its own write: a replica may not have it yet
        )

    async def delete_document(
        self,
        document_id: str,
        *,
        principals: Principals = None,
        idempotency_key: str | None = None,
    ) -> int:
        """Delete from the next revision on; returns that revision (reads as of earlier ones still see
        it), told as a handle to a non-trusted caller.

        With ``idempotency_key`` a retry is a no-op that returns the revision of the first delete.
        """
        caller = resolve(principals)
        doc_id = _check_uuid(document_id)
        db = await self._ready()
        if idempotency_key is None:
            revision = await repo.delete_document(db, doc_id, ReadScope(caller), self.services.write_access)
        else:
            revision = await _keyed_delete(
                db, doc_id, caller, idempotency.check_key(idempotency_key), self.services.write_access
            )
        if revision is None:
            raise NotFound(f"document {document_id} not found")
        await self.repair_graph(doc_id)  # frequencies, orphans, touched communities (one query without a graph)
        return (await self._revisions(caller)).told(revision)

    async def vacuum_revisions(self, keep_after: int) -> VacuumReport:
        """Remove history no revision from ``keep_after`` on can see; reads as of earlier revisions
        then answer ``revision_expired``. Current documents are untouched."""
        return VacuumReport(**await retention.vacuum(await self._ready(), keep_after))

    async def stats(
        self,
        *,
        principals: Principals = None,
        source_ids: Sequence[str] | None = None,
        as_of: int | None = None,
    ) -> Stats:
        caller = resolve(principals)
        db = await self._ready()
        revs = await self._revisions(caller)
        at, sources = revs.heard(as_of), _check_ids("source_ids", source_ids)
        revision = await revision_view.resolve(db, at, revs, caller, source_ids=sources)
        found = await repo.stats(db, ReadScope(caller, sources, as_of=revision))
        if caller is not None:  # the revision of its view, at the revision it asked about
            found["revision"] = revs.told(
                await revision_view.view_revision(db, caller, source_ids=sources, as_of=revision)
            )
        return Stats(**found)

    # ------------------------------------------------------------------ knowledge
    async def knowledge_query(
        self,
        query: str,
        *,
        top_k: int = 5,
        agent_id: str | None = None,
        expand: bool = True,
        rerank: bool = True,
        principals: Principals = None,
        source_ids: Sequence[str] | None = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
        as_of: int | None = None,
        consistency: Consistency = "replica",
        min_revision: int | None = None,
    ) -> KnowledgeResult:
        """The passages that best answer ``query``, with a trace of how they were found.

        Expansion, per-query vector + full-text search, fusion, enumeration widening and a guarded
        rerank: see :mod:`context_engine.knowledge.pipeline`. ``expand=False, rerank=False`` calls no
        model. ``agent_id`` narrows to the agent's links (an unknown agent is ``NotFound``). Output
        redaction applies as for ``search``, to the judge's view of the passages as well. ``as_of``
        reads the store as of that revision. Read replicas: as for ``search`` (a replica that fails
        mid-way hands the whole query, model calls included, to the writer).
        """
        from context_engine.knowledge.pipeline import knowledge_query

        query = check_question(query, "query", MAX_QUERY_CHARS)
        top_k = _check_top_k(top_k, KNOWLEDGE_TOP_K_MAX)
        if not isinstance(expand, bool) or not isinstance(rerank, bool):
            raise InvalidRequest("expand and rerank must be booleans")
        caller = resolve(principals)
        sources = _check_ids("source_ids", source_ids)

        revs = await self._revisions(caller)
        at, floor = revs.heard(as_of), revs.heard(min_revision, "min_revision")

        async def read() -> KnowledgeResult:
            db = await self.services.read_db()
            revision = await revision_view.resolve(db, at, revs, caller, source_ids=sources)
            return await knowledge_query(
                self._retriever,
                self._redactor(caller, redaction, redaction_secret_key),
                query,
                caller=caller,
                top_k=top_k,
                agent_id=agent_id,
                expand=expand,
                rerank=rerank,
                source_ids=sources,
                as_of=revision,
            )

        result, _ = await self.services.reading(
            read, consistency=consistency, as_of=at, min_revision=floor, trusted=caller is None
        )
        for match in result.matches if caller is not None else []:
            match.chunk_id = str(revs.told_chunk(int(match.chunk_id)))
        return result

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

    # ------------------------------------------------------------------ knowledge tool
    async def search_knowledge_base(
        self,
        *,
        action: str | None = None,
        principals: Principals = None,
        scope: Any,
        redaction: RedactionPolicy | None = None,
        secret_key: str | bytes | None = None,
        compute: Any = None,
        map_reduce: Any = None,
        **model_args: Any,
    ) -> dict[str, Any]:
        """The knowledge tool (``context_engine.knowledge.tool``): one ``action`` per call.

        ``scope`` is the host's ceiling and has no default (``None`` raises); ``principals=None``
        warns and means trusted. Model mistakes answer ``{"success": false, "error": ...}``.
        """
        from context_engine.knowledge.tool.dispatch import run_knowledge_tool

        return await run_knowledge_tool(
            self,
            action=action,
            principals=principals,
            scope=scope,
            redaction=redaction,
            secret_key=secret_key,
            compute=compute,
            map_reduce=map_reduce,
            model_args=model_args,
        )

    def output_redactor(
        self,
        caller: tuple[str, ...] | None,
        redaction: RedactionPolicy | None = None,
        secret_key: str | bytes | None = None,
    ) -> Redactor:
        """The output redaction one call applies (``caller`` as ``principals.resolve`` returns it)."""
        return self._redactor(caller, redaction, secret_key)

    async def database(self) -> AsyncEngine:
        """The connection pool, migrated or checked: for reads that live outside this class."""
        return await self._ready()

    # ------------------------------------------------------------------ tools
    def _tool_functions(self) -> Any:
        """The function tools registered on this engine (shared by its views)."""
        from context_engine.tools.functions import FunctionRegistry

        # kept on the root engine, created on first use, so views share it
        root = self._root
        if root._function_tools is None:
            root._function_tools = FunctionRegistry()
        return root._function_tools

    async def _tool_runtime(self) -> Any:
        from context_engine.tools.execute import ToolRuntime

        return ToolRuntime(
            db=await self._ready(),
            secret_key=self.config.secret_key,
            functions=self._tool_functions(),
            hooks=self.hooks,
            http_client_factory=self.services.http_client_factory,
            resolver=self._mcp_resolver,
        )

    async def register_tool(self, tool: Any) -> dict[str, Any]:
        """Store an http, db or mcp tool (a ``ToolConfig`` or its fields as a dict); its config is
        encrypted under ``secret_key``.

        Returns its listing (``tool_id``, call ``name`` such as ``http_get_weather``, ...). Names are
        not unique: a second tool with the same name is a second tool, told apart by ``tool_id``.
        """
        from context_engine.tools import registry
        from context_engine.tools.crypto import ConfigCipher
        from context_engine.tools.models import tool_config

        tool = tool_config(tool)
        db = await self._ready()
        entry = await registry.insert(db, tool, ConfigCipher(self.config.secret_key))
        listing = entry.public(trusted=True)
        if tool.kind == "mcp" and "oauth" in tool.config:
            try:  # a server that wants a person's consent answers with the popup's URL
                listing["authorization"] = await self.start_mcp_oauth(str(entry.tool_id))
            except BaseException:
                await registry.delete(db, str(entry.tool_id), None)  # nothing half-registered
                raise
        return listing

    def _oauth_flows(self) -> Any:
        from context_engine.tools.mcp_oauth import McpOAuthFlows

        root = self._root
        if root._mcp_oauth_flows is None:
            root._mcp_oauth_flows = McpOAuthFlows()
        return root._mcp_oauth_flows

    async def start_mcp_oauth(self, tool_id: str) -> dict[str, Any]:
        """Start (again) the OAuth authorization of a stored mcp tool that has an ``oauth`` section.

        ``{"status": "authorization_required", "authorization_url", "correlation_id", "expires_at"}``:
        open the URL in a popup; the provider sends it to ``oauth.redirect_uri``, whose handler calls
        :meth:`complete_mcp_oauth`. ``{"status": "connected", ...}``: nothing to consent to.
        An operator's call, like registration (no principals).
        """
        from context_engine.tools.crypto import ConfigCipher
        from context_engine.tools.errors import ToolNotFound
        from context_engine.tools.mcp_oauth_store import sealed_mcp_config

        try:
            checked = str(uuid.UUID(str(tool_id)))
        except ValueError:
            raise ToolNotFound(str(tool_id)) from None
        db = await self._ready()
        sealed = await sealed_mcp_config(db, checked)
        if sealed is None:
            raise ToolNotFound(checked)
        config = ConfigCipher(self.config.secret_key).decrypt(sealed, checked)
        return await self._oauth_flows().start(
            db,
            self.config.secret_key,
            checked,
            config,
            resolver=self._mcp_resolver,
            http_client_factory=self.services.http_client_factory,
        )

    async def complete_mcp_oauth(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The popup's message for the provider's callback query (its ``code``, ``state``, ``error``, ``iss``).

        ``{"type": "mcp-oauth-success", "correlation_id", "tool_id"}`` or ``{"type": "mcp-oauth-error",
        "code", "message", "correlation_id"}`` (:meth:`mcp_oauth_popup` also renders the page). Never raises
        for a bad callback: every failure is one of the six codes.
        """
        return await self._oauth_flows().complete(params)

    async def mcp_oauth_popup(self, params: Mapping[str, Any]) -> tuple[dict[str, Any], str, dict[str, str]]:
        """:meth:`complete_mcp_oauth`, with the callback's HTML page and its headers: the page posts the
        message to the opener on the origin of the tool's ``oauth.redirect_uri`` and nowhere else."""
        from context_engine.tools.mcp_oauth import popup_page

        payload, origin = await self._oauth_flows().answer(params)
        page, headers = popup_page(payload, origin)
        return payload, page, headers

    def register_function_tool(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        acl: Sequence[str] | None = None,
        requires_approval: bool = False,
    ) -> dict[str, Any]:
        """Offer a Python callable as tool ``fn_<name>`` (kept in memory, never persisted).

        Arguments are validated against its signature; a sync function runs in a worker thread.
        """
        from context_engine.tools.registry import ToolEntry

        tool = self._tool_functions().register(
            fn, name=name, description=description, acl=acl, requires_approval=requires_approval
        )
        return ToolEntry.of_function(tool).public(trusted=True)

    async def _visible_tools(self, caller: tuple[str, ...] | None) -> list[Any]:
        from context_engine.tools import registry
        from context_engine.tools.registry import ToolEntry

        functions = [ToolEntry.of_function(f) for f in self._tool_functions().all() if f.visible_to(caller)]
        return functions + await registry.visible(await self._ready(), caller)

    async def list_tools(self, *, principals: Principals = None) -> list[dict[str, Any]]:
        """Every tool the caller may see (function tools first, then stored ones, oldest first)."""
        caller = resolve(principals)
        return [entry.public(trusted=caller is None) for entry in await self._visible_tools(caller)]

    async def search_tools(
        self,
        query: str = "",
        *,
        principals: Principals = None,
        kind: str | Sequence[str] | None = None,
        name_contains: str | None = None,
        requires_approval: bool | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> list[dict[str, Any]]:
        """A page (a list with ``next_cursor``) of the caller's tools that pass every filter.

        Filters AND together; a non-empty ``query`` ranks and also excludes tools none of its terms
        match; ``cursor`` only continues the same query and filters.
        """
        from context_engine.tools import discovery

        caller = resolve(principals)
        entries = await self._visible_tools(caller)
        return discovery.search(
            entries,
            query,
            trusted=caller is None,
            kind=kind,
            name_contains=name_contains,
            requires_approval=requires_approval,
            limit=limit,
            cursor=cursor,
        )

    async def delete_tool(self, tool_id: str, *, principals: Principals = None) -> None:
        """Remove a stored tool (``tool_id``) or a function tool (its call name)."""
        from context_engine.tools import registry
        from context_engine.tools.errors import ToolNotFound

        caller = resolve(principals)
        if isinstance(tool_id, str) and tool_id.startswith("fn_"):
            function = self._tool_functions().get(tool_id)
            if function is None or not function.visible_to(caller):
                raise ToolNotFound(tool_id)
            self._tool_functions().remove(tool_id)
            return
        try:
            checked = str(uuid.UUID(str(tool_id)))
        except ValueError:
            raise ToolNotFound(str(tool_id)) from None
        if not await registry.delete(await self._ready(), checked, caller):
            raise ToolNotFound(checked)

    async def execute_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        principals: Principals = None,
        tool_id: str | None = None,
        approval_scope: str | None = None,
        result_max_chars: int | None = 8000,
        result_max_rows: int | None = 100,
        response_mode: str | None = None,
        approval_ttl_seconds: float = 3600,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> dict[str, Any]:
        """Run tool ``name`` for the caller: ``{"result", "usage", "tool_id", "call_id"}``, or
        ``{"approval_required": {...}}`` for a gated tool not yet approved in ``approval_scope``.

        Raises ``ToolNotFound`` (missing or invisible alike), ``AmbiguousToolError`` (several visible
        tools share the name and no ``tool_id``), ``ToolArgumentsInvalid``, ``EgressRefused`` and
        ``ToolExecutionFailed`` (its text stripped of row data and masked). Every call is audited.
        """
        from datetime import timedelta

        from context_engine.tools.execute import CallOptions, execute_tool

        caller = resolve(principals)
        ttl = approval_ttl_seconds
        if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not 1 <= ttl <= 30 * 86400:
            raise InvalidRequest("approval_ttl_seconds must be between 1 and 2592000 (30 days)")
        options = CallOptions(
            approval_scope=approval_scope,
            tool_id=tool_id,
            result_max_chars=result_max_chars,
            result_max_rows=result_max_rows,
            response_mode=response_mode,  # type: ignore[arg-type]
            approval_ttl=timedelta(seconds=approval_ttl_seconds),
        )
        return await execute_tool(
            await self._tool_runtime(),
            name,
            arguments,
            caller=caller,
            redactor=self._redactor(caller, redaction, redaction_secret_key),
            options=options,
        )

    async def resolve_tool_approval(self, approval_id: str, decision: str, *, approver: str | None = None) -> Any:
        """Approve or deny a pending approval (``context_engine.tools.resolve_approval`` calls this)."""
        from context_engine.tools import approvals

        return await approvals.resolve(await self._ready(), approval_id, decision, approver)

    async def get_tool_approval(self, approval_id: str) -> Any:
        """One approval record (an ``ApprovalRecord``), for a host showing it to an approver."""
        from context_engine.tools import approvals

        return await approvals.get(await self._ready(), approval_id)

    async def tool_calls(self, *, limit: int = 100, tool_id: str | None = None) -> list[dict[str, Any]]:
        """The latest tool-call audit rows, newest first (already redacted when written)."""
        from context_engine.tools import audit

        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
            raise InvalidRequest("limit must be an integer between 1 and 1000")
        return await audit.recent(await self._ready(), limit=limit, tool_id=tool_id)

    # ------------------------------------------------------------------ model-driven actions
    async def compute(
        self,
        question: str,
        *,
        principals: Principals = None,
        source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None,
        settings: Any = None,
        code_runner: Any = None,
        runner: Any = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> dict[str, Any]:
        """A figure over every row of the spreadsheets in scope: see :mod:`context_engine.compute`."""
        from context_engine.compute import compute

        caller = resolve(principals)
        return await compute(
            await self._ready(),
            question,
            scope=ReadScope(caller, _check_ids("source_ids", source_ids), _check_uuids(document_ids)),
            config=self.config,
            settings=settings if settings is not None else self.config.compute,
            code_runner=code_runner if code_runner is not None else self._code_runner,
            runner=runner,
            redactor=self._redactor(caller, redaction, redaction_secret_key),
            hooks=self.hooks,
            http_client_factory=self.services.http_client_factory,
        )

    async def compute_over_frames(
        self,
        frames: dict[str, Any],
        question: str,
        *,
        settings: Any = None,
        code_runner: Any = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> dict[str, Any]:
        """``compute`` over dataframes the host already holds (no document involved)."""
        from context_engine.compute import compute_over_frames

        return await compute_over_frames(
            frames,
            question,
            config=self.config,
            settings=settings if settings is not None else self.config.compute,
            code_runner=code_runner if code_runner is not None else self._code_runner,
            redactor=self._redactor(None, redaction, redaction_secret_key),
            hooks=self.hooks,
            http_client_factory=self.services.http_client_factory,
        )

    async def map_reduce(
        self,
        instruction: str,
        *,
        principals: Principals = None,
        source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None,
        limit: int | None = None,
        runner: Any = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> dict[str, Any]:
        """The same question asked of each document in scope: see :mod:`context_engine.mapreduce`."""
        from context_engine.mapreduce import map_reduce

        caller = resolve(principals)
        return await map_reduce(
            await self._ready(),
            instruction,
            scope=ReadScope(caller, _check_ids("source_ids", source_ids), _check_uuids(document_ids)),
            llm=self.config.llm,
            limit=limit,
            runner=runner,
            redactor=self._redactor(caller, redaction, redaction_secret_key),
            hooks=self.hooks,
            http_client_factory=self.services.http_client_factory,
        )

    async def query_meta(
        self,
        question: str,
        *,
        principals: Principals = None,
        source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None,
        limit: int = 50,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> dict[str, Any]:
        """The extracted fields a question names, per document: see :mod:`context_engine.extraction`."""
        from context_engine.extraction import query_meta

        caller = resolve(principals)
        return await query_meta(
            await self._ready(),
            question,
            scope=ReadScope(caller, _check_ids("source_ids", source_ids), _check_uuids(document_ids)),
            llm=self.config.llm,
            limit=limit,
            redactor=self._redactor(caller, redaction, redaction_secret_key),
            http_client_factory=self.services.http_client_factory,
        )

    async def extract_fields(self, document_id: str, *, field_hints: dict[str, str] | None = None) -> dict[str, Any]:
        """Structured extraction for one stored document (the step ingest runs when it is enabled):
        the envelope of :func:`~context_engine.extraction.extract_structured_data` with ``stored``."""
        from context_engine.extraction import extract_stored_document

        return await extract_stored_document(
            await self._ready(),
            _check_uuid(document_id),
            llm=self.config.llm,
            field_hints=field_hints,
            redactor=self._redactor(None, None, None),
            http_client_factory=self.services.http_client_factory,
            hooks=self.services.hooks,
        )

    # ------------------------------------------------------------------ graph
    async def migrate_graph(self) -> list[str]:
        """Create the graph tables (``context-engine migrate --graph``); returns the revisions applied."""
        from context_engine.graph import names
        from context_engine.storage.migrate import migrate

        db = await self._ready()
        announce = logging.getLogger("context_engine.migrate").info  # a library logs its index builds
        report = await migrate(
            db,
            dim=self.embedder.dim,
            text_search_config=self.text_search_config,
            announce=announce,
            graph=True,
            trigram=self.config.fusion.trigram_enabled,
        )
        names.forget(db)
        return report.applied

    async def extract_graph(self, document_id: str, *, principals: Principals = TRUSTED) -> Any:
        """Build the graph facts of a stored document (what ``ingest(mode="graph")`` runs after storing it)."""
        from context_engine.graph.document import extract_document

        doc = await self.get_document(document_id, principals=principals, include_text=False)
        # it rewrites the document's graph facts (and spends model calls): a write, not a read
        target = WriteTarget(doc.id, doc.source_id, doc.name, tuple(doc.acl))
        self.services.write_access.check(target, resolve(principals))
        return await extract_document(self.services, doc.id)

    async def repair_graph(self, document_id: str) -> Any:
        """Remove what a deleted or replaced document's closed chunks stated (what ``delete_document`` runs after)."""
        from context_engine.graph.document import repair_document

        return await repair_document(self.services, _check_uuid(document_id))

    async def graph_query(
        self,
        action: str,
        *,
        principals: Principals = None,
        source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
        **arguments: Any,
    ) -> dict[str, Any]:
        """One navigation action (``get_neighbors``, ``traverse``, ``find_related``, ``community_summary``)
        under the caller's ACL (and ``document_ids``, a knowledge tool's ceiling), its text fields redacted
        by the output policy (ids are not)."""
        from context_engine.graph.navigate import run_action
        from context_engine.graph.redact import redact_answer

        caller = resolve(principals)
        scope = ReadScope(caller, _check_ids("source_ids", source_ids), _check_uuids(document_ids))
        answer = await run_action(await self._ready(), scope, action, arguments)
        return redact_answer(answer, self._redactor(caller, redaction, redaction_secret_key))


# ---------------------------------------------------------------------- helpers
class _NotAdmitted(Exception):
    """The run could not take its turn on the document: nothing happened, so the key is not spent."""

    def __init__(self, report: DocumentReport):
        super().__init__("not admitted")
        self.report = report


async def _keyed_ingest(
    db: AsyncEngine, source_id: str, key: str, digest: str, run: Callable[[], Any], wait: float
) -> DocumentReport:
    """``run()`` once per (source, key): a retry gets the first report back and writes nothing. A
    run that was not admitted (``skipped`` / ``in_progress``) records nothing: the key stays free."""

    async def work() -> idempotency.Outcome:
        report: DocumentReport = await run()
        if report.status == "skipped" and report.skip_reason == "in_progress":
            raise _NotAdmitted(report)
        result = report.model_dump(mode="json")
        return idempotency.Outcome(report.document_id, report.version, report.revision, result, replayed=False)

    try:
        outcome = await idempotency.run_once(
            db, source_id=source_id, key=key, operation="ingest", digest=digest, work=work, wait_seconds=wait
        )
    except _NotAdmitted as exc:
        return exc.report
    return DocumentReport(**outcome.result)


async def _keyed_delete(
    db: AsyncEngine, document_id: str, caller: tuple[str, ...] | None, key: str, access: WriteAccess
) -> int | None:
    """One delete per (source, key); a retry answers the first delete's revision if the caller
    could see the document just before it."""
    source_id = await repo.document_source(db, document_id)
    if source_id is None:
        return None

    async def work() -> idempotency.Outcome:
        revision = await repo.delete_document(db, document_id, ReadScope(caller), access)
        if revision is None:
            raise NotFound(f"document {document_id} not found")
        return idempotency.Outcome(document_id, None, revision, {"revision": revision}, replayed=False)

    outcome = await idempotency.run_once(
        db, source_id=source_id, key=key, operation="delete", digest=keyed.delete_fingerprint(document_id), work=work
    )
    if outcome.replayed and outcome.revision is not None:
        seen = await repo.get_document(db, document_id, ReadScope(caller, as_of=outcome.revision - 1), with_text=False)
        if seen is None:
            return None
    return outcome.revision


def _totals(reports: list[DocumentReport]) -> IngestReport:
    totals = {
        "files": len(reports),
        "completed": 0,
        "failed": 0,
        "skipped": 0,
        "embedding": 0,
        "batch_pending": 0,
        "chunks": 0,
    }
    for report in reports:
        totals[report.status] = totals.get(report.status, 0) + 1
        totals["chunks"] += report.chunks
    return IngestReport(documents=reports, totals=totals)


#: the keywords a document of ``ingest_many`` may carry (those of ``ingest`` that describe one document)
_BATCH_FIELDS = frozenset({"text", "file", "name", "source_id", "acl", "attributes", "mime", "idempotency_key"})


def _batch_fields(document: Any) -> dict[str, Any]:
    if not isinstance(document, Mapping):
        raise InvalidRequest("each document must be a mapping of ingest's keywords")
    unknown = sorted(str(k) for k in document if k not in _BATCH_FIELDS)
    if unknown:
        raise InvalidRequest(f"unknown document field(s): {', '.join(unknown)}")
    return dict(document)


def _batch_totals(items: list[IngestManyItem]) -> dict[str, int]:
    totals = {"files": len(items), "completed": 0, "failed": 0, "skipped": 0, "embedding": 0, "refused": 0, "chunks": 0}
    for item in items:
        if item.report is None:
            totals["refused"] += 1
        else:
            totals[item.report.status] = totals.get(item.report.status, 0) + 1
            totals["chunks"] += item.report.chunks
    return totals


def _clean_acl(acl: Sequence[str] | None) -> list[str]:
    if acl is None:
        return []
    if isinstance(acl, str) or not all(isinstance(a, str) and a.strip() for a in acl):
        raise InvalidRequest("acl must be a list of non-empty strings")
    return sorted(set(acl))


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


def _document(row: dict[str, Any], *, revs: revision_view.CallerRevisions, red: Redactor) -> Document:
    trusted = revs.trusted
    reason = shown_failure(row.get("failure_reason"))
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
        revision=revs.told(row["updated_revision"]),
        chunk_count=row["chunk_count"],
        meta=red.obj(row["meta"] or {}),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        text=red.text(row.get("text")),
        # a version read (it has valid_from) assembles the whole text from the chunks: never cut
        text_truncated=stored_text.is_truncated(row.get("meta")) and "valid_from" not in row,
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
        raise InvalidCursor("cursor is not valid; pass the next_cursor of a previous page") from None


__all__ = ["ContextEngine", "ContextEngineError"]
