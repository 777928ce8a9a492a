"""Many documents in one call, written with a fixed number of set-based statements.

A batch is split into *waves*: the first occurrence of each ``(source_id, name)`` in the first wave,
a repeat in the next, so a batch that names one document twice ends exactly as the same calls one
after the other would (the second is a new version of the first, or ``unchanged``). A wave's
documents are settled and written in one transaction (identity locks, versions, chunks, statistics:
the statements of a single document's write, each over every document at once), then every pending
chunk of the wave is embedded together, in as few provider calls as the batch table allows, and the
batch that stores a document's last vector completes it.

A document that is not an ordinary small one (too many chunks to hold, a chunk over the model's
input cap, unreadable, or carrying an idempotency key) takes the single-document path within its
wave, so every rule of that path holds for it unchanged. If the wave's transaction fails, nothing of
it was written, and each of its documents is ingested on the single path instead, so one bad
document fails alone.

A batch costs what its distinct content costs: entries identical in every field are done once, the
repeats answered as a second identical call would be (``skipped`` / ``unchanged``, or the same
failure), and the chunks and characters of the whole batch are bounded by the caps of one document
(``ingest.max_chunks``, ``ingest.max_extracted_chars``): entries past them are refused ``too_large``.
A wave owns its documents as a single run does (session locks, taken in key order so that two
batches never wait on each other in a circle).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from context_engine.errors import ContextEngineError, IngestTooLarge
from context_engine.hooks import ErrorEvent, ProgressEvent
from context_engine.ingest import batching, embed_store, holders
from context_engine.ingest.document import DocumentInput
from context_engine.ingest.extracted import ExtractionFailed
from context_engine.ingest.pipeline import (
    UNNAMED,
    Ingestor,
    Prepared,
    WorkCaps,
    chunk_row,
    chunk_stream,
    ingest_usage,
    is_unchanged,
    prepare,
    reopen,
    skipped_unchanged,
    start_of,
    unnamed_name,
)
from context_engine.ingest.pool_share import IngestShare, share_for
from context_engine.models import DocumentReport
from context_engine.storage import repository as repo
from context_engine.storage import session_locks

log = logging.getLogger("context_engine.ingest")


@dataclass
class Entry:
    """One checked document of a batch, as the engine hands it over."""

    index: int
    doc: DocumentInput
    #: ``True`` when it must take the single-document path (it carries an idempotency key)
    single: bool = False
    #: it carries an idempotency key: a request of its own, never merged with an identical entry
    keyed: bool = False
    prepared: Prepared | None = None
    start: int = 0

    @property
    def filing(self) -> holders.Filing:
        """``(source_id, name, acl, content hash)``: what admission looks the entry's document up by."""
        return self.doc.filing(self.prepared.content_hash if self.prepared else None)

    @property
    def identity(self) -> tuple[str, str]:
        assert self.doc.name is not None
        return self.doc.source_id, self.doc.name


#: what a single-path ingest of one entry is (the engine's own ``ingest`` for it, key and all)
SingleRun = Callable[[Entry], Awaitable[DocumentReport]]


@dataclass
class _Written:
    entry: Entry
    report: DocumentReport
    pending: list[tuple[int, int]] = field(default_factory=list)
    progress: dict[str, int] = field(default_factory=dict)


class _WaveFailed(Exception):
    """The wave's write transaction failed: nothing of it is stored."""


