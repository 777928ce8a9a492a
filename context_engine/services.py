"""``Services``: what ingest, retrieval and knowledge share, built once by the engine.

The engine is the front door; the pipelines behind it receive this object instead of the engine,
so none of them imports ``ContextEngine`` or reaches into its members. A redaction view of the
engine shares the same ``Services`` (one pool, one embedder) and differs only in its policy, which
travels with each call as a ``Redactor`` or an ``IngestScrubber``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.config import ContextEngineConfig
from context_engine.embeddings.base import Embedder
from context_engine.errors import DimensionMismatch, StorageUnavailable
from context_engine.hooks import Hooks
from context_engine.storage.database import Database
from context_engine.storage.migrate import migrate

log = logging.getLogger("context_engine.migrate")

HttpClientFactory = Callable[[str], "httpx.AsyncClient | None"]


class Services:
    """The database, the embedder, the configuration, the hooks and the host's HTTP client factory."""

    def __init__(
        self,
        config: ContextEngineConfig,
        *,
        http_client_factory: HttpClientFactory | None = None,
        embedder: Embedder | None = None,
        hooks: Hooks | None = None,
    ):
        self.config = config
        self.http_client_factory = http_client_factory
        self.hooks = hooks or Hooks()
        self.database = Database(config)
        self._embedder = embedder
        self._owns_embedder = embedder is None
        self._schema_checked = False
        self._reads: tuple[AsyncEngine, AsyncEngine] | None = None
        #: the text-search configuration the schema was migrated with (read from it on first use)
        self.text_search_config: str = config.search.text_search_config

    @property
    def embedder(self) -> Embedder:
        """The configured embedder, built on first use (a host-supplied one is used as given)."""
        if self._embedder is None:
            from context_engine.embeddings.factory import build_embedder

            self._embedder = build_embedder(self.config.embedding, self.http_client_factory)
        return self._embedder

    async def db(self) -> AsyncEngine:
        """The pool for the running loop; the schema is migrated (or checked) once per process."""
        db = await self.database.engine()
        if not self._schema_checked:
            if self.database.embedded or self.config.storage.auto_migrate:
                # idempotent and serialised by an advisory lock, so a race here is harmless
                report = await migrate(
                    db,
                    dim=self.embedder.dim,
                    text_search_config=self.config.search.text_search_config,
                    announce=log.info,  # a library logs its index builds; the CLI prints them
                )
                self.text_search_config = report.text_search_config
            else:
                self.text_search_config = await self._check_schema(db)
            self._schema_checked = True
        return db

    async def reads(self) -> AsyncEngine:
        """The pool in autocommit, for plain reads: a single statement then costs one round trip,
        not BEGIN, statement and ROLLBACK (under load each is a wake-up of both processes)."""
        db = await self.db()
        if self._reads is None or self._reads[0] is not db:
            self._reads = (db, db.execution_options(isolation_level="AUTOCOMMIT"))
        return self._reads[1]

    async def _check_schema(self, db: AsyncEngine) -> str:
        try:
            async with db.connect() as conn:
                rows = dict((await conn.execute(text("SELECT key, value FROM ce_meta"))).all())
        except Exception as exc:
            raise StorageUnavailable(
                "the database has no context-engine schema; run "
                f"`context-engine migrate --database-url URL --dim {self.embedder.dim}` first"
            ) from exc
        if int(rows.get("embedding_dim", 0)) != self.embedder.dim:
            raise DimensionMismatch(
                f"the database is locked to embedding dimension {rows.get('embedding_dim')}, "
                f"but the configured model produces {self.embedder.dim}"
            )
        return rows.get("text_search_config", "english")

    async def aclose(self) -> None:
        """Close the embedder the engine built (never a host's) and every pool."""
        if self._embedder is not None and self._owns_embedder:
            await self._embedder.aclose()
            self._embedder = None
        await self.database.aclose()
