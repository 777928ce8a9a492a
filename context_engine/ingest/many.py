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
from dataclasses import dataclass, field
from typing import Any

from context_engine.errors import ContextEngineError, IngestTooLarge, InputTooLarge, ProviderError
from context_engine.hooks import ErrorEvent, ProgressEvent
from context_engine.ingest import batching, fair_share, holders
from context_engine.ingest.extracted import ExtractionFailed
from context_engine.ingest.pipeline import (
    UNNAMED,
    Ingestor,
    Prepared,
    Source,
    WorkCaps,
    chunk_row,
    chunk_stream,
    ingest_usage,
    is_unchanged,
    page_items,
    prepare,
    reopen,
    skipped_unchanged,
    start_of,
    unnamed_name,
)
from context_engine.ingest.pool_share import IngestShare, share_for
from context_engine.models import FAILURE_MESSAGES, DocumentReport
from context_engine.storage import repository as repo
from context_engine.storage import session_locks

log = logging.getLogger("context_engine.ingest")


@dataclass
class Entry:
    """One checked document of a batch, as the engine hands it over."""

    index: int
    source: Source
    name: str | None
    source_id: str
    acl: list[str]
    attributes: dict[str, Any]
    mime: str | None
    #: ``True`` when it must take the single-document path (it carries an idempotency key)
    single: bool = False
    #: it carries an idempotency key: a request of its own, never merged with an identical entry
    keyed: bool = False
    prepared: Prepared | None = None
    start: int = 0

    @property
    def filing(self) -> holders.Filing:
        """``(source_id, name, acl, content hash)``: what admission looks the entry's document up by."""
        return (self.source_id, self.name or "", self.acl, self.prepared.content_hash if self.prepared else None)

    @property
    def identity(self) -> tuple[str, str]:
        assert self.name is not None
        return self.source_id, self.name


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
            if vision and entry.mime is None:
                entry.single = True  # a file may hold scanned pages: the single path transcribes them
            if entry.single:
                continue
            entry.start = start_of(entry.source)
            try:
                streamed = chunk_stream(
                    entry.source,
                    entry.name or UNNAMED,
                    entry.mime,
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
            entry.source = reopen(entry.source, entry.start)
            if prepared is None or prepared.chunks is None or prepared.too_large is not None:
                entry.single = True
                continue
            entry.prepared = prepared
            if entry.name is None:
                entry.name = unnamed_name(prepared.content_hash, entry.acl)

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
        assert entry.prepared is not None and entry.name is not None
        prepared = entry.prepared
        return DocumentReport(
            document_id=None,
            name=entry.name,
            source_id=entry.source_id,
            status="failed",
            mime=prepared.mime,
            pages=prepared.meta.get("pages"),
            pages_source=prepared.meta.get("pages_source"),
        )

    async def _embed(self, share: IngestShare, written: list[_Written], holder: str) -> list[_Written]:
        """Embed every pending chunk of the wave; each stored batch advances its documents' progress,
        and completes those whose last vector it carried, in the same transaction."""
        services = self.services
        embedder, hooks = services.embedder, services.hooks
        seconds = float(services.config.ingest.resume_stale_seconds)
        by_chunk: dict[int, _Written] = {}
        items: list[batching.Item] = []
        for w in written:
            assert w.entry.prepared is not None and w.entry.prepared.chunks is not None
            texts = [c.text for c in w.entry.prepared.chunks]
            w.entry.prepared.chunks.clear()
            for cid, _ in w.pending:
                by_chunk[cid] = w
            items += page_items([(cid, position, None) for cid, position in w.pending], texts, embedder.count_tokens)
        by_id = {str(w.report.document_id): w for w in written}
        open_ids = {str(w.report.document_id) for w in written}
        storing = asyncio.Lock()

        async def store(batch: list[batching.Item], vectors: list[list[float]]) -> None:
            # counted and written under one lock, so the batch that carries a document's last vector is
            # the one that completes it; the counts are kept only once the transaction committed
            async with storing:
                after: dict[str, dict[str, int]] = {}
                for item in batch:
                    w = by_chunk[item.key]
                    progress = after.setdefault(str(w.report.document_id), dict(w.progress))
                    progress["done"] += 1
                    progress["tokens"] += item.tokens
                done = {d: p for d, p in after.items() if p["done"] >= p["total"]}
                moving = {d: p for d, p in after.items() if d not in done}
                async with share.begin() as conn:
                    held = await repo.renew_leases(conn, list(after), holder, seconds)
                    if held != set(after):
                        raise _LeaseLostMany(set(after) - held)
                    await repo.store_vectors(conn, [i.key for i in batch], vectors, embedder.key)
                    await repo.set_progress_many(conn, moving)
                    await repo.finish_many(conn, done, holder)
                for doc_id, progress in after.items():
                    by_id[doc_id].progress = progress
                open_ids.difference_update(done)

        max_items, max_tokens = batching.batch_limits(services.config.embedding, embedder.provider)
        stats = batching.RunStats(item_cap=max_items)
        failure: tuple[str, str] | None = None
        lost: set[str] = set()
        try:
            await batching.run(
                embedder,
                items,
                max_items=max_items,
                max_tokens=max_tokens,
                concurrency=services.config.embedding.max_concurrency,
                on_batch=store,
                stats=stats,
                gate=fair_share.gate_for(embedder, services.config.embedding.max_inflight),
                owner=holder,
            )
            nothing_pending = {d: by_id[d].progress for d in open_ids if not by_id[d].pending}
            if nothing_pending:
                async with share.begin() as conn:
                    finished = await repo.finish_many(conn, nothing_pending, holder)
                lost |= set(nothing_pending) - finished
                open_ids.difference_update(nothing_pending)
        except _LeaseLostMany as exc:
            lost |= exc.documents
        except (ProviderError, InputTooLarge, ContextEngineError) as exc:
            failure = (exc.code if exc.code in FAILURE_MESSAGES else "unknown", str(exc))
        except Exception as exc:
            log.exception("embedding failed for a batch of %d documents", len(written))
            failure = ("unknown", str(exc))
        except BaseException:  # cancelled: the documents stay resumable, no run is left on their rows
            await asyncio.shield(self._let_go(share, open_ids, holder))
            raise
        unfinished = {d for d in open_ids if d not in lost}
        if failure is not None and unfinished:
            reason, error = failure[0], self.ingestor.scrubber.text(failure[1])
            async with share.begin() as conn:
                await repo.fail_many(
                    conn, {d: by_id[d].progress for d in unfinished}, holder=holder, failure_reason=reason, error=error
                )
        for w in written:
            doc_id = str(w.report.document_id)
            if doc_id in lost:
                w.report = _busy(w.report)
            elif doc_id in unfinished and failure is not None:
                w.report = w.report.model_copy(
                    update={
                        "status": "embedding",
                        "failure_reason": failure[0],
                        "failure_message": FAILURE_MESSAGES[failure[0]],
                        "error": self.ingestor.scrubber.text(failure[1]),
                    }
                )
                event = ErrorEvent("embed", w.report.name, doc_id, failure[0], w.report.error or "")
                await hooks.emit("on_error", event)
            elif doc_id not in unfinished:
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

    async def _let_go(self, share: IngestShare, document_ids: set[str], holder: str) -> None:
        try:
            async with share.begin() as conn:
                for doc_id in document_ids:
                    await repo.let_go(conn, doc_id, holder)
        except Exception as exc:
            log.warning("could not clear the run of a batch: %s", type(exc).__name__)


class _LeaseLostMany(Exception):
    """Another run took some of the wave's documents over (this one stalled past its lease)."""

    def __init__(self, documents: set[str]):
        super().__init__(f"{len(documents)} documents were taken over")
        self.documents = documents


def _waves(entries: list[Entry]) -> list[list[Entry]]:
    """First occurrences of each identity first, then repeats, in input order within each wave.
    An unnamed entry's identity is known only once it is read; until then each is its own."""
    waves: list[list[Entry]] = []
    seen: dict[tuple[str, str], int] = {}
    for entry in entries:
        key = entry.identity if entry.name is not None else ("", f"#{entry.index}")
        n = seen.get(key, 0)
        seen[key] = n + 1
        while len(waves) <= n:
            waves.append([])
        waves[n].append(entry)
    return waves


def _fingerprint(entry: Entry) -> str | None:
    """What makes two entries the same call (``None``: this one is never merged with another)."""
    if entry.keyed or not isinstance(entry.source, bytes):
        return None
    fields = [entry.source_id, entry.name, entry.acl, entry.attributes, entry.mime]
    digest = hashlib.sha256(entry.source)
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
    prepared = entry.prepared
    assert prepared is not None and entry.name is not None
    meta = dict(prepared.meta)
    meta["embedding_progress"] = {"done": 0, "total": prepared.chunk_count, "tokens": 0}
    return repo.VersionHead(
        existing_id=str(existing["id"]) if existing is not None else None,
        source_id=entry.source_id,
        name=entry.name,
        mime=prepared.mime,
        acl=entry.acl,
        attributes=entry.attributes,
        content_hash=prepared.content_hash,
        meta=meta,
        chunk_count=prepared.chunk_count,
    )


def _cut(prepared: Prepared, cap: int | None) -> bool:
    """Whether the stored text (the chunks joined by blank lines, as the database builds it) exceeds ``cap``."""
    if cap is None or prepared.chunks is None:
        return False
    return sum(len(c.text) for c in prepared.chunks) + 2 * max(len(prepared.chunks) - 1, 0) > cap