class BatchIngestor:
    """Ingest many documents for one engine (or view), sharing its ingestor's services and scrubber."""

    def __init__(self, ingestor: Ingestor):
        self.ingestor = ingestor
        self.services = ingestor.services

    async def ingest(
        self, entries: list[Entry], caller: tuple[str, ...] | None, single: SingleRun
    ) -> dict[int, DocumentReport | ContextEngineError]:
        """Every entry's report (or the error that refused it), by its index."""
        await asyncio.to_thread(self._prepare_all, entries)
        results: dict[int, DocumentReport | ContextEngineError] = {}
        distinct, repeats = _distinct(entries)
        distinct = self._within_caps(distinct, results)
        for wave in _waves(distinct):
            batch = [e for e in wave if not e.single]
            alone = [e for e in wave if e.single]
            written = asyncio.ensure_future(self._write_wave(batch, caller, single))
            runs = [asyncio.ensure_future(self._guarded(e, single)) for e in alone]
            await asyncio.gather(written, *runs)
            results.update(written.result())
            for entry, run in zip(alone, runs, strict=True):
                results[entry.index] = run.result()
        for index, first in repeats.items():
            results[index] = _repeat_of(results[first])
        return results

    def _within_caps(
        self, entries: list[Entry], results: dict[int, DocumentReport | ContextEngineError]
    ) -> list[Entry]:
        """The entries the batch's work caps admit, in input order; the rest are refused ``too_large``."""
        caps = WorkCaps.of(self.services.config)
        chunks = chars = 0
        admitted = []
        for entry in entries:
            if entry.prepared is not None and entry.prepared.chunks is not None:
                chunks += entry.prepared.chunk_count
                chars += sum(len(c.text) for c in entry.prepared.chunks)
            if caps.max_chunks is not None and chunks > caps.max_chunks:
                results[entry.index] = IngestTooLarge("ingest.max_chunks", caps.max_chunks, chunks, "chunks")
            elif caps.max_chars is not None and chars > caps.max_chars:
                results[entry.index] = IngestTooLarge("ingest.max_extracted_chars", caps.max_chars, chars, "characters")
            else:
                admitted.append(entry)
        return admitted

    def _prepare_all(self, entries: list[Entry]) -> None:
        """Extract and chunk every entry (in a worker thread); anything but a small readable document
        is marked for the single path, which reads it again and reports it exactly as it always does."""
        services = self.services
        embedder = services.embedder
        budget = min(services.config.ingest.chunk_tokens, embedder.max_input_tokens)
        vision = services.config.vision_llm is not None
        for entry in entries:
            doc = entry.doc
            if vision and doc.mime is None:
                entry.single = True  # a file may hold scanned pages: the single path transcribes them
            if entry.single:
                continue
            entry.start = start_of(doc.source)
            try:
                streamed = chunk_stream(
                    doc.source,
                    doc.name or UNNAMED,
                    doc.mime,
                    budget,
                    embedder.count_tokens,
                    services.config.ingest.max_rows,
                    self.ingestor.scrubber,
                )
                prepared = prepare(
                    streamed,
                    embedder.count_tokens,
                    input_cap=embedder.max_input_tokens,
                    hold=services.config.ingest.hold_chunks,
                    caps=WorkCaps.of(services.config),
                )
            except (ExtractionFailed, IngestTooLarge, ImportError):
                prepared = None
            reopen(doc.source, entry.start)
            if prepared is None or prepared.chunks is None or prepared.too_large is not None:
                entry.single = True
                continue
            entry.prepared = prepared
            if doc.name is None:
                entry.doc = replace(doc, name=unnamed_name(prepared.content_hash, doc.acl))

    async def _guarded(self, entry: Entry, single: SingleRun) -> DocumentReport | ContextEngineError:
        try:
            return await single(entry)
        except ContextEngineError as exc:
            return exc
        except Exception:  # a fault of this document alone must not lose the others' reports
            log.exception("ingest of document %d of a batch failed", entry.index)
            return ContextEngineError("the document could not be stored")

    async def _write_wave(
        self, entries: list[Entry], caller: tuple[str, ...] | None, single: SingleRun
    ) -> dict[int, DocumentReport | ContextEngineError]:
        if not entries:
            return {}
        share = share_for(await self.services.db(), self.services.config.storage)
        holder = str(uuid.uuid4())
        failed = False
        locks = session_locks.locks_for(share.pool)
        refused = await self._refused(share, entries, caller)
        held = await self._own_all(locks, [e for e in entries if e.index not in refused])
        try:
            async with share.run():
                owned = [e for e in entries if e.index in held]
                try:
                    results, written = await self._write(share, owned, caller, holder)
                except _WaveFailed:
                    failed = True
                else:
                    for entry in entries:
                        if entry.index in refused:
                            results[entry.index] = refused[entry.index]  # before waiting its turn
                        elif entry.index not in held:
                            results[entry.index] = _busy(self._base_report(entry))
                    if written:
                        for w in await self._embed(share, written, holder):
                            results[w.entry.index] = w.report
        finally:
            for lock in held.values():
                await locks.release(lock)
        if failed:  # outside the run slot: each single ingest takes its own
            log.warning("a batch write failed; its %d documents are ingested one at a time", len(entries))
            fallback = await asyncio.gather(*(self._guarded(e, single) for e in entries))
            return {e.index: r for e, r in zip(entries, fallback, strict=True)}
        return results

    async def _refused(
        self, share: IngestShare, entries: list[Entry], caller: tuple[str, ...] | None
    ) -> dict[int, ContextEngineError]:
        """Entries refused before they wait their turn (not the caller's to change, or ambiguous):
        a refused write never waits on another run, so its wait cannot tell anything."""
        async with share.connect() as conn:
            found = await holders.holders(conn, [e.filing for e in entries], caller, self.services.write_access)
        return {e.index: f for e, f in zip(entries, found, strict=True) if isinstance(f, ContextEngineError)}

    async def _own_all(self, locks: session_locks.SessionLocks, entries: list[Entry]) -> dict[int, session_locks.Held]:
        """The session locks of the wave's identities (by entry index), taken in key order within
        one ``ingest.write_wait_seconds``; an identity not owned by then is answered busy."""
        deadline = asyncio.get_running_loop().time() + float(self.services.config.ingest.write_wait_seconds)
        keyed = sorted(
            ((session_locks.document_key(repo.identity_key(*e.identity)), e.index) for e in entries),
        )
        held: dict[int, session_locks.Held] = {}
        try:
            for key, index in keyed:
                wait = max(0.0, deadline - asyncio.get_running_loop().time())
                got = await locks.acquire(key, wait)
                if got is not None:
                    held[index] = got
        except BaseException:
            for lock in held.values():
                await locks.release(lock)
            raise
        return held

    async def _write(
        self, share: IngestShare, entries: list[Entry], caller: tuple[str, ...] | None, holder: str
    ) -> tuple[dict[int, DocumentReport | ContextEngineError], list[_Written]]:
        """Settle every identity and write every new version in one transaction."""
        services = self.services
        results: dict[int, DocumentReport | ContextEngineError] = {}
        reports = {e.index: self._base_report(e) for e in entries}

        def settle(entry: Entry, existing: dict[str, Any] | None) -> bool:
            """False when the entry is answered without a write (unchanged)."""
            assert entry.prepared is not None
            if existing is not None and is_unchanged(existing, entry.prepared.content_hash):
                results[entry.index] = skipped_unchanged(reports[entry.index], existing)
                return False
            return True

        if not entries:
            return results, []
        try:
            async with share.begin() as conn:
                # read with the identities owned: what the runs before this one wrote is settled
                access = services.write_access
                found = await holders.holders(conn, [e.filing for e in entries], caller, access, for_update=True)
                to_write, heads = [], []
                for entry, existing in zip(entries, found, strict=True):
                    if isinstance(existing, ContextEngineError):
                        results[entry.index] = existing  # ambiguous, or not the caller's to change
                    elif settle(entry, existing):
                        to_write.append(entry)
                        heads.append(_head(entry, existing))
                if not to_write:
                    return results, []
                opened = await repo.open_versions(
                    conn,
                    heads,
                    lease_holder=holder,
                    lease_seconds=float(services.config.ingest.resume_stale_seconds),
                )
                rows = []
                for entry, version in zip(to_write, opened, strict=True):
                    assert entry.prepared is not None and entry.prepared.chunks is not None
                    rows += [(version.document_id, chunk_row(i, c)) for i, c in enumerate(entry.prepared.chunks)]
                stored = await repo.insert_chunks(
                    conn,
                    rows,
                    embedding_key=services.embedder.key,
                    text_search_config=services.text_search_config,
                )
                await repo.close_versions(conn, opened, max_text_chars=services.config.ingest.max_document_text_chars)
        except ContextEngineError:
            raise
        except Exception as exc:
            log.warning("batch write failed: %s", type(exc).__name__)
            raise _WaveFailed() from exc
        pending: dict[str, list[tuple[int, int]]] = {}
        for chunk in stored:
            if chunk.pending:
                pending.setdefault(chunk.document_id, []).append((chunk.id, chunk.position))
        written = []
        for entry, version in zip(to_write, opened, strict=True):
            assert entry.prepared is not None
            report = reports[entry.index].model_copy(
                update={
                    "document_id": version.document_id,
                    "version": version.version,
                    "revision": version.revision,
                    "chunks": entry.prepared.chunk_count,
                    "text_truncated": _cut(entry.prepared, services.config.ingest.max_document_text_chars),
                }
            )
            mine = sorted(pending.get(version.document_id, []))
            # the document's own counts: reused chunks are done already
            count = entry.prepared.chunk_count
            written.append(_Written(entry, report, mine, {"done": count - len(mine), "total": count, "tokens": 0}))
        return results, written

    def _base_report(self, entry: Entry) -> DocumentReport:
        assert entry.prepared is not None and entry.doc.name is not None
        prepared = entry.prepared
        return DocumentReport(
            document_id=None,
            name=entry.doc.name,
            source_id=entry.doc.source_id,
            status="failed",
            mime=prepared.mime,
            pages=prepared.meta.get("pages"),
            pages_source=prepared.meta.get("pages_source"),
        )

    async def _embed(self, share: IngestShare, written: list[_Written], holder: str) -> list[_Written]:
        """Embed every pending chunk of the wave together; each stored batch advances its documents'
        progress, and completes those whose last vector it carried, in the same transaction."""
        services = self.services
        embedder, hooks = services.embedder, services.hooks
        by_chunk: dict[int, str] = {}
        items: list[batching.Item] = []
        for w in written:
            assert w.entry.prepared is not None and w.entry.prepared.chunks is not None
            texts = [c.text for c in w.entry.prepared.chunks]
            w.entry.prepared.chunks.clear()
            for cid, _ in w.pending:
                by_chunk[cid] = str(w.report.document_id)
            rows: list[tuple[int, int, str | None]] = [(cid, position, None) for cid, position in w.pending]
            items += embed_store.items_of(rows, texts, embedder.count_tokens)
        store = embed_store.LeasedStore(
            share,
            embedding_key=embedder.key,
            holder=holder,
            lease_seconds=float(services.config.ingest.resume_stale_seconds),
            progress={str(w.report.document_id): w.progress for w in written},
            document_of=by_chunk.__getitem__,
        )
        failure: tuple[str, str] | None = None
        try:
            await embed_store.Embedding(services, owner=holder).run(items, store.store)
            await store.finish_open()  # the documents that had nothing pending (every vector reused)
        except embed_store.LeaseLost:
            pass  # the store knows which: they are answered busy below
        except Exception as exc:
            if not isinstance(exc, ContextEngineError):
                log.exception("embedding failed for a batch of %d documents", len(written))
            failure = (embed_store.failure_reason(exc), self.ingestor.scrubber.text(str(exc)))
        except BaseException:  # cancelled: the documents stay resumable, no run is left on their rows
            await asyncio.shield(store.let_go())
            raise
        if failure is not None:
            await store.fail(*failure)
        for w in written:
            doc_id = str(w.report.document_id)
            w.progress = store.progress[doc_id]
            if doc_id in store.lost:
                w.report = _busy(w.report)
            elif doc_id in store.open and failure is not None:
                w.report = embed_store.embedding_failed(w.report, *failure)
                await hooks.emit("on_error", ErrorEvent("embed", w.report.name, doc_id, failure[0], failure[1]))
            elif doc_id not in store.open:
                w.report = w.report.model_copy(update={"status": "completed"})
                await self._announce(w, len(written))
        return written

    async def _announce(self, w: _Written, batch_size: int) -> None:
        """The events a single ingest emits for a stored document, one document at a time."""
        hooks = self.services.hooks
        report = w.report
        doc_id = report.document_id
        await hooks.emit("on_progress", ProgressEvent("chunk", "done", report.name, detail={"chunks": report.chunks}))
        await hooks.emit("on_progress", ProgressEvent("embed", "done", report.name, doc_id, dict(w.progress)))
        await hooks.emit(
            "on_usage",
            ingest_usage(
                report,
                embedded=w.progress["done"],
                reused=report.chunks - w.progress["total"],
                tokens=w.progress["tokens"],
                batch_documents=batch_size,
            ),
        )


