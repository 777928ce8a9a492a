"""One document through intake, extraction, chunking, storage and embedding.

Chunks are stored before they are embedded: the new version is written (and visible to the
text legs) first, then the missing vectors are filled batch by batch, each batch stored as it
lands. A provider failure leaves the document in status ``embedding`` with its progress, and
``resume`` embeds only the rows still missing a vector.

Writers of one document identity take turns: a run owns the identity by a session advisory lock
(:mod:`context_engine.storage.session_locks`) from before it writes the version until its last
vector is stored, so versions are admitted one at a time, each a complete version in the history.
A writer that finds the identity owned waits its turn up to ``ingest.write_wait_seconds`` and then
answers ``skipped`` / ``in_progress``, which is retryable (routes: 409 with ``Retry-After``). The
lock dies with the process or its connection, so a killed run lets go at once; ``lease_holder`` on
the row is the run's fencing token, which every store checks, so a run that lost its lock while
the database restarted can never write over the run that took over.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from context_engine.config import ContextEngineConfig
from context_engine.errors import ContextEngineError, IngestTooLarge
from context_engine.hooks import ErrorEvent, ProgressEvent, UsageEvent
from context_engine.ingest import batch_embedding, batching, embed_store, holders
from context_engine.ingest.chunker import Chunk, chunk_units, normalise
from context_engine.ingest.document import DocumentInput, Source
from context_engine.ingest.extracted import ExtractionFailed
from context_engine.ingest.pool_share import IngestShare, share_for
from context_engine.models import FAILURE_MESSAGES, DocumentReport
from context_engine.redaction.apply import IngestScrubber
from context_engine.storage import repository as repo
from context_engine.storage import session_locks, stored_text

if TYPE_CHECKING:
    from context_engine.ingest.formats.page_transcriber import PageTranscriber
    from context_engine.services import Services

log = logging.getLogger("context_engine.ingest")

T = TypeVar("T")


#: the default of ``ingest.hold_chunks``: a document of more chunks is not held in memory between
#: extraction and storage (a 22 MB spreadsheet is ~44,000 chunks)
HOLD_CHUNKS = 2_000


@dataclass
class Prepared:
    """An extracted, chunked document. Its stored text is the chunks joined by blank lines, built by
    the database from the chunk rows (a large spreadsheet's text is never held twice here).

    ``chunks`` is ``None`` when the document has more than ``ingest.hold_chunks`` chunks: they are
    extracted again as they are written (:func:`chunk_stream`), and ``content_hash`` and
    ``chunk_count`` are checked against that second pass.
    """

    mime: str
    chunks: list[Chunk] | None
    meta: dict[str, Any]
    content_hash: str
    chunk_count: int
    #: ``(position, tokens)`` of the first chunk over the embedder's per-input cap, if any
    too_large: tuple[int, int] | None = None


def open_source(text: str | None, file: Any, name: str | None, cap: int | None) -> tuple[Source, str | None]:
    """Resolve the input and apply ``ingest.max_file_bytes`` before reading any content.

    The name is ``name``, else the file's own name; ``None`` when the input carries none (text,
    bytes, an anonymous stream), for the ingest to name the document after its content.
    """
    if text is not None:
        if not isinstance(text, str):
            from context_engine.errors import InvalidRequest

            raise InvalidRequest("text must be a string")
        data = text.encode("utf-8")
        _cap(cap, len(data))
        return data, name
    if isinstance(file, bytes | bytearray):
        _cap(cap, len(file))
        return bytes(file), name
    if isinstance(file, str | os.PathLike):
        path = Path(file)
        _cap(cap, path.stat().st_size)  # answered by stat, before a byte is read
        return path, name or path.name
    if hasattr(file, "read"):
        default = Path(str(getattr(file, "name", "") or "")).name or None
        if hasattr(file, "seek") and hasattr(file, "tell") and getattr(file, "seekable", lambda: True)():
            start = file.tell()
            file.seek(0, os.SEEK_END)
            size = file.tell() - start
            file.seek(start)
            _cap(cap, size)
            return file, name or default
        data = file.read() if cap is None else file.read(cap + 1)
        _cap(cap, len(data))
        return data, name or default
    from context_engine.errors import InvalidRequest

    raise InvalidRequest("file must be bytes, a path or a binary file object")


def _cap(cap: int | None, size: int) -> None:
    if cap is not None and size > cap:
        raise IngestTooLarge("ingest.max_file_bytes", cap, size)


def chunk_stream(
    source: Source,
    name: str,
    mime: str | None,
    budget: int,
    count_tokens: Callable[[str], int],
    max_rows: int | None,
    scrub: IngestScrubber | None = None,
    vision: PageTranscriber | None = None,
) -> tuple[str, dict[str, Any], Iterator[Chunk]]:
    """Extract, scrub and chunk lazily: ``(mime, meta, chunks)``. Raises ExtractionFailed /
    IngestTooLarge, at once or while the chunks are consumed (spreadsheets stream).

    Ingest-stage redaction runs on every unit before chunking, so nothing raw is stored, indexed
    or sent to an embedding provider. ``meta`` is complete once the chunks are exhausted.
    """
    from context_engine.ingest.formats import extract

    extracted = extract(source, name=name, mime=mime, max_rows=max_rows, vision=vision)
    units = extracted.units
    if scrub is not None and not scrub.noop:
        units = (
            replace(
                u,
                text=scrub.text(u.text),
                section=scrub.text(u.section) if u.section else u.section,
                meta=scrub.obj(dict(u.meta)),
            )
            for u in units
        )
        extracted.meta = scrub.obj(dict(extracted.meta))
    return extracted.mime, extracted.meta, chunk_units(units, budget=budget, count_tokens=count_tokens)


@dataclass(frozen=True)
class WorkCaps:
    """The bounds on one document's work (``ingest.max_chunks``, ``ingest.max_extracted_chars``)."""

    max_chunks: int | None = None
    max_chars: int | None = None

    @classmethod
    def of(cls, config: ContextEngineConfig) -> WorkCaps:
        return cls(config.ingest.max_chunks, config.ingest.max_extracted_chars)


