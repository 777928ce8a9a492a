"""Who may change a stored document: the one decision every write path asks.

Readable is not writable. A non-trusted caller may re-ingest (a new version, a new ACL), update or
delete an existing document only when its ACL names a principal the caller holds. A document with
an empty ACL is readable by everyone, so holding "a principal of its ACL" would mean nothing: it is
writable only by a trusted caller, by a principal the host lists in ``access.writers``, or as the
host's ``write_policy`` decides. Filing a new document is not a write of anything stored and is not
asked here (the caller must still hold the ACL it files under).

The decision is made with the document row locked, by the writer's own transaction, so an ACL
change that commits first is the one judged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from context_engine.errors import Forbidden


@dataclass(frozen=True)
class WriteTarget:
    """The stored document a write would change, as it stands now."""

    document_id: str
    source_id: str
    name: str
    acl: tuple[str, ...]


#: a host's rule: True allows, False refuses, None leaves the decision to the default rule. It is
#: called synchronously with the document's row locked: it must not wait on I/O.
WritePolicy = Callable[[WriteTarget, tuple[str, ...]], bool | None]

#: the one refusal of a write the caller may read but not change
REFUSAL = "you may read this document but not change or delete it"


@dataclass(frozen=True)
class WriteAccess:
    """The host's write rules: ``writers`` (principals that may change documents with an empty ACL)
    and an optional ``policy`` consulted first."""

    writers: tuple[str, ...] = ()
    policy: WritePolicy | None = None

    def allows(self, target: WriteTarget, principals: tuple[str, ...] | None) -> bool:
        """May ``principals`` (``None``: trusted) change ``target``?"""
        if principals is None:
            return True
        if self.policy is not None:
            verdict = self.policy(target, principals)
            if verdict is not None:
                return bool(verdict)
        held = set(principals)
        if target.acl:
            return bool(held.intersection(target.acl))
        return bool(held.intersection(self.writers))

    def check(self, target: WriteTarget, principals: tuple[str, ...] | None) -> None:
        """Raise ``Forbidden`` (403) unless the write is allowed."""
        if not self.allows(target, principals):
            raise Forbidden(REFUSAL)


def target_of(row: dict[str, Any]) -> WriteTarget:
    """A :class:`WriteTarget` from a document row (``id``, ``source_id``, ``name``, ``acl``)."""
    acl: Sequence[str] = row.get("acl") or ()
    return WriteTarget(str(row["id"]), str(row["source_id"]), str(row["name"]), tuple(str(a) for a in acl))