def _waves(entries: list[Entry]) -> list[list[Entry]]:
    """First occurrences of each identity first, then repeats, in input order within each wave.
    An unnamed entry's identity is known only once it is read; until then each is its own."""
    waves: list[list[Entry]] = []
    seen: dict[tuple[str, str], int] = {}
    for entry in entries:
        key = entry.identity if entry.doc.name is not None else ("", f"#{entry.index}")
        n = seen.get(key, 0)
        seen[key] = n + 1
        while len(waves) <= n:
            waves.append([])
        waves[n].append(entry)
    return waves


def _fingerprint(entry: Entry) -> str | None:
    """What makes two entries the same call (``None``: this one is never merged with another)."""
    doc = entry.doc
    if entry.keyed or not isinstance(doc.source, bytes):
        return None
    fields = [doc.source_id, doc.name, doc.acl, doc.attributes, doc.mime]
    digest = hashlib.sha256(doc.source)
    digest.update(json.dumps(fields, sort_keys=True, default=str).encode("utf-8"))
    return digest.hexdigest()


def _distinct(entries: list[Entry]) -> tuple[list[Entry], dict[int, int]]:
    """The first of each group of identical entries, and each repeat's index -> its first's index."""
    first: dict[str, int] = {}
    distinct: list[Entry] = []
    repeats: dict[int, int] = {}
    for entry in entries:
        key = _fingerprint(entry)
        if key is not None and key in first:
            repeats[entry.index] = first[key]
            continue
        if key is not None:
            first[key] = entry.index
        distinct.append(entry)
    return distinct, repeats


