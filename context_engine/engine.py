"""``ContextEngine``: the one object behind every door (methods, routes, CLI).

Construction is cheap and lazy: nothing connects until the first call that needs the
database, and ``aclose()`` releases the pool, the providers the engine built, and the embedded
server handle.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any

import httpx
from sqlalchemy import text as sql_text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.config import ContextEngineConfig
from context_engine.embeddings.base import Embedder
from context_engine.errors import (
    ContextEngineError,
    Forbidden,
    IngestTooLarge,
    InputTooLarge,
    InvalidRequest,
    NotFound,
    ProviderError,
    StorageUnavailable,
)
from context_engine.ingest.chunker import chunk_units, normalise
from context_engine.ingest.extracted import ExtractionFailed
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
    ):
        self.config = config or ContextEngineConfig()
        self._http_client_factory = http_client_factory
        self._db = Database(self.config)
        self._embedder = embedder
        self._owns_embedder = embedder is None
        self._schema_checked = False
        self._text_search_config = self.config.search.text_search_config

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> ContextEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._embedder is not None and self._owns_embedder:
            await self._embedder.aclose()
            self._embedder = None
        await self._db.aclose()

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from context_engine.embeddings.factory import build_embedder

            self._embedder = build_embedder(self.config.embedding, self._http_client_factory)
        return self._embedder

    async def _ready(self) -> AsyncEngine:
        """The pool for the running loop; migrates (or checks) the schema once per engine."""
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
        and for ``IngestTooLarge`` (an intake cap refuses, it never trims).
        """
        if (text is None) == (file is None):
            raise InvalidRequest("pass exactly one of text= or file=")
        caller = resolve(principals)  # type: ignore[arg-type]
        acl_list = _clean_acl(acl)
        if not holds_acl(acl_list, caller):
            raise Forbidden("you may only file a document under an ACL you hold")
        if not isinstance(source_id, str) or not source_id.strip():
            raise InvalidRequest("source_id must be a non-empty string")
        attributes = dict(attributes or {})
        data, name = self._read_input(text, file, name)
        if text is not None and mime is None:
            mime = "text/html" if name.lower().endswith((".html", ".htm")) else "text/markdown"
        report = await self._ingest_bytes(data, name, source_id, acl_list, attributes, mime, caller)
        totals = {
            "files": 1,
            "completed": int(report.status == "completed"),
            "failed": int(report.status == "failed"),
            "skipped": int(report.status == "skipped"),
            "chunks": report.chunks,
        }
        return IngestReport(documents=[report], totals=totals)

    def _read_input(self, text: str | None, file: FileInput | None, name: str | None) -> tuple[bytes, str]:
        cap = self.config.ingest.max_file_bytes
        if text is not None:
            if not isinstance(text, str):
                raise InvalidRequest("text must be a string")
            data = text.encode("utf-8")
            if cap is not None and len(data) > cap:
                raise IngestTooLarge("ingest.max_file_bytes", cap, len(data))
            return data, name or "untitled"
        if isinstance(file, bytes | bytearray):
            if cap is not None and len(file) > cap:
                raise IngestTooLarge("ingest.max_file_bytes", cap, len(file))
            return bytes(file), name or "untitled"
        if isinstance(file, str | os.PathLike):
            path = Path(file)
            size = path.stat().st_size  # answered before reading a byte
            if cap is not None and size > cap:
                raise IngestTooLarge("ingest.max_file_bytes", cap, size)
            return path.read_bytes(), name or path.name
        if hasattr(file, "read"):
            limit = None if cap is None else cap + 1
            data = file.read() if limit is None else file.read(limit)  # type: ignore[union-attr]
            if cap is not None and len(data) > cap:
                raise IngestTooLarge("ingest.max_file_bytes", cap, len(data))
            return data, name or Path(getattr(file, "name", "untitled")).name
        raise InvalidRequest("file must be bytes, a path or a binary file object")

    async def _ingest_bytes(
        self,
        data: bytes,
        name: str,
        source_id: str,
        acl: list[str],
        attributes: dict[str, Any],
        mime: str | None,
        caller: tuple[str, ...] | None,
    ) -> DocumentReport:
        sql = await self._ready()
        embedder = self.embedder
        budget = min(self.config.ingest.chunk_tokens, embedder.max_input_tokens)
        base = DocumentReport(document_id=None, name=name, source_id=source_id, status="failed")
        try:
            extracted_mime, body, chunks, meta = await asyncio.to_thread(
                _extract_and_chunk, data, name, mime, budget, embedder.count_tokens, self.config.ingest.max_rows
            )
        except IngestTooLarge:
            raise
        except ExtractionFailed as exc:
            return await self._record_failure(
                sql, base, mime or "application/octet-stream", acl, attributes, exc.reason, str(exc), caller
            )
        content_hash = hashlib.sha256(body.encode("utf-8")).hexdigest()
        base.mime = extracted_mime
        base.pages, base.pages_source = meta.get("pages"), meta.get("pages_source")

        async with sql.connect() as conn:
            existing = await repo.find_by_identity(conn, source_id, name)
        if existing is not None:
            if not await self._visible(sql, str(existing["id"]), caller):
                raise Forbidden("you may not replace a document under this name in this source")
            if existing["content_hash"] == content_hash and existing["status"] == "completed":
                return base.model_copy(
                    update={
                        "document_id": str(existing["id"]),
                        "status": "skipped",
                        "skip_reason": "unchanged",
                        "version": existing["version"],
                    }
                )
        existing_id = str(existing["id"]) if existing else None
        try:
            rows = await self._embed_chunks(sql, chunks, existing_id)
        except (InputTooLarge, ProviderError) as exc:
            reason = exc.code if exc.code in FAILURE_MESSAGES else "unknown"
            return await self._record_failure(
                sql, base, extracted_mime, acl, attributes, reason, str(exc), caller, existing_id=existing_id
            )
        async with sql.begin() as conn:
            if not await repo.try_identity_lock(conn, source_id, name):
                return base.model_copy(update={"status": "skipped", "skip_reason": "in_progress"})
            current = await repo.find_by_identity(conn, source_id, name)
            if current is not None and str(current["id"]) != existing_id:
                return base.model_copy(update={"status": "skipped", "skip_reason": "in_progress"})
            doc_id, version, revision = await repo.write_document(
                conn,
                existing_id=existing_id,
                source_id=source_id,
                name=name,
                mime=extracted_mime,
                body=body,
                acl=acl,
                attributes=attributes,
                content_hash=content_hash,
                meta=meta,
                chunks=rows,
                embedding_key=self.embedder.key,
                text_search_config=self._text_search_config,
            )
        return base.model_copy(
            update={
                "document_id": doc_id,
                "status": "completed",
                "version": version,
                "revision": revision,
                "chunks": len(rows),
            }
        )

    async def _embed_chunks(self, sql: AsyncEngine, chunks: list[Any], existing_id: str | None) -> list[repo.ChunkRow]:
        """Embed only chunks whose text has no stored vector from the same model."""
        key = self.embedder.key
        reusable: set[str] = set()
        if existing_id is not None:
            async with sql.connect() as conn:
                reusable = await repo.reusable_hashes(conn, existing_id, key)
        rows = [
            repo.ChunkRow(
                position=i,
                text=c.text,
                text_hash=hashlib.sha256(normalise(c.text).encode()).hexdigest(),
                section=c.section,
                page=c.page,
                kind=c.kind,
                meta=c.meta,
                embedding=None,
            )
            for i, c in enumerate(chunks)
        ]
        todo = [r for r in rows if r.text_hash not in reusable]
        for start in range(0, len(todo), _EMBED_BATCH):
            batch = todo[start : start + _EMBED_BATCH]
            vectors = await self.embedder.embed([r.text for r in batch], kind="document")
            for row, vector in zip(batch, vectors, strict=True):
                row.embedding = vector
        return rows

    async def _record_failure(
        self,
        sql: AsyncEngine,
        base: DocumentReport,
        mime: str,
        acl: list[str],
        attributes: dict[str, Any],
        reason: str,
        error: str,
        caller: tuple[str, ...] | None,
        *,
        existing_id: str | None = None,
    ) -> DocumentReport:
        async with sql.begin() as conn:
            if existing_id is None:
                found = await repo.find_by_identity(conn, base.source_id, base.name)
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
        log.info("ingest failed: document=%s reason=%s", doc_id, reason)
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
        return await repo.get_document(sql, document_id, Scope(caller), with_text=False) is not None

    # ------------------------------------------------------------------ search
    async def search(
        self,
        query: str,
        *,
        source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None,
        principals: Iterable[str] | object | None = None,
        top_k: int = 10,
    ) -> SearchResult:
        """Hybrid search: full-text, trigram and vector legs fused by weighted RRF."""
        started = time.perf_counter()
        query = _check_query(query)
        top_k = _check_top_k(top_k, self.config.search.max_top_k)
        caller = resolve(principals)  # type: ignore[arg-type]
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
        if weights.get("fts", 0) > 0:
            tasks["fts"] = timed(
                "fts",
                legs.fts_leg(
                    sql,
                    query,
                    scope,
                    limit=limit,
                    config=self._text_search_config,
                    match=cfg.lexical_match,
                    rank=cfg.lexical_rank,
                    normalization=cfg.lexical_normalization,
                ),
            )
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
                    legs.plan_vector(sql, scope, threshold=self.config.storage.ann_exact_threshold),
                )
                found = await legs.vector_leg(sql, vec[0], scope, limit=limit, plan=plan)
                if cfg.vector_floor == "adaptive":
                    floor = query_shape.vector_floor(query)
                    found = [pair for pair in found if pair[1] >= floor]
                return found

            tasks["vector"] = timed("vector", vector())
        results = dict(zip(tasks, await asyncio.gather(*tasks.values()), strict=True))
        t0 = time.perf_counter()
        rankings = {leg: [i for i, _ in pairs] for leg, pairs in results.items()}
        fused = fusion.rrf(rankings, weights, self.config.fusion.k)[:top_k]
        rows = await repo.fetch_hits(sql, [i for i, _ in fused], scope)
        similarity = dict(results.get("vector", []))
        found_by = {leg: {i for i, _ in pairs} for leg, pairs in results.items()}
        hits = [
            Hit(
                document_id=str(row["document_id"]),
                document_name=row["document_name"],
                chunk_text=row["text"],
                score=round(score, 6),
                source_id=row["source_id"],
                chunk_idx=row["position"],
                chunk_id=cid,
                section=row["section"],
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
            "candidates": len(fusion.rrf(rankings, weights, self.config.fusion.k)),
            "timings_ms": timings,
        }
        if plan is not None:
            usage["vector_plan"] = {"plan": plan.plan, "eligible_rows": plan.eligible}
        return SearchResult(hits=hits, usage=usage)

    # ------------------------------------------------------------------ documents
    async def get_document(
        self, document_id: str, *, principals: Iterable[str] | object | None = None, include_text: bool = True
    ) -> Document:
        caller = resolve(principals)  # type: ignore[arg-type]
        doc_id = _check_uuid(document_id)
        row = await repo.get_document(await self._ready(), doc_id, Scope(caller), with_text=include_text)
        if row is None:
            raise NotFound(f"document {document_id} not found")
        return _document(row, trusted=caller is None)

    async def list_documents(
        self,
        *,
        principals: Iterable[str] | object | None = None,
        source_ids: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> DocumentPage:
        caller = resolve(principals)  # type: ignore[arg-type]
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 500:
            raise InvalidRequest("limit must be an integer between 1 and 500")
        after = _decode_cursor(cursor) if cursor else None
        rows = await repo.list_documents(
            await self._ready(), Scope(caller, _check_ids("source_ids", source_ids)), limit=limit + 1, after=after
        )
        more = len(rows) > limit
        rows = rows[:limit]
        docs = [_document(r, trusted=caller is None) for r in rows]
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
    ) -> Document:
        caller = resolve(principals)  # type: ignore[arg-type]
        doc_id = _check_uuid(document_id)
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
            doc_id, principals=TRUSTED if caller is None else list(caller), include_text=False
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


# ---------------------------------------------------------------------- helpers
def _extract_and_chunk(
    data: bytes, name: str, mime: str | None, budget: int, count_tokens: Callable[[str], int], max_rows: int | None
) -> tuple[str, str, list[Any], dict[str, Any]]:
    from context_engine.ingest.extractors import extract

    extracted = extract(data, name=name, mime=mime, max_rows=max_rows)
    chunks = list(chunk_units(extracted.units, budget=budget, count_tokens=count_tokens))
    body = "\n\n".join(c.text for c in chunks)
    if not body.strip():
        raise ExtractionFailed("the document contains no text")
    return extracted.mime, body, chunks, dict(extracted.meta)


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


def _document(row: dict[str, Any], *, trusted: bool) -> Document:
    reason = row.get("failure_reason")
    return Document(
        id=str(row["id"]),
        name=row["name"],
        source_id=row["source_id"],
        mime=row["mime"],
        acl=list(row["acl"]),
        attributes=row["attributes"] or {},
        status=row["status"],
        failure_reason=reason,
        failure_message=FAILURE_MESSAGES.get(reason) if reason else None,
        error=row.get("error") if trusted else None,
        version=row["version"],
        revision=row["updated_revision"],
        chunk_count=row["chunk_count"],
        meta=row["meta"] or {},
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        text=row.get("text"),
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
