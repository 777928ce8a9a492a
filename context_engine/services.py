"""``Services``: what ingest, retrieval and knowledge share, built once by the engine.

The engine is the front door; the pipelines behind it receive this object instead of the engine,
so none of them imports ``ContextEngine`` or reaches into its members. A redaction view of the
engine shares the same ``Services`` (one pool, one embedder) and differs only in its policy, which
travels with each call as a ``Redactor`` or an ``IngestScrubber``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Generic, Literal, TypeVar, overload

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.config import ContextEngineConfig
from context_engine.embeddings.base import Embedder
from context_engine.errors import (
    ContextEngineError,
    DimensionMismatch,
    InvalidRequest,
    StorageUnavailable,
    known_failure,
)
from context_engine.hooks import Hooks
from context_engine.providers.http import HttpClientFactory
from context_engine.revisions.as_of import check_type
from context_engine.storage.database import Database
from context_engine.storage.migrate import migrate
from context_engine.storage.replicas import ReadReplicas, pin, pinned, retry_on_writer
from context_engine.storage.repository import current_revision
from context_engine.write_access import WriteAccess, WritePolicy

if TYPE_CHECKING:
    from context_engine.ingest.formats.page_transcriber import PageTranscriber
    from context_engine.llm.base import LLMClient

log = logging.getLogger("context_engine.migrate")

#: where a read may run: ``replica`` (a read replica when one is configured and up; may lag the
#: writer) or ``primary`` (the writer: reads its own writes)
Consistency = Literal["replica", "primary"]
T = TypeVar("T")


class Services:
    """The database, the embedder, the configuration, the hooks and the host's HTTP client factory."""

    def __init__(
        self,
        config: ContextEngineConfig,
        *,
        http_client_factory: HttpClientFactory | None = None,
        embedder: Embedder | None = None,
        hooks: Hooks | None = None,
        write_policy: WritePolicy | None = None,
    ):
        self.config = config
        #: who may change stored documents: one decision for every write path
        self.write_access = WriteAccess(tuple(config.access.writers), write_policy)
        self.http_client_factory = http_client_factory
        self.hooks = hooks or Hooks()
        self.database = Database(config)
        self._embedder = embedder
        self._owns_embedder = embedder is None
        self._schema_checked = False
        self._vision_llm: LLMClient | None = None
        self._reads: dict[AsyncEngine, AsyncEngine] = {}
        #: the text-search configuration the schema was migrated with (read from it on first use)
        self.text_search_config: str = config.search.text_search_config
        #: built now so a malformed read URL is refused at construction (``ConfigError``)
        self._replicas: ReadReplicas | None = ReadReplicas(config)
        self._retired_replicas: list[ReadReplicas] = []

    @property
    def hooks(self) -> Hooks:
        return self._hooks

    @hooks.setter
    def hooks(self, value: Hooks) -> None:
        """The host's hooks, told whether ``ingest.progress_batches`` wants per-batch progress."""
        if not self.config.ingest.progress_batches:
            value.batch_progress = False
        self._hooks = value

    @property
    def embedder(self) -> Embedder:
        """The configured embedder, built on first use (a host-supplied one is used as given)."""
        if self._embedder is None:
            from context_engine.embeddings.factory import build_embedder

            self._embedder = build_embedder(self.config.embedding, self.http_client_factory)
        return self._embedder

    def page_transcriber(self) -> PageTranscriber | None:
        """``vision_llm``'s transcriber for one ingest on the running loop; None when it is not configured.

        The model client is built on first use (a missing setting raises ``ConfigError`` naming it)
        and shared by every ingest after that.
        """
        config = self.config.vision_llm
        if config is None:
            return None
        from context_engine.ingest.formats.page_transcriber import PageTranscriber, build_vision_llm

        if self._vision_llm is None:
            self._vision_llm = build_vision_llm(config, self.http_client_factory)
        return PageTranscriber(self._vision_llm, config, asyncio.get_running_loop())

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
                    trigram=self.config.fusion.trigram_enabled,
                    halfvec=self.config.storage.hnsw_halfvec,
                    document_fts=self.config.fusion.document_fts_enabled,
                )
                self.text_search_config = report.text_search_config
            else:
                self.text_search_config = await self._check_schema(db)
            self._schema_checked = True
        return db

    async def reads(self) -> AsyncEngine:
        """The pool in autocommit, for plain reads: a single statement then costs one round trip,
        not BEGIN, statement and ROLLBACK (under load each is a wake-up of both processes)."""
        db = await self.read_db()  # the read replica a read was given, else the writer
        view = self._reads.get(db)
        if view is None:
            view = self._reads[db] = db.execution_options(isolation_level="AUTOCOMMIT")
        return view

    async def _check_schema(self, db: AsyncEngine) -> str:
        try:
            async with db.connect() as conn:
                meta = (await conn.execute(text("SELECT key, value FROM ce_meta"))).all()
                rows: dict[str, str] = {str(key): str(value) for key, value in meta}
        except ContextEngineError:
            raise  # unreachable (StorageUnavailable) says so itself
        except Exception as exc:
            busy = known_failure(exc)
            if busy is not None:
                raise busy from exc
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

    # ------------------------------------------------------------------ read replicas
    @property
    def replicas(self) -> ReadReplicas:
        """The read replicas of the current configuration (rebuilt when ``database.read_urls`` changes)."""
        urls = tuple(url.get_secret_value() for url in self.config.database.read_urls)
        if self._replicas is None or self._replicas.urls != urls:
            if self._replicas is not None:
                self._retired_replicas.append(self._replicas)  # closed with the engine
            self._replicas = ReadReplicas(self.config)
        return self._replicas

    async def read_db(self) -> AsyncEngine:
        """The pool a lag-tolerant read runs on: the one ``reading`` chose for it, else the writer's."""
        chosen = pinned()
        return chosen[0] if chosen is not None else await self.db()

    async def reading(
        self,
        work: Callable[[], Awaitable[T]],
        *,
        consistency: Consistency = "replica",
        as_of: object = None,
        min_revision: object = None,
        trusted: bool = True,
    ) -> tuple[T, str]:
        """Run the read ``work`` on one server and say which (``"primary"`` or ``"replica N"``).

        A replica must have applied ``min_revision`` and ``as_of`` (a state it has not reached cannot be
        read there): one that has not gets ``database.replica_wait_seconds`` to catch up, then the writer
        reads. A replica that fails is set aside and the read runs again on the writer. Both are the
        store's revisions (a non-trusted caller's handles already translated); ``trusted=False``
        keeps the store's numbers out of the refusal of a revision not reached.
        """
        if consistency not in ("replica", "primary"):
            raise InvalidRequest('consistency must be "replica" (a read replica may lag) or "primary" (the writer)')
        wanted = [r for r in (check_type(as_of), _check_min_revision(min_revision)) if r is not None]
        revision = max(wanted) if wanted else None
        writer = await self.db()  # the schema is checked (or migrated) on the writer first
        outer = pinned()
        if outer is not None and consistency == "replica":
            return await work(), outer[1]  # a read inside a read keeps its server
        replicas = self.replicas
        if consistency == "replica" and len(replicas):
            replica = await replicas.choose(revision, self.config.database.replica_wait_seconds)
            if replica is not None:
                try:
                    with pin(await replica.engine(), replica.name):
                        return await work(), replica.name
                except Exception as exc:
                    if not retry_on_writer(exc):
                        raise
                    replicas.failed(replica, exc)
        if isinstance(min_revision, int):  # as_of is checked by the read itself
            await _require_revision(writer, min_revision, trusted)
        with pin(writer, "primary"):
            return await work(), "primary"

    async def aclose(self) -> None:
        """Close the embedder the engine built (never a host's) and every pool."""
        if self._embedder is not None and self._owns_embedder:
            await self._embedder.aclose()
            self._embedder = None
        if self._vision_llm is not None:
            client, self._vision_llm = self._vision_llm, None
            await client.aclose()
        await self.database.aclose()
        for replicas in [*self._retired_replicas, *([self._replicas] if self._replicas else [])]:
            await replicas.aclose()
        self._replicas, self._retired_replicas = None, []


