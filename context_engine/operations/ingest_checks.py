"""The checks every ingested document passes, alone (``ingest``) or in a batch (``ingest_many``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from context_engine.errors import Forbidden, InvalidRequest
from context_engine.limits import MAX_ACL_ENTRIES, MAX_ACL_ENTRY_CHARS
from context_engine.principals import holds_acl
from context_engine.validation import check_text_list

#: the keywords a document of ``ingest_many`` may carry (those of ``ingest`` that describe one document)
BATCH_FIELDS = frozenset({"text", "file", "name", "source_id", "acl", "attributes", "mime", "idempotency_key"})


def check_acl(acl: Sequence[str] | None) -> list[str]:
    """An ACL as stored: its distinct principals, sorted (``None``: public)."""
    if acl is None:
        return []
    return sorted(set(check_text_list(acl, "acl", max_items=MAX_ACL_ENTRIES, max_chars=MAX_ACL_ENTRY_CHARS)))


def check_filing(acl: Sequence[str] | None, caller: tuple[str, ...] | None) -> list[str]:
    """The document's ACL, which the caller must hold: no one files a document it could not read."""
    acl_list = check_acl(acl)
    if not holds_acl(acl_list, caller):
        raise Forbidden("you may only file a document under an ACL you hold")
    return acl_list


def check_source_and_name(source_id: Any, name: Any) -> None:
    if not isinstance(source_id, str) or not source_id.strip():
        raise InvalidRequest("source_id must be a non-empty string")
    check_name(name)


def check_name(name: Any) -> None:
    """A document's name, when one is given, has a word in it."""
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InvalidRequest("name must be a non-empty string")


def default_mime(text: Any, name: str | None, mime: str | None) -> str | None:
    """Given text without a mime: HTML when its name says so, else Markdown."""
    if text is not None and mime is None:
        return "text/html" if name and name.lower().endswith((".html", ".htm")) else "text/markdown"
    return mime


def batch_fields(document: Any) -> dict[str, Any]:
    """One document of a batch: a mapping of ``ingest``'s keywords and no other."""
    if not isinstance(document, Mapping):
        raise InvalidRequest("each document must be a mapping of ingest's keywords")
    unknown = sorted(str(k) for k in document if k not in BATCH_FIELDS)
    if unknown:
        raise InvalidRequest(f"unknown document field(s): {', '.join(unknown)}")
    return dict(document)