class Stopped(Exception):
    """The caller gave up on the first pass (its task was cancelled): the thread ends early."""


def prepare(
    streamed: tuple[str, dict[str, Any], Iterator[Chunk]],
    count_tokens: Callable[[str], int],
    *,
    input_cap: int | None = None,
    hold: int = HOLD_CHUNKS,
    caps: WorkCaps = WorkCaps(),
    stop: threading.Event | None = None,
) -> Prepared:
    """The first pass over :func:`chunk_stream`'s output (CPU work, run in a thread): chunk count,
    content hash, the first chunk over ``input_cap`` tokens, and the chunks themselves when there
    are at most ``hold`` of them. Raises ExtractionFailed / IngestTooLarge (a cap of ``caps``, at the
    chunk that passes it, so the work is bounded however large the file), or ``Stopped`` once
    ``stop`` is set (checked at every chunk).
    """
    found_mime, meta, chunks = streamed
    held: list[Chunk] | None = []
    # the SHA-256 of the chunks joined by blank lines (the stored text), fed piece by piece
    digest = hashlib.sha256()
    count = 0
    chars = 0
    has_text = False
    too_large: tuple[int, int] | None = None
    for chunk in chunks:
        if stop is not None and stop.is_set():
            raise Stopped()
        if caps.max_chunks is not None and count >= caps.max_chunks:
            raise IngestTooLarge("ingest.max_chunks", caps.max_chunks, count + 1, "chunks")
        chars += len(chunk.text)
        if caps.max_chars is not None and chars > caps.max_chars:
            raise IngestTooLarge("ingest.max_extracted_chars", caps.max_chars, chars, "characters")
        if count:
            digest.update(b"\n\n")
        digest.update(chunk.text.encode("utf-8"))
        has_text = has_text or bool(chunk.text.strip())
        if too_large is None and input_cap is not None:
            tokens = count_tokens(chunk.text)
            if tokens > input_cap:
                too_large = (count, tokens)
        if held is not None:
            held.append(chunk)
            if len(held) > hold:
                held = None  # too many to keep: the write extracts them again
        count += 1
    if not has_text:
        raise ExtractionFailed("the document contains no text")
    return Prepared(found_mime, held, dict(meta), digest.hexdigest(), count, too_large)


