"""One document through intake, extraction, chunking, storage and embedding.

Chunks are stored before they are embedded: the new version is written (and visible to the
text legs) first, then the missing vectors are filled batch by batch, each batch stored as it
lands. A provider failure leaves the document in status ``embedding`` with its progress, and
``resume`` embeds only the rows still missing a vector. A session-level advisory lock on the
document's identity settles two callers racing the same document: the loser writes nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.errors import ContextEngineError, Forbidden, IngestTooLarge, InputTooLarge, ProviderError
from context_engine.hooks import ErrorEvent, ProgressEvent, UsageEvent
from context_engine.ingest import batching
from context_engine.ingest.chunker import Chunk, chunk_units, normalise
from context_engine.ingest.extracted import ExtractionFailed
from context_engine.models import FAILURE_MESSAGES, DocumentReport
from context_engine.redaction.apply import IngestScrubber
from context_engine.storage import repository as repo
from context_engine.storage.predicates import ReadScope

if TYPE_CHECKING:
    from context_engine.engine import ContextEngine

log = logging.getLogger("context_engine.ingest")

Source = bytes | Path | IO[bytes]


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


def open_source(text: str | None, file: Any, name: str | None, cap: int | None) -> tuple[Source, str]:
    """Resolve the input and apply ``ingest.max_file_bytes`` before reading any content."""
    if text is not None:
        if not isinstance(text, str):
            from context_engine.errors import InvalidRequest

            raise InvalidRequest("text must be a string")
        data = text.encode("utf-8")
        _cap(cap, len(data))
        return data, name or "untitled"
    if isinstance(file, bytes | bytearray):
        _cap(cap, len(file))
        return bytes(file), name or "untitled"
    if isinstance(file, str | os.PathLike):
        path = Path(file)
        _cap(cap, path.stat().st_size)  # answered by stat, before a byte is read
        return path, name or path.name
    if hasattr(file, "read"):
        default = Path(str(getattr(file, "name", "") or "untitled")).name
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
) -> tuple[str, dict[str, Any], Iterator[Chunk]]:
    """Extract, scrub and chunk lazily: ``(mime, meta, chunks)``. Raises ExtractionFailed /
    IngestTooLarge, at once or while the chunks are consumed (spreadsheets stream).

    Ingest-stage redaction runs on every unit before chunking, so nothing raw is stored, indexed
    or sent to an embedding provider. ``meta`` is complete once the chunks are exhausted.
    """
    from context_engine.ingest.extractors import extract

    extracted = extract(source, name=name, mime=mime, max_rows=max_rows)
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


def prepare(
    streamed: tuple[str, dict[str, Any], Iterator[Chunk]],
    count_tokens: Callable[[str], int],
    *,
    input_cap: int | None = None,
    hold: int = HOLD_CHUNKS,
) -> Prepared:
    """The first pass over :func:`chunk_stream`'s output (CPU work, run in a thread): chunk count,
    content hash, the first chunk over ``input_cap`` tokens, and the chunks themselves when there
    are at most ``hold`` of them. Raises ExtractionFailed / IngestTooLarge.
    """
    found_mime, meta, chunks = streamed
    held: list[Chunk] | None = []
    # the SHA-256 of the chunks joined by blank lines (the stored text), fed piece by piece
    digest = hashlib.sha256()
    count = 0
    has_text = False
    too_large: tuple[int, int] | None = None
    for chunk in chunks:
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


def start_of(source: Source) -> int:
    """Where a file object's content starts, so that a second pass can read it again."""
    return source.tell() if not isinstance(source, bytes | Path) and hasattr(source, "tell") else 0


def reopen(source: Source, start: int) -> Source:
    """The same input, readable again from ``start``, for a second extraction pass."""
    if not isinstance(source, bytes | Path) and hasattr(source, "seek"):
        source.seek(start)
    return source


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
                rows.append(
                    repo.ChunkRow(
                        position=position,
                        text=c.text,
                        text_hash=hashlib.sha256(normalise(c.text).encode()).hexdigest(),
                        section=c.section,
                        page=c.page,
                        kind=c.kind,
                        meta=c.meta,
                        embedding=None,
                    )
                )
                position += 1
            yield rows
    except (ExtractionFailed, IngestTooLarge) as exc:
        raise _SourceChanged(f"the file could not be read a second time: {exc}") from exc
    if position != prepared.chunk_count or digest.hexdigest() != prepared.content_hash:
        raise _SourceChanged("the file changed while it was being ingested; nothing was stored, ingest it again")


