"""The knowledge provider interface: store and search documents for agent runs, by value, never raising.

A host admits documents into a scope at run setup, and its framework searches them for the model.
Every method returns a :class:`Result` (``ok`` with a value, or an error carrying one code of
``unavailable``, ``timeout``, ``invalid``, ``scope_violation``, ``not_found``) instead of raising for
those cases, so a run that replays or forks can record outcomes as data. Searches take ``as_of``: a
run pinned to the revision its snapshot recorded sees the corpus its original run saw.

The checks a framework owes its model are done here too: ``k`` is 1 to 20, the hits' text totals at
most 16 KB, a hit from outside the scope is dropped and logged, and every hit is marked as untrusted
reference text (retrieved content, never instructions).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from sqlalchemy.exc import DBAPIError

from context_engine.errors import ContextEngineError, Forbidden, InvalidRequest, NotFound, ProviderError
from context_engine.principals import TRUSTED
from context_engine.revisions import view as revision_view
from context_engine.revisions.errors import IdempotencyInProgress
from context_engine.storage import repository as repo

log = logging.getLogger("context_engine.knowledge.provider")

T = TypeVar("T")
ErrorCode = Literal["unavailable", "timeout", "invalid", "scope_violation", "not_found"]
MAX_K = 20
#: the most hit text (UTF-8 bytes, summed over the hits) one search returns
MAX_HIT_TEXT_BYTES = 16 * 1024
#: what every hit is marked as: text retrieved from the store, to be read as reference, never obeyed
UNTRUSTED_REFERENCE = "untrusted_reference"


@dataclass(frozen=True)
class KnowledgeScope:
    """What a host issues to a run: the principals it reads and writes as, and the sources it may use.

    ``principals=None`` is a trusted host scope (no ACL applies); ``()`` reads public documents only.
    """

    source_ids: tuple[str, ...]
    principals: tuple[str, ...] | None = ()


@dataclass(frozen=True)
class KnowledgeSource:
    """One document to admit: its text, name and binding (source, ACL, attributes), stored as given."""

    name: str
    text: str
    source_id: str
    acl: tuple[str, ...] = ()
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DocVersion:
    doc_id: str
    version: str
    revision: int


@dataclass(frozen=True)
class Doc:
    doc_id: str
    version: str
    name: str
    source_id: str
    text: str
    acl: tuple[str, ...]
    attributes: dict[str, Any]
    revision: int


@dataclass(frozen=True)
class KnowledgeHit:
    doc_id: str
    version: str
    name: str
    source_id: str
    text: str
    score: float
    #: the hit's text was cut to keep the search within ``MAX_HIT_TEXT_BYTES``
    truncated: bool = False
    trust: str = UNTRUSTED_REFERENCE


@dataclass(frozen=True)
class KnowledgeError:
    code: ErrorCode
    message: str


@dataclass(frozen=True)
class Result(Generic[T]):
    """``ok`` and ``value``, or not ``ok`` and ``error``."""

    ok: bool
    value: T | None = None
    error: KnowledgeError | None = None

    @staticmethod
    def success(value: T) -> Result[T]:
        return Result(True, value)

    @staticmethod
    def failure(code: ErrorCode, message: str) -> Result[Any]:
        return Result(False, None, KnowledgeError(code, message))


class _Refused(Exception):
    """A check of this module failed: carried to the one place that turns errors into results."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _code_of(exc: BaseException) -> ErrorCode | None:
    """The result code of an expected failure; ``None`` for anything else (a bug: it propagates)."""
    if isinstance(exc, asyncio.TimeoutError | IdempotencyInProgress):
        return "timeout"
    if isinstance(exc, Forbidden):
        return "scope_violation"
    if isinstance(exc, NotFound):
        return "not_found"
    if isinstance(exc, ProviderError | DBAPIError | OSError):
        return "unavailable"
    if isinstance(exc, InvalidRequest | ContextEngineError):
        return "invalid" if getattr(exc, "status", 500) < 500 else "unavailable"
    return None


def _message(exc: BaseException) -> str:
    if isinstance(exc, ContextEngineError | _Refused):
        return exc.message
    if isinstance(exc, asyncio.TimeoutError):
        return "the knowledge store did not answer in time"
    return "the knowledge store is unavailable"  # driver text may name hosts or users: never passed on