async def stoppable(work: Callable[[threading.Event], T]) -> T:
    """``work(stop)`` in a worker thread; if the awaiting task is cancelled, ``stop`` is set, so the
    thread ends at its next check instead of running on (a process stopping waits for its threads)."""
    stop = threading.Event()
    running: asyncio.Future[T] = asyncio.ensure_future(asyncio.to_thread(work, stop))
    # once given up on, its outcome (``Stopped`` most likely) is nobody's: read it so none is reported
    running.add_done_callback(lambda done: done.cancelled() or done.exception())
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        stop.set()
        raise


def start_of(source: Source) -> int:
    """Where a file object's content starts, so that a second pass can read it again."""
    return source.tell() if not isinstance(source, bytes | Path) and hasattr(source, "tell") else 0


def reopen(source: Source, start: int) -> Source:
    """The same input, readable again from ``start``, for a second extraction pass."""
    if not isinstance(source, bytes | Path) and hasattr(source, "seek"):
        source.seek(start)
    return source


def chunk_row(position: int, chunk: Chunk) -> repo.ChunkRow:
    """The stored row of a chunk: its text hash is of the normalised text (what vector reuse matches on)."""
    return repo.ChunkRow(
        position=position,
        text=chunk.text,
        text_hash=hashlib.sha256(normalise(chunk.text).encode()).hexdigest(),
        section=chunk.section,
        page=chunk.page,
        kind=chunk.kind,
        meta=chunk.meta,
    )


class _SourceChanged(Exception):
    """The second extraction pass did not give the chunks the first one counted and hashed."""


async def _row_slices(
    prepared: Prepared, stream: Callable[[], tuple[str, dict[str, Any], Iterator[Chunk]]]
) -> AsyncIterator[list[repo.ChunkRow]]:
    """The chunk rows, a slice at a time: from the held chunks, or extracted again by ``stream``
    (in a thread, so the event loop keeps serving) and checked against the first pass."""
    held = prepared.chunks is not None
    try:
        chunks = iter(prepared.chunks) if prepared.chunks is not None else (await asyncio.to_thread(stream))[2]
        digest = hashlib.sha256()
        position = 0
        while True:
            if held:
                piece = list(islice(chunks, repo.INSERT_SLICE))
            else:
                piece = await asyncio.to_thread(lambda: list(islice(chunks, repo.INSERT_SLICE)))
            if not piece:
                break
            rows = []
            for c in piece:
                if position:
                    digest.update(b"\n\n")
                digest.update(c.text.encode("utf-8"))
                rows.append(chunk_row(position, c))
                position += 1
            yield rows
    except (ExtractionFailed, IngestTooLarge) as exc:
        raise _SourceChanged(f"the file could not be read a second time: {exc}") from exc
    if position != prepared.chunk_count or digest.hexdigest() != prepared.content_hash:
        raise _SourceChanged("the file changed while it was being ingested; nothing was stored, ingest it again")


#: the name events and extraction see for a document ingested without one, until its content is known
UNNAMED = "untitled"


def unnamed_name(content_hash: str, acl: list[str]) -> str:
    """The name given to a document ingested without one, derived from its stored content and its
    ACL: the same text under the same ACL is recognised as unchanged, different text is a new
    document (never a new version of another unnamed one). The ACL is part of it so that posting a
    text someone else filed under an ACL the caller does not hold makes the caller's own document,
    instead of a refusal that would tell the caller that text exists."""
    digest = hashlib.sha256("\n".join([content_hash, *sorted(acl)]).encode("utf-8")).hexdigest()
    return f"{UNNAMED}-{digest[:16]}"


