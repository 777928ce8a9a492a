"""The store's revision as a caller is told it, and what each read replica has applied."""

from __future__ import annotations

from typing import Any

from context_engine.errors import ContextEngineError, InvalidRequest
from context_engine.operations.context import EngineContext
from context_engine.principals import Principals, resolve
from context_engine.revisions import view as revision_view
from context_engine.storage import repository as repo


async def revision(ctx: EngineContext, *, principals: Principals = None) -> int:
    """The store's current revision; for a non-trusted caller, the handle of its view's revision (the
    last one that changed a document it may read): docs/revisions.md, "What a caller is told"."""
    db = await ctx.db()
    caller = None if principals is None else resolve(principals)
    if caller is None:
        return await repo.current_revision(db)
    revs = await revision_view.for_caller(db, caller)
    return revs.told(await revision_view.view_revision(db, caller))


async def revision_handle(ctx: EngineContext, revision: int) -> int:
    """The handle non-trusted callers are told for the store's ``revision`` (a host's call: e.g. to
    give a tenant a revision the host recorded with ``revision()``)."""
    if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
        raise InvalidRequest("revision must be a non-negative integer")
    revs = await revision_view.for_caller(await ctx.db(), ())
    return revs.told(revision)


async def read_replicas(ctx: EngineContext) -> list[dict[str, Any]]:
    """Each configured read replica (``database.read_urls``): reachable or not, the revision it has
    applied and how many it is behind the writer. Asking also returns a reachable replica that had
    been set aside to the rotation. Empty when none is configured."""
    if not len(ctx.services.replicas):
        return []
    try:
        current: int | None = await revision(ctx)
    except ContextEngineError:
        current = None  # the writer is down: still say what each replica has
    return await ctx.services.replicas.status(current)