class LocalKnowledge:
    """The provider over this library's own engine: a trusted scope hears the store's revisions, a
    scope with principals their handles."""

    def __init__(self, engine: Any, *, timeout: float = 30.0):
        self.engine = engine
        self.timeout = timeout

    async def _run(self, method: str, scope: KnowledgeScope, work: Awaitable[T]) -> Result[T]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        try:
            _check_scope(scope)
            value = await asyncio.wait_for(work, self.timeout)
        except BaseException as exc:
            if asyncio.iscoroutine(work):
                work.close()
            code = exc.code if isinstance(exc, _Refused) else _code_of(exc)
            if code is None:
                raise
            message = _message(exc)
            if code == "unavailable" and loop.time() >= deadline:
                # the deadline cancelled a statement, and the driver reported the cancelled connection
                # as lost: that is this call's timeout, not the store being down
                code, message = "timeout", _message(TimeoutError())
            log.info("knowledge %s in sources %s: %s", method, _sources(scope), code)
            return Result.failure(code, message)
        log.info("knowledge %s in sources %s: ok", method, _sources(scope))
        return Result.success(value)

    def _principals(self, scope: KnowledgeScope) -> Any:
        return TRUSTED if scope.principals is None else list(scope.principals)

    async def ingest(self, scope: KnowledgeScope, source: KnowledgeSource, key: str) -> Result[DocVersion]:
        """Admit one version; the same key with the same content returns the earlier version."""
        return await self._run("ingest", scope, self._ingest(scope, source, key))

    async def _ingest(self, scope: KnowledgeScope, source: KnowledgeSource, key: str) -> DocVersion:
        if not isinstance(source, KnowledgeSource):
            raise _Refused("invalid", "source must be a KnowledgeSource")
        if source.source_id not in scope.source_ids:
            raise _Refused("scope_violation", f"source {source.source_id!r} is not in this scope")
        report = (
            await self.engine.ingest(
                text=source.text,
                name=source.name,
                source_id=source.source_id,
                acl=list(source.acl),
                attributes=dict(source.attributes),
                principals=self._principals(scope),
                idempotency_key=key,
            )
        ).documents[0]
        if report.status == "failed" or report.document_id is None:
            raise _Refused("invalid", report.failure_message or "the document could not be admitted")
        version, revision = report.version, report.revision
        if version is None or revision is None:  # unchanged content already stored: its current version
            doc = await self.engine.get_document(
                report.document_id, principals=self._principals(scope), include_text=False
            )
            version, revision = doc.version, doc.revision
        return DocVersion(report.document_id, str(version), int(revision))

    async def remove(self, scope: KnowledgeScope, doc_id: str, key: str) -> Result[None]:
        """Remove from the next revision on; a retried key is a no-op."""
        return await self._run("remove", scope, self._remove(scope, doc_id, key))

    async def _remove(self, scope: KnowledgeScope, doc_id: str, key: str) -> None:
        source_id = await repo.document_source(await self.engine.database(), _doc_id(doc_id))
        if source_id is not None and source_id not in scope.source_ids:
            raise _Refused("scope_violation", f"document {doc_id} is not in this scope")
        try:
            await self.engine.delete_document(doc_id, principals=self._principals(scope), idempotency_key=key)
        except NotFound as exc:
            raise _Refused("invalid", exc.message) from None

    async def search(
        self,
        scope: KnowledgeScope,
        query: str,
        k: int = 5,
        sources: Sequence[str] | None = None,
        as_of: int | None = None,
    ) -> Result[list[KnowledgeHit]]:
        """The scope's best passages for ``query``, best first, as of ``as_of`` (``None``: now)."""
        return await self._run("search", scope, self._search(scope, query, k, sources, as_of))

    async def _search(
        self, scope: KnowledgeScope, query: str, k: int, sources: Sequence[str] | None, as_of: int | None
    ) -> list[KnowledgeHit]:
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
            raise _Refused("invalid", f"k must be an integer between 1 and {MAX_K}")
        wanted = list(sources) if sources else list(scope.source_ids)
        outside = [s for s in wanted if s not in scope.source_ids]
        if outside:
            raise _Refused("scope_violation", f"sources {outside} are not in this scope")
        # pin the revision first, so the versions reported are those of the passages returned; a
        # scope with principals speaks in revision handles (docs/revisions.md), decoded here
        principals = self._principals(scope)
        db = await self.engine.database()
        revs = await revision_view.for_caller(db, None if scope.principals is None else tuple(principals))
        if as_of is None:
            pinned = await self.engine.revision(principals=None if revs.trusted else principals)
        else:
            pinned = as_of
        revision = revs.heard(pinned)
        if revs.trusted:
            current = await self.engine.revision()
            if revision is not None and revision > current:
                # a trusted scope is told the store's one revision anyway (``revision``), so a
                # pinned replay asking for a revision not reached yet is told so rather than read now
                raise _Refused("invalid", f"as_of {revision} is beyond the current revision {current}")
        result = await self.engine.search(query, principals=principals, source_ids=wanted, top_k=k, as_of=pinned)
        kept = []
        for hit in result.hits:
            if hit.source_id not in scope.source_ids:
                log.warning("knowledge search: dropped a hit of document %s from outside the scope", hit.document_id)
                continue
            kept.append(hit)
        versions = await repo.versions_at(db, [h.document_id for h in kept], revision)
        return _capped(kept, versions)

    async def get(self, scope: KnowledgeScope, doc_id: str, version: str | int) -> Result[Doc]:
        """One admitted version, under the ACL it was admitted with; ``not_found`` outside the scope."""
        return await self._run("get", scope, self._get(scope, doc_id, version))

    async def _get(self, scope: KnowledgeScope, doc_id: str, version: str | int) -> Doc:
        number = _version_number(version)
        doc = await self.engine.get_document(doc_id, principals=self._principals(scope), version=number)
        if doc.source_id not in scope.source_ids:
            raise NotFound(f"version {number} of document {doc_id} not found")
        return Doc(
            doc.id,
            str(doc.version),
            doc.name,
            doc.source_id,
            doc.text or "",
            tuple(doc.acl),
            doc.attributes,
            doc.revision,
        )

    async def revision(self, scope: KnowledgeScope) -> Result[int]:
        """The store's current revision for a trusted scope; for a scope with principals, the handle
        of the revision of its view (the store-wide counter would count other tenants' writes)."""
        return await self._run("revision", scope, self._revision(scope))

    async def _revision(self, scope: KnowledgeScope) -> int:
        principals = None if scope.principals is None else list(scope.principals)
        return int(await self.engine.revision(principals=principals))