class Ingestor:
    """Ingest and resume for one engine (shares its pool, embedder, config and hooks).

    Every database call goes through the pool's :class:`IngestShare`: a short transaction at a time,
    none held while another is opened or while the embedding model works. Who writes and embeds a
    document is settled by a session lock on its identity (see the module docstring), held on the
    pool's one dedicated lock connection, not on a pooled one.
    """

    def __init__(self, services: Services, scrubber: IngestScrubber):
        self.services = services
        #: ingest-stage redaction of the engine (or view) this ingestor serves
        self.scrubber = scrubber

    async def ingest(
        self,
        source: Source,
        *,
        name: str | None,
        source_id: str,
        acl: list[str],
        attributes: dict[str, Any],
        mime: str | None,
        caller: tuple[str, ...] | None,
        batch: bool = False,
    ) -> DocumentReport:
        """Ingest one document; ``name=None`` names it after its content (:func:`unnamed_name`).
        ``batch``: embed through the provider's batch API (:mod:`context_engine.ingest.batch_embedding`)."""
        doc = DocumentInput(source, name, source_id, acl, attributes, mime)
        return await self.ingest_document(doc, caller=caller, batch=batch)

    async def ingest_document(
        self, doc: DocumentInput, *, caller: tuple[str, ...] | None, batch: bool = False
    ) -> DocumentReport:
        """:meth:`ingest` of a document already in its record (a bulk load hands over those it cannot write)."""
        services = self.services
        share = share_for(await services.db(), services.config.storage)
        async with share.run():
            return await self._ingest(share, doc, caller, batch)

    async def _ingest(
        self, share: IngestShare, doc: DocumentInput, caller: tuple[str, ...] | None, batch: bool
    ) -> DocumentReport:
        services = self.services
        embedder = services.embedder
        hooks = services.hooks
        budget = min(services.config.ingest.chunk_tokens, embedder.max_input_tokens)
        label = doc.name or UNNAMED
        report = DocumentReport(document_id=None, name=label, source_id=doc.source_id, status="failed")

        await hooks.emit("on_progress", ProgressEvent("extract", "started", label))
        start = start_of(doc.source)
        scrubber = self.scrubber
        vision = services.page_transcriber()  # None without vision_llm

        def stream() -> tuple[str, dict[str, Any], Iterator[Chunk]]:
            """Extract and chunk from the start of the input: the first pass, and for a large
            document the second one that writes it, read it with the same settings."""
            max_rows = services.config.ingest.max_rows
            return chunk_stream(
                reopen(doc.source, start), label, doc.mime, budget, embedder.count_tokens, max_rows, scrubber, vision
            )

        try:
            prepared = await stoppable(
                lambda stop: prepare(
                    stream(),
                    embedder.count_tokens,
                    input_cap=embedder.max_input_tokens,
                    hold=services.config.ingest.hold_chunks,
                    caps=WorkCaps.of(services.config),
                    stop=stop,
                )
            )
        except (IngestTooLarge, ImportError):
            raise
        except ExtractionFailed as exc:
            if doc.name is None:  # nothing was read to name it by: each failed attempt is its own record
                report.name = f"{UNNAMED}-{uuid.uuid4().hex[:16]}"
            return await self._fail_new(share, report, doc, exc.reason, str(exc), caller)
        name = doc.name or unnamed_name(prepared.content_hash, doc.acl)
        doc = replace(doc, name=name)
        report.name = name
        report.mime, report.pages, report.pages_source = (
            prepared.mime,
            prepared.meta.get("pages"),
            prepared.meta.get("pages_source"),
        )
        await hooks.emit(
            "on_progress",
            ProgressEvent("extract", "done", name, detail={"pages": report.pages, "pages_source": report.pages_source}),
        )
        await hooks.emit("on_progress", ProgressEvent("chunk", "done", name, detail={"chunks": prepared.chunk_count}))

        if prepared.too_large is not None:
            message = (
                f"chunk {prepared.too_large[0]} is larger than the embedding model's per-input cap of "
                f"{embedder.max_input_tokens} tokens"
            )
            return await self._fail_new(share, report, doc, "input_too_large", message, caller)

        if batch:  # a chunk set one job cannot hold is refused before anything is stored
            batch_embedding.batch_client(services, prepared.chunk_count)
        return await self._write_and_embed(share, report, prepared, stream, doc, caller, batch)

    async def _write_and_embed(
        self,
        share: IngestShare,
        report: DocumentReport,
        prepared: Prepared,
        stream: Callable[[], tuple[str, dict[str, Any], Iterator[Chunk]]],
        doc: DocumentInput,
        caller: tuple[str, ...] | None,
        batch: bool = False,
    ) -> DocumentReport:
        """Own the identity (waiting its turn), write the new version in one transaction, then embed
        what is pending while still owning it; the identity is let go when the run ends. ``doc`` is
        named by now."""
        assert doc.name is not None
        holder = str(uuid.uuid4())
        busy = report.model_copy(update={"status": "skipped", "skip_reason": "in_progress"})
        async with share.connect() as conn:
            # refused before waiting its turn (write permission), so a hidden holder's turn is never probed
            await holders.holder(conn, doc.filing(prepared.content_hash), caller, self.services.write_access)
        held = await self._own(share, doc.source_id, doc.name)
        if held is None:
            return busy
        try:
            return await self._write_owned(share, report, prepared, stream, doc, caller, batch, holder)
        finally:
            await session_locks.locks_for(share.pool).release(held)

    async def _own(self, share: IngestShare, source_id: str, name: str) -> session_locks.Held | None:
        """The identity's session lock, waited for up to ``ingest.write_wait_seconds``."""
        locks = session_locks.locks_for(share.pool)
        key = session_locks.document_key(repo.identity_key(source_id, name))
        return await locks.acquire(key, float(self.services.config.ingest.write_wait_seconds))

    async def _write_owned(
        self,
        share: IngestShare,
        report: DocumentReport,
        prepared: Prepared,
        stream: Callable[[], tuple[str, dict[str, Any], Iterator[Chunk]]],
        doc: DocumentInput,
        caller: tuple[str, ...] | None,
        batch: bool,
        holder: str,
    ) -> DocumentReport:
        """The write and the embedding of a run that owns the identity."""
        services = self.services
        assert doc.name is not None
        try:
            async with share.begin() as conn:
                # read under the lock: the run before this one may have written a version meanwhile
                filing = doc.filing(prepared.content_hash)
                existing = await holders.holder(conn, filing, caller, services.write_access, for_update=True)
                if existing is not None and is_unchanged(existing, prepared.content_hash):
                    return skipped_unchanged(report, existing)
                meta = dict(prepared.meta)
                meta["embedding_progress"] = {"done": 0, "total": prepared.chunk_count, "tokens": 0}
                head = repo.VersionHead(
                    existing_id=str(existing["id"]) if existing else None,
                    source_id=doc.source_id,
                    name=doc.name,
                    mime=prepared.mime,
                    acl=doc.acl,
                    attributes=doc.attributes,
                    content_hash=prepared.content_hash,
                    meta=meta,
                    chunk_count=prepared.chunk_count,
                )
                write: dict[str, Any] = {
                    "embedding_key": services.embedder.key,
                    "text_search_config": services.text_search_config,
                }
                cap = services.config.ingest.max_document_text_chars
                lease: dict[str, Any] = {"lease_holder": holder, "lease_seconds": self._lease_seconds()}
                pending: list[tuple[int, int]] | None = None
                if prepared.chunks is not None:  # held: every chunk in one statement, pending rows returned
                    (opened,) = await repo.open_versions(conn, [head], **lease)
                    rows = [row async for piece in _row_slices(prepared, stream) for row in piece]
                    stored = await repo.insert_chunks(conn, [(opened.document_id, r) for r in rows], **write)
                    pending = sorted((c.id, c.position) for c in stored if c.pending)
                    await repo.close_versions(conn, [opened], max_text_chars=cap)
                    reused = prepared.chunk_count - len(pending)
                else:  # a large document: written a slice at a time as it is extracted again
                    slices = _row_slices(prepared, stream)
                    opened, missing = await repo.write_document(
                        conn, head, slices, **write, **lease, max_text_chars=cap
                    )
                    reused = prepared.chunk_count - missing
                truncated = await stored_text.was_truncated(conn, opened.document_id)
        except _SourceChanged as exc:
            return await self._fail_owned(share, report, doc, "chunk_set_changed", str(exc), caller)
        report = report.model_copy(
            update={
                "document_id": opened.document_id,
                "version": opened.version,
                "revision": opened.revision,
                "chunks": prepared.chunk_count,
                "text_truncated": truncated,
            }
        )
        if batch:
            return await self._submit_batch(share, report, holder)
        # what the vision model spent transcribing this document's pages, metered with it
        usage: dict[str, Any] = {
            key: prepared.meta[key] for key in ("vision_model", "vision_tokens") if key in prepared.meta
        }
        if prepared.chunks is None:  # a large document: its texts are read back a page at a time
            return await self._embed_pending(share, report, holder, reused=reused, usage=usage)
        # from here on only the texts are needed: the chunk objects and their metadata are freed
        texts = [c.text for c in prepared.chunks]
        prepared.chunks.clear()
        return await self._embed_pending(
            share, report, holder, reused=reused, texts=texts, pending=pending, usage=usage
        )

    async def _submit_batch(self, share: IngestShare, report: DocumentReport, holder: str) -> DocumentReport:
        """``batch=True``: the stored chunk set goes to the provider as one job (the identity stays
        owned while it uploads); a submission that fails leaves the document resumable in ``embedding``."""
        doc_id = report.document_id
        assert doc_id is not None
        progress = {"done": 0, "total": report.chunks, "tokens": 0}
        try:
            return await batch_embedding.submit(self.services, share, report, holder)
        except Exception as exc:
            return await self._fail_embedding(share, report, holder, exc, progress, "batch submission")
        except BaseException:
            await asyncio.shield(self._let_go(share, doc_id, holder))
            raise

    def _lease_seconds(self) -> float:
        """What ``lease_until`` on the row says (for operators; ownership is the session lock)."""
        return float(self.services.config.ingest.resume_stale_seconds)

    async def _let_go(self, share: IngestShare, document_id: str, holder: str) -> None:
        """A cancelled run (a stopped process, a cancelled resume) clears its fencing token, so the
        row says no run has it; the document stays resumable. Best effort: the lock is what counts."""
        try:
            async with share.begin() as conn:
                await repo.let_go(conn, document_id, holder)
        except Exception as exc:
            log.warning("could not clear the run of document %s: %s", document_id, type(exc).__name__)

    async def _embed_pending(
        self,
        share: IngestShare,
        report: DocumentReport,
        holder: str,
        *,
        reused: int = 0,
        texts: list[str] | None = None,
        pending: list[tuple[int, int]] | None = None,
        usage: dict[str, Any] | None = None,
    ) -> DocumentReport:
        """Embed the current version's rows that still lack a vector; store each batch as it lands.

        The run holds the document's lease (``holder``). ``texts`` (by position) are the chunk texts
        when the caller holds them, as a first pass does; a resume reads them from the database.
        ``pending`` (``(chunk id, position)`` of the rows to embed) is known when the run just wrote
        them, and is then not read back. The batch that stores the last vector also completes the
        document, in the same transaction. ``usage`` joins the completed document's usage event (the
        vision model's tokens of a first pass).
        """
        services = self.services
        embedder, hooks = services.embedder, services.hooks
        doc_id = report.document_id
        assert doc_id is not None
        # the document's own counts: every current chunk, those already embedded (reused, or stored by
        # an earlier run that stopped) counted done, and the tokens earlier runs spent
        if pending is None:
            async with share.connect() as conn:
                missing = await repo.count_pending(conn, doc_id)
                earlier = await repo.embedding_progress(conn, doc_id)
            total = max(report.chunks, missing)
            progress = {"done": total - missing, "total": total, "tokens": int(earlier.get("tokens") or 0)}
        else:
            total = max(report.chunks, len(pending))
            progress = {"done": total - len(pending), "total": total, "tokens": 0}
        await hooks.emit("on_progress", ProgressEvent("embed", "started", report.name, doc_id, dict(progress)))
        store = embed_store.LeasedStore(
            share,
            embedding_key=embedder.key,
            holder=holder,
            lease_seconds=self._lease_seconds(),
            progress={doc_id: progress},
            document_of=lambda _chunk_id: doc_id,
        )

        async def stored(batch: list[batching.Item], vectors: list[list[float]]) -> None:
            await store.store(batch, vectors)
            done = dict(store.progress[doc_id])
            await hooks.emit("on_progress", ProgressEvent("embed", "progress", report.name, doc_id, done))

        embedding = embed_store.Embedding(services, owner=doc_id)
        after = -1
        try:
            if pending is not None:  # the rows just written: their ids and texts are at hand
                rows: list[tuple[int, int, str | None]] = [(cid, position, None) for cid, position in pending]
                items = await asyncio.to_thread(embed_store.items_of, rows, texts, embedder.count_tokens)
                await embedding.run(items, stored)
            while pending is None:  # a page of pending rows at a time, so a large document's texts are never all held
                async with share.connect() as conn:
                    page = await repo.pending_page(
                        conn, doc_id, after=after, limit=services.config.ingest.hold_chunks, with_text=texts is None
                    )
                if not page:
                    break
                after = page[-1][1]
                # counting a page's tokens is CPU work (a tokenizer pass per chunk): off the event loop
                items = await asyncio.to_thread(embed_store.items_of, page, texts, embedder.count_tokens)
                del page
                await embedding.run(items, stored)
            await store.finish_open()  # nothing was pending, or a resume that found no rows left
        except embed_store.LeaseLost:
            log.warning("document %s was taken over by another run; this run stopped", doc_id)
            return report.model_copy(update={"status": "skipped", "skip_reason": "in_progress"})
        except Exception as exc:
            return await self._fail_embedding(share, report, holder, exc, store.progress[doc_id], "embedding")
        except BaseException:  # cancelled (a stopped process, a cancelled resume): nothing is left owned
            await asyncio.shield(store.let_go())
            raise
        progress = store.progress[doc_id]
        stats = embedding.stats
        await hooks.emit("on_progress", ProgressEvent("embed", "done", report.name, doc_id, dict(progress)))
        await hooks.emit(
            "on_usage",
            ingest_usage(
                report,
                embedded=stats.embedded,
                reused=reused,
                tokens=stats.tokens,
                requests=stats.requests,
                halvings=stats.halvings,
                **(usage or {}),
            ),
        )
        log.info(
            "embed: document=%s chunks=%d reused=%d embedded=%d requests=%d tokens=%d halvings=%d",
            doc_id,
            report.chunks,
            reused,
            stats.embedded,
            stats.requests,
            stats.tokens,
            stats.halvings,
        )
        return report.model_copy(
            update={"status": "completed", "failure_reason": None, "failure_message": None, "error": None}
        )

    async def _fail_embedding(
        self,
        share: IngestShare,
        report: DocumentReport,
        holder: str,
        exc: Exception,
        progress: dict[str, int],
        step: str,
    ) -> DocumentReport:
        """The document stays in ``embedding`` (resumable), saying why ``step`` failed; an error of
        ours names its code, anything else is ``unknown`` and logged with its traceback."""
        doc_id = report.document_id
        assert doc_id is not None
        reason = embed_store.failure_reason(exc)
        if not isinstance(exc, ContextEngineError):
            log.error("%s failed for document %s", step, doc_id, exc_info=exc)
        error = self.scrubber.text(str(exc))
        async with share.begin() as conn:
            await repo.mark_embedding_failed(
                conn, doc_id, holder=holder, failure_reason=reason, error=error, progress=progress
            )
        await self.services.hooks.emit("on_error", ErrorEvent("embed", report.name, doc_id, reason, error))
        return embed_store.embedding_failed(report, reason, error)

    async def resume(self, document_id: str | None) -> list[DocumentReport]:
        """Finish documents left in ``embedding``; one whose run is alive (its identity is owned) is
        left alone. A run that died owns nothing: its document is taken at once."""
        services = self.services
        share = share_for(await services.db(), services.config.storage)
        locks = session_locks.locks_for(share.pool)
        async with share.connect() as conn:
            docs = await repo.resumable_documents(conn, document_id)
        reports: list[DocumentReport] = []
        for doc in docs:
            doc_id = str(doc["id"])
            busy = DocumentReport(
                document_id=doc_id,
                name=doc["name"],
                source_id=doc["source_id"],
                status="skipped",
                skip_reason="in_progress",
            )
            held = await locks.try_acquire(session_locks.document_key(repo.identity_key(doc["source_id"], doc["name"])))
            if held is None:  # another run is writing or embedding it
                reports.append(busy)
                continue
            try:
                report = await self._resume_owned(share, doc)
            finally:
                await locks.release(held)
            if report is not None:
                reports.append(report)
        return reports

    async def _resume_owned(self, share: IngestShare, doc: dict[str, Any]) -> DocumentReport | None:
        """Embed what one owned document still misses; ``None`` when it finished meanwhile."""
        doc_id = str(doc["id"])
        holder = str(uuid.uuid4())
        async with share.run():
            async with share.begin() as conn:
                version = await repo.claim_document(conn, doc_id, holder, self._lease_seconds())
            if version is None:
                return None
            base = DocumentReport(
                document_id=doc_id,
                name=doc["name"],
                source_id=doc["source_id"],
                status="embedding",
                version=version,
            )
            async with share.connect() as conn:
                base.chunks = await repo.current_chunk_count(conn, doc_id)
            return await self._embed_pending(share, base, holder)

    async def _fail_new(
        self,
        share: IngestShare,
        base: DocumentReport,
        doc: DocumentInput,
        reason: str,
        error: str,
        caller: tuple[str, ...] | None,
    ) -> DocumentReport:
        """Record a document that could not be processed under ``base``'s name (and mime, once it
        is known); nothing else is written. It waits its turn on the identity like any writer
        (``skipped`` / ``in_progress`` when the wait runs out)."""
        filing, access = (base.source_id, base.name, doc.acl, None), self.services.write_access
        async with share.connect() as conn:
            await holders.holder(conn, filing, caller, access)
        held = await self._own(share, base.source_id, base.name)
        if held is None:
            return base.model_copy(update={"status": "skipped", "skip_reason": "in_progress"})
        try:
            return await self._fail_owned(share, base, doc, reason, error, caller)
        finally:
            await session_locks.locks_for(share.pool).release(held)

    async def _fail_owned(
        self,
        share: IngestShare,
        base: DocumentReport,
        doc: DocumentInput,
        reason: str,
        error: str,
        caller: tuple[str, ...] | None,
    ) -> DocumentReport:
        """:meth:`_fail_new` for a run that owns the identity."""
        mime = base.mime or doc.mime or "application/octet-stream"
        error = self.scrubber.text(error)
        filing, access = (base.source_id, base.name, doc.acl, None), self.services.write_access
        async with share.begin() as conn:
            found = await holders.holder(conn, filing, caller, access, for_update=True)
            doc_id, revision = await repo.write_failed(
                conn,
                existing_id=str(found["id"]) if found is not None else None,
                source_id=base.source_id,
                name=base.name,
                mime=mime,
                acl=doc.acl,
                attributes=doc.attributes,
                failure_reason=reason,
                error=error,
            )
        await self.services.hooks.emit("on_error", ErrorEvent("extract", base.name, doc_id, reason, error))
        return base.model_copy(
            update={
                "document_id": doc_id,
                "status": "failed",
                "revision": revision,
                "failure_reason": reason,
                "failure_message": FAILURE_MESSAGES[reason],
                "error": error,
                "mime": mime,
            }
        )


def ingest_usage(report: DocumentReport, *, embedded: int, reused: int, tokens: int, **extra: Any) -> UsageEvent:
    """The ``on_usage`` event of one stored document: one shape for the single path and ``ingest_many``."""
    detail = {
        "mode": "hybrid",
        "mode_reason": None,
        "pages": report.pages,
        "pages_source": report.pages_source,
        "chunks": report.chunks,
        "embedded": embedded,
        "reused": reused,
        "tokens": tokens,
    }
    return UsageEvent("ingest", units=report.chunks, document_id=report.document_id, detail=detail | extra)


def is_unchanged(existing: dict[str, Any], content_hash: str) -> bool:
    return holders.unchanged(existing, content_hash)


def skipped_unchanged(report: DocumentReport, existing: dict[str, Any]) -> DocumentReport:
    return report.model_copy(
        update={
            "document_id": str(existing["id"]),
            "status": "skipped",
            "skip_reason": "unchanged",
            "version": existing["version"],
        }
    )