class Ingestor:
    """Ingest and resume for one engine (shares its pool, embedder, config and hooks)."""

    def __init__(self, engine: ContextEngine):
        self.engine = engine

    async def ingest(
        self,
        source: Source,
        *,
        name: str,
        source_id: str,
        acl: list[str],
        attributes: dict[str, Any],
        mime: str | None,
        caller: tuple[str, ...] | None,
    ) -> DocumentReport:
        engine = self.engine
        sql = await engine._ready()
        embedder = engine.embedder
        hooks = engine.hooks
        budget = min(engine.config.ingest.chunk_tokens, embedder.max_input_tokens)
        report = DocumentReport(document_id=None, name=name, source_id=source_id, status="failed")

        await hooks.emit("on_progress", ProgressEvent("extract", "started", name))
        start = start_of(source)
        scrubber = engine._scrubber()

        def stream() -> tuple[str, dict[str, Any], Iterator[Chunk]]:
            """Extract and chunk from the start of the input: the first pass, and for a large
            document the second one that writes it, read it with the same settings."""
            max_rows = engine.config.ingest.max_rows
            return chunk_stream(reopen(source, start), name, mime, budget, embedder.count_tokens, max_rows, scrubber)

        try:
            prepared = await asyncio.to_thread(
                lambda: prepare(
                    stream(),
                    embedder.count_tokens,
                    input_cap=embedder.max_input_tokens,
                    hold=engine.config.ingest.hold_chunks,
                )
            )
        except (IngestTooLarge, ImportError):
            raise
        except ExtractionFailed as exc:
            return await self._fail_new(sql, report, mime, acl, attributes, exc.reason, str(exc), caller)
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
            return await self._fail_new(sql, report, prepared.mime, acl, attributes, "input_too_large", message, caller)

        lock_conn = await sql.connect()
        try:
            async with sql.connect() as conn:
                existing = await repo.find_by_identity(conn, source_id, name)
            if existing is not None and not await self._visible(sql, str(existing["id"]), caller):
                raise Forbidden("you may not replace a document under this name in this source")
            if (
                existing is not None
                and existing["content_hash"] == prepared.content_hash
                and existing["status"] == ("completed")
            ):
                return report.model_copy(
                    update={
                        "document_id": str(existing["id"]),
                        "status": "skipped",
                        "skip_reason": "unchanged",
                        "version": existing["version"],
                    }
                )
            if not await repo.try_session_lock(lock_conn, source_id, name):
                return report.model_copy(update={"status": "skipped", "skip_reason": "in_progress"})
            try:
                return await self._write_and_embed(sql, report, prepared, stream, source_id, name, acl, attributes)
            finally:
                await repo.release_session_lock(lock_conn, source_id, name)
        finally:
            await lock_conn.close()

    async def _write_and_embed(
        self,
        sql: AsyncEngine,
        report: DocumentReport,
        prepared: Prepared,
        stream: Callable[[], tuple[str, dict[str, Any], Iterator[Chunk]]],
        source_id: str,
        name: str,
        acl: list[str],
        attributes: dict[str, Any],
    ) -> DocumentReport:
        engine = self.engine
        key = engine.embedder.key
        try:
            async with sql.begin() as conn:
                # re-read under the lock: another run may have finished while we extracted
                existing = await repo.find_by_identity(conn, source_id, name)
                if (
                    existing is not None
                    and existing["content_hash"] == prepared.content_hash
                    and existing["status"] == ("completed")
                ):
                    return report.model_copy(
                        update={"document_id": str(existing["id"]), "status": "skipped", "skip_reason": "unchanged"}
                    )
                meta = dict(prepared.meta)
                meta["embedding_progress"] = {"done": 0, "total": prepared.chunk_count, "tokens": 0}
                doc_id, version, revision = await repo.write_document(
                    conn,
                    existing_id=str(existing["id"]) if existing else None,
                    source_id=source_id,
                    name=name,
                    mime=prepared.mime,
                    acl=acl,
                    attributes=attributes,
                    content_hash=prepared.content_hash,
                    meta=meta,
                    chunks=_row_slices(prepared, stream),
                    chunk_count=prepared.chunk_count,
                    embedding_key=key,
                    text_search_config=engine._text_search_config,
                    status="embedding",
                )
                # unchanged chunks got their stored vectors copied by the INSERT; the rest are pending
                reused = await repo.count_embedded(conn, doc_id, version)
                meta["embedding_progress"]["total"] = prepared.chunk_count - reused
                await repo.set_embedding_progress(conn, doc_id, meta["embedding_progress"])
        except _SourceChanged as exc:
            return await self._fail_new(
                sql, report, prepared.mime, acl, attributes, "chunk_set_changed", str(exc), None
            )
        report = report.model_copy(
            update={"document_id": doc_id, "version": version, "revision": revision, "chunks": prepared.chunk_count}
        )
        if prepared.chunks is None:  # a large document: its texts are read back a page at a time
            return await self._embed_pending(sql, report, reused=reused)
        # from here on only the texts are needed: the chunk objects and their metadata are freed
        texts = [c.text for c in prepared.chunks]
        prepared.chunks.clear()
        return await self._embed_pending(sql, report, reused=reused, texts=texts)

    async def _embed_pending(
        self, sql: AsyncEngine, report: DocumentReport, *, reused: int = 0, texts: list[str] | None = None
    ) -> DocumentReport:
        """Embed the current version's rows that still lack a vector; store each batch as it lands.

        ``texts`` (by position) are the chunk texts when the caller holds them, as a first pass does;
        a resume reads them from the database.
        """
        engine = self.engine
        embedder, hooks = engine.embedder, engine.hooks
        doc_id = report.document_id
        assert doc_id is not None
        async with sql.connect() as conn:
            progress = {"done": 0, "total": await repo.count_pending(conn, doc_id), "tokens": 0}
        await hooks.emit("on_progress", ProgressEvent("embed", "started", report.name, doc_id, dict(progress)))

        async def store(batch: list[batching.Item], vectors: list[list[float]]) -> None:
            async with sql.begin() as conn:
                await repo.store_vectors(conn, [i.key for i in batch], vectors, embedder.key)
                progress["done"] += len(batch)
                progress["tokens"] += sum(i.tokens for i in batch)
                await repo.set_embedding_progress(conn, doc_id, progress)
            await hooks.emit("on_progress", ProgressEvent("embed", "progress", report.name, doc_id, dict(progress)))

        max_items, max_tokens = batching.batch_limits(engine.config.embedding, embedder.provider)
        stats = batching.RunStats(item_cap=max_items)
        after = -1
        try:
            while True:  # a page of pending rows at a time, so a large document's texts are never all held
                async with sql.connect() as conn:
                    page = await repo.pending_page(
                        conn, doc_id, after=after, limit=engine.config.ingest.hold_chunks, with_text=texts is None
                    )
                if not page:
                    break
                after = page[-1][1]
                items = []
                for cid, position, stored in page:
                    chunk_text = texts[position] if texts is not None else stored
                    assert chunk_text is not None
                    items.append(batching.Item(cid, chunk_text, embedder.count_tokens(chunk_text)))
                del page
                # the cap starts where the last page left it (a halving holds for the whole document)
                await batching.run(
                    embedder,
                    items,
                    max_items=stats.item_cap,
                    max_tokens=max_tokens,
                    concurrency=engine.config.embedding.max_concurrency,
                    on_batch=store,
                    stats=stats,
                )
        except (ProviderError, InputTooLarge, ContextEngineError) as exc:
            reason = exc.code if exc.code in FAILURE_MESSAGES else "unknown"
            return await self._fail_embedding(sql, report, reason, str(exc), progress)
        except Exception as exc:
            log.exception("embedding failed for document %s", doc_id)
            return await self._fail_embedding(sql, report, "unknown", str(exc), progress)
        async with sql.begin() as conn:
            await repo.finish_embedding(conn, doc_id, progress)
        await hooks.emit("on_progress", ProgressEvent("embed", "done", report.name, doc_id, dict(progress)))
        await hooks.emit(
            "on_usage",
            UsageEvent(
                "ingest",
                units=report.chunks,
                document_id=doc_id,
                detail={
                    "mode": "hybrid",
                    "mode_reason": None,
                    "pages": report.pages,
                    "pages_source": report.pages_source,
                    "chunks": report.chunks,
                    "embedded": stats.embedded,
                    "reused": reused,
                    "requests": stats.requests,
                    "tokens": stats.tokens,
                    "halvings": stats.halvings,
                },
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
        self, sql: AsyncEngine, report: DocumentReport, reason: str, error: str, progress: dict[str, int]
    ) -> DocumentReport:
        doc_id = report.document_id
        assert doc_id is not None
        error = self.engine._scrubber().text(error)
        async with sql.begin() as conn:
            await repo.mark_embedding_failed(conn, doc_id, status="embedding", failure_reason=reason, error=error)
            await repo.set_embedding_progress(conn, doc_id, progress)
        await self.engine.hooks.emit("on_error", ErrorEvent("embed", report.name, doc_id, reason, error))
        return report.model_copy(
            update={
                "status": "embedding",
                "failure_reason": reason,
                "failure_message": FAILURE_MESSAGES[reason],
                "error": error,
            }
        )

    async def resume(self, document_id: str | None) -> list[DocumentReport]:
        """Finish documents left in ``embedding``; a run still holding its lock is left alone."""
        sql = await self.engine._ready()
        async with sql.connect() as conn:
            docs = await repo.resumable_documents(conn, document_id)
        reports: list[DocumentReport] = []
        for doc in docs:
            lock_conn = await sql.connect()
            try:
                if not await repo.try_session_lock(lock_conn, doc["source_id"], doc["name"]):
                    reports.append(
                        DocumentReport(
                            document_id=str(doc["id"]),
                            name=doc["name"],
                            source_id=doc["source_id"],
                            status="skipped",
                            skip_reason="in_progress",
                        )
                    )
                    continue
                try:
                    async with sql.connect() as conn:
                        still = await repo.resumable_documents(conn, str(doc["id"]))
                    if not still:
                        continue
                    base = DocumentReport(
                        document_id=str(doc["id"]),
                        name=doc["name"],
                        source_id=doc["source_id"],
                        status="embedding",
                        version=doc["version"],
                    )
                    async with sql.connect() as conn:
                        base.chunks = await repo.current_chunk_count(conn, str(doc["id"]))
                    reports.append(await self._embed_pending(sql, base))
                finally:
                    await repo.release_session_lock(lock_conn, doc["source_id"], doc["name"])
            finally:
                await lock_conn.close()
        return reports

    async def _fail_new(
        self,
        sql: AsyncEngine,
        base: DocumentReport,
        mime: str | None,
        acl: list[str],
        attributes: dict[str, Any],
        reason: str,
        error: str,
        caller: tuple[str, ...] | None,
    ) -> DocumentReport:
        """Record a document that could not be processed; nothing else is written."""
        mime = mime or "application/octet-stream"
        error = self.engine._scrubber().text(error)
        async with sql.begin() as conn:
            found = await repo.find_by_identity(conn, base.source_id, base.name)
            existing_id = None
            if found is not None:
                if not await self._visible(sql, str(found["id"]), caller):
                    raise Forbidden("you may not replace a document under this name in this source")
                existing_id = str(found["id"])
            doc_id, revision = await repo.write_failed(
                conn,
                existing_id=existing_id,
                source_id=base.source_id,
                name=base.name,
                mime=mime,
                acl=acl,
                attributes=attributes,
                failure_reason=reason,
                error=error,
            )
        await self.engine.hooks.emit("on_error", ErrorEvent("extract", base.name, doc_id, reason, error))
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

    async def _visible(self, sql: AsyncEngine, document_id: str, caller: tuple[str, ...] | None) -> bool:
        return await repo.get_document(sql, document_id, ReadScope(caller), with_text=False) is not None