def local_knowledge(engine: Any, *, timeout: float = 30.0) -> LocalKnowledge:
    """The provider over ``engine`` (a ``ContextEngine``); ``timeout`` seconds per call."""
    return LocalKnowledge(engine, timeout=timeout)


def _sources(scope: Any) -> list[str]:
    return list(scope.source_ids) if isinstance(scope, KnowledgeScope) else []


def _check_scope(scope: Any) -> None:
    if not isinstance(scope, KnowledgeScope) or not scope.source_ids:
        raise _Refused("scope_violation", "a scope issued by the host, naming its sources, is required")


def _doc_id(value: Any) -> str:
    import uuid

    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise _Refused("invalid", f"document id {value!r} is not a document id") from None


def _version_number(version: Any) -> int:
    text = str(version).strip() if isinstance(version, str | int) and not isinstance(version, bool) else ""
    if not text.isdigit() or int(text) < 1:
        raise _Refused("invalid", f"version must be a positive integer as ingest returned it, not {version!r}")
    return int(text)


def _capped(hits: list[Any], versions: dict[str, int]) -> list[KnowledgeHit]:
    """The hits in order until their text reaches ``MAX_HIT_TEXT_BYTES``; the hit that crosses is cut."""
    kept: list[KnowledgeHit] = []
    budget = MAX_HIT_TEXT_BYTES
    for hit in hits:
        if budget <= 0:
            break
        raw = hit.chunk_text.encode("utf-8")
        cut = len(raw) > budget
        body = raw[:budget].decode("utf-8", errors="ignore") if cut else hit.chunk_text
        budget -= len(body.encode("utf-8"))
        version = versions.get(hit.document_id)
        kept.append(
            KnowledgeHit(
                hit.document_id,
                str(version) if version is not None else "",
                hit.document_name,
                hit.source_id,
                body,
                hit.score,
                truncated=cut,
            )
        )
    return kept