def _repeat_of(outcome: DocumentReport | ContextEngineError) -> DocumentReport | ContextEngineError:
    """What a second identical call answers after ``outcome``: the stored document unchanged, or the
    same refusal or failure."""
    if isinstance(outcome, DocumentReport) and outcome.status in ("completed", "embedding", "batch_pending"):
        return outcome.model_copy(
            update={"status": "skipped", "skip_reason": "unchanged", "revision": None, "chunks": 0}
        )
    if isinstance(outcome, DocumentReport):
        return outcome.model_copy()
    return outcome


def _busy(report: DocumentReport) -> DocumentReport:
    return report.model_copy(update={"status": "skipped", "skip_reason": "in_progress"})


def _head(entry: Entry, existing: dict[str, Any] | None) -> repo.VersionHead:
    prepared, doc = entry.prepared, entry.doc
    assert prepared is not None and doc.name is not None
    meta = dict(prepared.meta)
    meta["embedding_progress"] = {"done": 0, "total": prepared.chunk_count, "tokens": 0}
    return repo.VersionHead(
        existing_id=str(existing["id"]) if existing is not None else None,
        source_id=doc.source_id,
        name=doc.name,
        mime=prepared.mime,
        acl=doc.acl,
        attributes=doc.attributes,
        content_hash=prepared.content_hash,
        meta=meta,
        chunk_count=prepared.chunk_count,
    )


def _cut(prepared: Prepared, cap: int | None) -> bool:
    """Whether the stored text (the chunks joined by blank lines, as the database builds it) exceeds ``cap``."""
    if cap is None or prepared.chunks is None:
        return False
    return sum(len(c.text) for c in prepared.chunks) + 2 * max(len(prepared.chunks) - 1, 0) > cap