def _check_min_revision(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidRequest("min_revision must be a non-negative integer revision")
    return value


async def _require_revision(db: AsyncEngine, revision: int, trusted: bool = True) -> None:
    """``min_revision`` names a revision the writer has recorded (else no server could ever serve it)."""
    current = await current_revision(db)
    if revision > current and not trusted:
        raise InvalidRequest("min_revision is not a revision handle of this store (pass one a response gave you)")
    if revision > current:
        raise InvalidRequest(f"min_revision {revision} is beyond the current revision {current}")


class Shared(Generic[T]):
    """An attribute of a front object (the engine, a view's context) that is its ``services``' own of
    the same name: read there on every access, so no copy can go stale when one is replaced.
    ``writable`` lets an assignment replace it on the services; otherwise assigning is refused."""

    def __init__(self, doc: str | None = None, *, writable: bool = False):
        self.__doc__ = doc
        self.writable = writable
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> Shared[T]: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T: ...
    def __get__(self, obj: object | None, objtype: type | None = None) -> Shared[T] | T:
        if obj is None:
            return self
        value: T = getattr(_services_of(obj), self.name)
        return value

    def __set__(self, obj: object, value: T) -> None:
        if not self.writable:
            raise AttributeError(f"{self.name!r} is read from the services and cannot be set here")
        setattr(_services_of(obj), self.name, value)


def _services_of(obj: object) -> Services:
    services: Services = getattr(obj, "services")  # noqa: B009 - the owner's attribute, typed here
    return services
