"""Bulk ingest: many new documents written with binary ``COPY``, a batch per transaction.

Why: the ordinary path writes one document per transaction and fills each vector with its own
statement, which is right for a document at a time and far too slow for a first load of a million
chunks. Here documents are chunked exactly like an ordinary ingest (same extractor, chunker, ingest
redaction and content hash), a batch of them is embedded, and the batch is written in one
transaction: documents and versions by ``COPY``, chunks by ``COPY`` (vectors in pgvector's binary
format) into a staging table and one ``INSERT ... SELECT`` that also computes the text-search
vector and updates the BM25 statistics in the same statement. The vector-count triggers of
``ce_chunks`` run once per batch. The tables end as the ordinary path leaves them.

A document whose identity (source, name) is already taken, that repeats an identity earlier in the
load, or that cannot be stored as it is (no text, a chunk over the model's cap) is handed to the
ordinary ingest after its batch, which gives it the ordinary outcome (a new version, a failed
record). Each batch is all or nothing; a bad input raises before its batch is written, so the
batches before it stay stored and the ones after it are not read.

Two batches are in flight at most: while one writes, the next is embedded and its chunks are staged
on a second connection (opened only once the first holds its own). The second takes the store
revision and writes its documents only after the first has ended, and is rolled back if the first
failed, so batches commit in input order, their revisions follow it, and a failure stops the load
at the failed batch. The BM25 term counts are keyed by the integer id of their (source, ACL) group
(migration 0015), which the same statement upserts.

With ``build_index`` the HNSW index and the full-text and trigram GIN indexes are dropped before the
load and each built once after it from the definition of the migration that created it, with
``maintenance_work_mem`` and parallel maintenance workers raised for that one transaction. Searches
keep answering meanwhile, more slowly: without the indexes the vector leg's ordering is served by
an exact scan and the text legs scan the rows. Writes by other callers wait while an index builds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import time
import uuid
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pgvector.psycopg.vector import register_vector_info
from psycopg.types import TypeInfo
from psycopg.types.json import Jsonb
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from context_engine.errors import Forbidden, InvalidRequest
from context_engine.ingest import batching, embed_store
from context_engine.ingest.chunker import Chunk, normalise
from context_engine.ingest.document import DocumentInput
from context_engine.ingest.extracted import ExtractionFailed
from context_engine.ingest.pipeline import UNNAMED, Ingestor, Prepared, chunk_stream, open_source, prepare, unnamed_name
from context_engine.models import DocumentReport
from context_engine.principals import holds_acl
from context_engine.storage import bm25_stats, layout
from context_engine.storage import repository as repo
from context_engine.storage.migrate import revision_files

if TYPE_CHECKING:
    from context_engine.services import Services

#: the indexes of ce_chunks a load with ``build_index`` drops and builds once after it: each one
#: row-by-row costs many times its build (a 20,000-chunk load: 18.5 s with the trigram index
#: against 2 s without it, and 5.7 s to build it), the vector index most of all; the GIN index
#: on ACLs and the b-trees stay, since writes and searches rely on them
REBUILT_INDEXES = ("ix_ce_chunks_tsv", "ix_ce_chunks_trgm", "ix_ce_chunks_embedding", "ix_ce_chunks_embedding_half")
#: documents prepared (extracted, chunked) per thread hand-off
_PREPARE_SLICE = 256
#: the binary COPY column types of documents, versions and staged chunks, in column order
_DOCUMENT_TYPES = "uuid text text text text text[] jsonb text text jsonb int4 int4 int8 int8".split()
_VERSION_TYPES = "uuid int4 text text text int8 text[] jsonb text jsonb int4".split()
_CHUNK_TYPES = "int8 uuid int4 text text[] text text text int4 text vector jsonb int4".split()


@dataclass
class BulkDocument:
    """One document of a bulk load: a ``text``, or a ``file`` (its bytes or its path) extracted as
    an ordinary ingest extracts it."""

    text: str | None = None
    name: str | None = None
    source_id: str = "default"
    acl: list[str] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)
    mime: str | None = None
    file: bytes | Path | None = None


class BulkReport(BaseModel):
    """What a bulk load did. ``ordinary`` holds the reports of the documents handed to the ordinary
    ingest (identity taken, or not storable as they are); the rest were written in bulk."""

    documents: int = 0
    chunks: int = 0
    batches: int = 0
    ordinary: list[DocumentReport] = []
    index_rebuilt: bool = False
    seconds: float = 0.0
    #: time spent waiting for the embedder (the stand-in of a benchmark, or a provider)
    embed_seconds: float = 0.0
    #: build time of each index a load with ``build_index`` rebuilt
    index_seconds: dict[str, float] = {}


@dataclass
class _Ready:
    """A document prepared for writing; ``name`` is its own, or the one its content gave it."""

    doc: DocumentInput
    name: str
    prepared: Prepared
    chunks: list[Chunk]


@dataclass
class _Slot:
    """A batch's place in the load's order. The next batch opens its transaction once this one holds
    its own connection (so no connection is held while a model embeds or while waiting for the pool
    on this batch's behalf) and stages its chunks meanwhile; it writes and commits only after this
    one has ended, so batches commit in input order."""

    connected: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[list[DocumentInput]] | None = None


def index_definitions(dim: int) -> dict[str, str]:
    """The ``CREATE INDEX`` of each index a load rebuilds, as the last migration that declared it
    wrote it, named as the live index (a migration may build one under a temporary name and
    rename it). Read from the migration files, so a rebuilt index is the one migrating makes."""
    found: dict[str, str] = {}
    for path in revision_files():
        sql = path.read_text(encoding="utf-8").replace("{dim}", str(dim))
        for name in REBUILT_INDEXES:
            pattern = rf"CREATE INDEX[^;]*?\b{name}(?:_next)?\s+ON\s+ce_chunks\b[^;]*"
            for match in re.finditer(pattern, sql, flags=re.I):
                statement = re.sub(r"\bCONCURRENTLY\s+", "", match.group(0), flags=re.I)
                statement = re.sub(rf"\b{name}_next\b", name, statement)
                found[name] = " ".join(statement.split())
    missing = [name for name in REBUILT_INDEXES if name not in found]
    if missing:
        raise RuntimeError(f"no migration declares {', '.join(missing)}")
    return found


_FIELDS = ("text", "file", "name", "source_id", "acl", "attributes", "mime")


def document(value: BulkDocument | Mapping[str, Any]) -> BulkDocument:
    """A mapping (``text`` or ``file``, ``name``, ``source_id``, ``acl``, ``attributes``, ``mime``)
    or a :class:`BulkDocument`, checked; raises InvalidRequest naming the bad field."""
    if isinstance(value, BulkDocument):
        doc = value
    elif isinstance(value, Mapping):
        unknown = set(value) - set(_FIELDS)
        if unknown:
            raise InvalidRequest(f"unknown document fields: {', '.join(sorted(map(str, unknown)))}")
        doc = BulkDocument(
            text=value.get("text"),
            name=value.get("name"),
            source_id=value.get("source_id", "default"),
            acl=value.get("acl") or [],
            attributes=value.get("attributes") or {},
            mime=value.get("mime"),
            file=value.get("file"),
        )
    else:
        raise InvalidRequest("each document must be a mapping or a BulkDocument")
    if (doc.text is None) == (doc.file is None):
        raise InvalidRequest("every document needs exactly one of text or file")
    if doc.text is not None and not isinstance(doc.text, str):
        raise InvalidRequest("text must be a string")
    if doc.file is not None and not isinstance(doc.file, bytes | Path):
        raise InvalidRequest("file must be bytes or a path")
    if not isinstance(doc.source_id, str) or not doc.source_id.strip():
        raise InvalidRequest("source_id must be a non-empty string")
    if doc.name is not None and (not isinstance(doc.name, str) or not doc.name.strip()):
        raise InvalidRequest("name must be a non-empty string")
    if isinstance(doc.acl, str) or not all(isinstance(a, str) and a.strip() for a in doc.acl):
        raise InvalidRequest("acl must be a list of non-empty strings")
    if not isinstance(doc.attributes, dict):
        raise InvalidRequest("attributes must be an object")
    if doc.mime is not None and not isinstance(doc.mime, str):
        raise InvalidRequest("mime must be a string")
    acl = sorted(set(doc.acl))
    return BulkDocument(doc.text, doc.name, doc.source_id, acl, dict(doc.attributes), doc.mime, doc.file)


class BulkLoader:
    """One bulk load for an engine (or view): its services, and its ingestor for the documents the
    bulk path hands over."""

    def __init__(self, services: Services, ingestor: Ingestor):
        self.services = services
        self.ingestor = ingestor

    async def load(
        self,
        documents: Iterable[BulkDocument | Mapping[str, Any]],
        *,
        caller: tuple[str, ...] | None,
        build_index: bool,
        batch_chunks: int,
        maintenance_work_mem: str,
        parallel_workers: int | None,
    ) -> BulkReport:
        if isinstance(documents, str | bytes | Mapping) or not isinstance(documents, Iterable):
            raise InvalidRequest("documents must be a list of documents")
        if not isinstance(batch_chunks, int) or batch_chunks < 1:
            raise InvalidRequest("batch_chunks must be a positive integer")
        workers = parallel_workers if parallel_workers is not None else max(1, (os.cpu_count() or 2) - 1)
        if not isinstance(workers, int) or workers < 0:
            raise InvalidRequest("parallel_workers must be a non-negative integer")
        if not re.fullmatch(r"\d+\s*(kB|MB|GB)", str(maintenance_work_mem)):
            raise InvalidRequest("maintenance_work_mem must look like '512MB' or '2GB'")
        db = await self.services.db()
        report = BulkReport()
        writing: _Slot | None = None
        started = time.perf_counter()
        definitions = await _present(db, index_definitions(self.services.embedder.dim)) if build_index else None
        if definitions is not None:
            await _drop_indexes(db, list(definitions))
        try:
            seen: set[tuple[str, str]] = set()
            source = iter(documents)
            pending: list[_Ready | DocumentInput] = []

            async def finish(slot: _Slot) -> None:
                """Wait for a batch to be written, then ingest the documents it handed over."""
                assert slot.task is not None
                for doc in await slot.task:
                    report.ordinary.append(await self._ordinary(doc, caller))

            while True:
                checked = [self._scrubbed(document(d)) for d in islice(source, _PREPARE_SLICE)]
                for doc in checked:
                    if not holds_acl(doc.acl, caller):
                        raise Forbidden("you may only file a document under an ACL you hold")
                docs = [self._opened(doc) for doc in checked]
                # the next documents are extracted and chunked while the batch before them is written
                pending += await asyncio.to_thread(self._prepare_all, docs)
                while pending and (not docs or sum(_chunks(r) for r in pending) >= batch_chunks):
                    cut, size = 0, 0
                    while cut < len(pending) and size < batch_chunks:
                        size += _chunks(pending[cut])
                        cut += 1
                    # this batch embeds and stages its chunks while the one before it writes
                    previous, writing = writing, _Slot()
                    writing.task = asyncio.create_task(
                        self._write_batch(db, pending[:cut], seen, report, writing, previous)
                    )
                    pending = pending[cut:]
                    if previous is not None:
                        await finish(previous)
                if not docs:
                    break
            if writing is not None:
                await finish(writing)
                writing = None
        finally:
            if writing is not None and writing.task is not None:  # a bad input was met while a batch was written
                with contextlib.suppress(Exception):
                    await writing.task
            if definitions is not None:
                for name, definition in definitions.items():
                    t0 = time.perf_counter()
                    await _build_index(db, definition, maintenance_work_mem, workers)
                    report.index_seconds[name] = round(time.perf_counter() - t0, 3)
                report.index_rebuilt = True
        async with db.connect() as conn:  # fresh planner statistics for the rows just loaded
            await conn.execute(text("ANALYZE ce_chunks"))
            await conn.commit()
        report.seconds = time.perf_counter() - started
        return report

    # ------------------------------------------------------------------ preparing
    def _prepare_all(self, docs: list[DocumentInput]) -> list[_Ready | DocumentInput]:
        """Extract and chunk (CPU work, in a thread). A document that cannot be stored as it is
        stays as it came, in its place, to be ingested the ordinary way (which records why) right
        after the batch it falls in."""
        return [self._prepare(doc) for doc in docs]

    def _opened(self, doc: BulkDocument) -> DocumentInput:
        """The record of a checked document, opened on the event loop's thread rather than in the
        preparing one. Why: a text's UTF-8 copy lives until its batch is written; made by a worker
        thread, it sits in that thread's C allocator arena, which grows by it, while the caller's
        string it replaces is freed into the main arena, which does not shrink for it, so the load
        held more memory than its live objects. Encoding a text is cheap, and a path is only looked
        up (its size against the cap)."""
        source, name = open_source(doc.text, doc.file, doc.name, self.services.config.ingest.max_file_bytes)
        return DocumentInput(source, name, doc.source_id, doc.acl, doc.attributes, doc.mime)

    def _scrubbed(self, doc: BulkDocument) -> BulkDocument:
        """Ingest-stage redaction of what is stored beside the text, as ``engine.ingest`` applies it
        (the text itself is scrubbed unit by unit while it is chunked)."""
        scrub = self.ingestor.scrubber
        doc.name = scrub.text(doc.name) if doc.name is not None else None
        doc.attributes = scrub.obj(doc.attributes)
        if doc.mime is None and doc.text is not None:  # what engine.ingest assumes of a text
            html = doc.name is not None and doc.name.lower().endswith((".html", ".htm"))
            doc.mime = "text/html" if html else "text/markdown"
        return doc

    def _prepare(self, doc: DocumentInput) -> _Ready | DocumentInput:
        services = self.services
        embedder = services.embedder
        budget = min(services.config.ingest.chunk_tokens, embedder.max_input_tokens)
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
            prepared = prepare(streamed, embedder.count_tokens, input_cap=embedder.max_input_tokens, hold=1 << 62)
        except ExtractionFailed:
            return doc
        if prepared.too_large is not None or prepared.chunks is None:
            return doc
        return _Ready(doc, doc.name or unnamed_name(prepared.content_hash, doc.acl), prepared, prepared.chunks)

    async def _ordinary(self, doc: DocumentInput, caller: tuple[str, ...] | None) -> DocumentReport:
        return await self.ingestor.ingest_document(doc, caller=caller)

    # ------------------------------------------------------------------ embedding
    async def _embed(self, ready: list[_Ready]) -> tuple[np.ndarray, list[int]]:
        """Every chunk's vector (rows in order) and each document's token total."""
        services = self.services
        embedder = services.embedder
        items: list[batching.Item] = []
        owner: list[int] = []
        for d, r in enumerate(ready):
            for c in r.chunks:
                items.append(batching.Item(len(items), c.text, embedder.count_tokens(c.text)))
                owner.append(d)
        vectors = np.zeros((len(items), embedder.dim), dtype=np.float32)

        async def store(batch: list[batching.Item], got: list[list[float]]) -> None:
            vectors[[i.key for i in batch]] = np.asarray(got, dtype=np.float32)

        # no fair turns: a load is its own run, and its batches are held for the COPY
        await embed_store.Embedding(services, owner=None).run(items, store)
        tokens = [0] * len(ready)
        for item, d in zip(items, owner, strict=True):
            tokens[d] += item.tokens
        return vectors, tokens

    # ------------------------------------------------------------------ writing
    async def _write_batch(
        self,
        db: AsyncEngine,
        pending: list[_Ready | DocumentInput],
        seen: set[tuple[str, str]],
        report: BulkReport,
        slot: _Slot,
        previous: _Slot | None,
    ) -> list[DocumentInput]:
        """Write one batch in one transaction; returns the documents left to the ordinary path."""
        try:
            fresh: list[_Ready] = []
            later: list[DocumentInput] = []
            for r in pending:
                if isinstance(r, DocumentInput):
                    later.append(r)
                    continue
                identity = (r.doc.source_id, r.name)
                if identity in seen:
                    later.append(r.doc)
                else:
                    seen.add(identity)
                    fresh.append(r)
            if not fresh:
                return later
            t0 = time.perf_counter()
            vectors, tokens = await self._embed(fresh)
            report.embed_seconds += time.perf_counter() - t0
            if previous is not None:
                await previous.connected.wait()
            async with db.begin() as conn:
                slot.connected.set()
                taken = await _taken(conn, fresh)
                keep = [i for i in range(len(fresh)) if i not in taken]
                later += [fresh[i].doc for i in sorted(taken)]
                if keep:
                    starts = np.cumsum([0] + [len(r.chunks) for r in fresh])
                    bases = [int(starts[i]) for i in keep]
                    turn = previous.task if previous is not None else None
                    await self._copy(conn, [fresh[i] for i in keep], vectors, bases, [tokens[i] for i in keep], turn)
        finally:
            slot.connected.set()
        report.documents += len(keep)
        report.chunks += sum(len(fresh[i].chunks) for i in keep)
        report.batches += 1
        return later

    async def _copy(
        self,
        conn: AsyncConnection,
        ready: list[_Ready],
        vectors: np.ndarray,
        bases: list[int],
        tokens: list[int],
        turn: Awaitable[object] | None,
    ) -> None:
        """Write prepared documents; ``vectors[bases[n] + position]`` is the vector of chunk
        ``position`` of document ``n``, ``tokens[n]`` its token total. The chunks are staged first;
        the rest waits for ``turn`` (the batch before, which must have ended) and for the store
        revision's row lock, so the batch's revisions follow the previous batch's."""
        services = self.services
        key = services.embedder.key
        distributed = await layout.distributed(conn)
        raw = await conn.get_raw_connection()
        pg = raw.driver_connection
        assert pg is not None
        info = await TypeInfo.fetch(pg, "vector")
        async with pg.cursor() as cur:
            register_vector_info(cur, info)
            ids = [uuid.uuid4() for _ in ready]
            await cur.execute(
                f"CREATE TEMP TABLE ce_bulk_chunks (ord int8, document_id uuid, position int4, source_id text, "
                f"acl text[], text text, text_hash text, section text, page int4, kind text, "
                f"embedding vector({services.embedder.dim}), meta jsonb, doc int4) ON COMMIT DROP"
            )
            async with cur.copy("COPY ce_bulk_chunks FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(_CHUNK_TYPES)
                ord_ = 0
                for n, (doc_id, r) in enumerate(zip(ids, ready, strict=True)):
                    base = bases[n]
                    for position, c in enumerate(r.chunks):
                        await copy.write_row(
                            [
                                ord_,
                                doc_id,
                                position,
                                r.doc.source_id,
                                r.doc.acl,
                                c.text,
                                hashlib.sha256(normalise(c.text).encode()).hexdigest(),
                                c.section,
                                c.page,
                                c.kind,
                                vectors[base + position],
                                Jsonb(c.meta),
                                n,
                            ]
                        )
                        ord_ += 1
            # the text-search vectors are computed here too, while the batch before still writes
            await cur.execute(
                "CREATE TEMP TABLE ce_bulk_tsv ON COMMIT DROP AS SELECT ord, "
                "to_tsvector(CAST(%(cfg)s AS regconfig), unaccent(concat_ws(' ', section, text))) AS tsv "
                "FROM ce_bulk_chunks",
                {"cfg": services.text_search_config},
            )
            if turn is not None:
                await turn  # raises if the batch before failed: this one is rolled back
            await cur.execute(
                "UPDATE ce_store_revision SET revision = revision + %(n)s WHERE id = 1 RETURNING revision",
                {"n": len(ready)},
            )
            row = await cur.fetchone()
            assert row is not None
            first = int(row[0]) - len(ready) + 1
            async with cur.copy(
                "COPY ce_documents (id, source_id, name, mime, text, acl, attributes, status, content_hash, meta, "
                "version, chunk_count, created_revision, updated_revision) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(_DOCUMENT_TYPES)
                for n, (doc_id, r) in enumerate(zip(ids, ready, strict=True)):
                    count = len(r.chunks)
                    progress = {"done": count, "total": count, "tokens": tokens[n]}
                    await copy.write_row(
                        [
                            doc_id,
                            r.doc.source_id,
                            r.name,
                            r.prepared.mime,
                            "\n\n".join(c.text for c in r.chunks),
                            r.doc.acl,
                            Jsonb(r.doc.attributes),
                            "completed",
                            r.prepared.content_hash,
                            Jsonb({**r.prepared.meta, "embedding_progress": progress}),
                            1,
                            count,
                            first + n,
                            first + n,
                        ]
                    )
            # the version row keeps the meta the ordinary path gives it when it writes the version
            async with cur.copy(
                "COPY ce_document_versions (document_id, version, source_id, name, content_hash, valid_from, acl, "
                "attributes, mime, meta, chunk_count) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(_VERSION_TYPES)
                for n, (doc_id, r) in enumerate(zip(ids, ready, strict=True)):
                    count = len(r.chunks)
                    meta = {**r.prepared.meta, "embedding_progress": {"done": 0, "total": count, "tokens": 0}}
                    await copy.write_row(
                        [
                            doc_id,
                            1,
                            r.doc.source_id,
                            r.name,
                            r.prepared.content_hash,
                            first + n,
                            r.doc.acl,
                            Jsonb(r.doc.attributes),
                            r.prepared.mime,
                            Jsonb(meta),
                            count,
                        ]
                    )
            # chunks, then their BM25 statistics from the inserted rows, in one statement: the groups
            # first, whose ids (new or existing) key the term counts
            await cur.execute(
                "WITH ins AS (INSERT INTO ce_chunks (document_id, version, position, source_id, acl, text, text_hash, "
                "section, page, kind, tsv, embedding, embedding_key, meta, valid_from) "
                "SELECT b.document_id, 1, b.position, b.source_id, b.acl, b.text, b.text_hash, b.section, b.page, "
                "b.kind, v.tsv, b.embedding, %(ek)s, b.meta, %(first)s + b.doc "
                "FROM ce_bulk_chunks b JOIN ce_bulk_tsv v ON v.ord = b.ord ORDER BY b.ord "
                "RETURNING id, document_id, source_id, acl, tsv, tsv_tokens), "
                "grp AS (INSERT INTO ce_bm25_groups AS g (source_id, acl, chunks, tokens) "
                "SELECT source_id, acl, count(*), coalesce(sum(tsv_tokens), 0) FROM ins GROUP BY 1, 2 ORDER BY 1, 2 "
                "ON CONFLICT (source_id, acl) DO UPDATE SET chunks = g.chunks + EXCLUDED.chunks, "
                "tokens = g.tokens + EXCLUDED.tokens RETURNING g.group_id, g.source_id, g.acl), "
                "terms AS (INSERT INTO ce_bm25_terms AS t (lexeme, group_id, df, max_tf, min_len) "
                "SELECT u.lexeme, grp.group_id, count(*), max(coalesce(array_length(u.positions, 1), 1)), "
                "min(i.tsv_tokens) FROM ins i JOIN grp ON grp.source_id = i.source_id AND grp.acl = i.acl, "
                "unnest(i.tsv) u GROUP BY 1, 2 ORDER BY 1, 2 "
                f"ON CONFLICT (lexeme, group_id) DO UPDATE SET df = t.df + EXCLUDED.df, {bm25_stats.KEEP_BOUNDS}) "
                f"{bm25_stats.posting_insert(distributed)}"
                "FROM ins c JOIN grp g ON g.source_id = c.source_id AND g.acl = c.acl, unnest(c.tsv) u ORDER BY 1, 2",
                {"ek": key, "first": first},
            )


def _chunks(item: _Ready | DocumentInput) -> int:
    return len(item.chunks) if isinstance(item, _Ready) else 0


async def _taken(conn: AsyncConnection, ready: list[_Ready]) -> set[int]:
    """Positions (in ``ready``) whose identity is filed already or locked by a writer right now;
    the others are locked for this transaction, as an ordinary writer locks its one identity."""
    keys = [repo.identity_key(r.doc.source_id, r.name) for r in ready]
    params = {"keys": keys, "s": [r.doc.source_id for r in ready], "n": [r.name for r in ready]}
    if await layout.distributed(conn):
        # Citus plans no correlated subquery beside a set-returning function: locks, then a join
        locked = await conn.execute(
            text(
                "SELECT k.i - 1, pg_try_advisory_xact_lock(hashtextextended(k.key, 7)) "
                "FROM unnest(CAST(:keys AS text[])) WITH ORDINALITY AS k(key, i)"
            ),
            params,
        )
        busy = {int(i) for i, got in locked if not got}
        filed = await conn.execute(
            text(
                "SELECT DISTINCT k.i - 1 FROM unnest(CAST(:s AS text[]), CAST(:n AS text[])) WITH ORDINALITY "
                "AS k(s, n, i) JOIN ce_documents d ON d.source_id = k.s AND d.name = k.n"
            ),
            params,
        )
        return busy | {int(r[0]) for r in filed}
    rows = await conn.execute(
        text(
            "SELECT k.i - 1, pg_try_advisory_xact_lock(hashtextextended(k.key, 7)) AS locked, "
            "EXISTS (SELECT 1 FROM ce_documents d WHERE d.source_id = k.s AND d.name = k.n) AS filed "
            "FROM unnest(CAST(:keys AS text[]), CAST(:s AS text[]), CAST(:n AS text[])) WITH ORDINALITY "
            "AS k(key, s, n, i)"
        ),
        params,
    )
    return {int(i) for i, locked, filed in rows if filed or not locked}


async def _present(db: AsyncEngine, definitions: dict[str, str]) -> dict[str, str]:
    """The definitions of the indexes that exist: an optional one (the trigram leg's, built only when
    that leg is enabled) is neither dropped nor built by a load when it is absent."""
    async with db.connect() as conn:
        rows = await conn.execute(
            text("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ANY(:n)"),
            {"n": list(definitions)},
        )
        present = {str(r[0]) for r in rows}
    return {name: sql for name, sql in definitions.items() if name in present}


async def _drop_indexes(db: AsyncEngine, names: list[str]) -> None:
    """Drop the indexes without blocking searches (``CONCURRENTLY`` runs outside a transaction)."""
    async with db.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        for name in names:
            await auto.execute(text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))


async def _build_index(db: AsyncEngine, definition: str, memory: str, workers: int) -> None:
    """Build an index in one pass over the loaded rows. The raised memory and worker
    settings are local to this transaction, so the pooled connection goes back as it came."""
    async with db.begin() as conn:
        await conn.execute(text("SELECT set_config('maintenance_work_mem', :m, true)"), {"m": memory})
        await conn.execute(text("SELECT set_config('max_parallel_maintenance_workers', :w, true)"), {"w": str(workers)})
        await conn.execute(text(definition))
