"""A library call's ACL is held to the limits the HTTP request models enforce (``context_engine.limits``)."""

from __future__ import annotations

import pytest

from context_engine import TRUSTED, ContextEngine, InvalidRequest
from context_engine.limits import MAX_ACL_ENTRIES, MAX_ACL_ENTRY_CHARS


@pytest.mark.parametrize(
    ("acl", "message"),
    [
        (["group:hr", "a" * (MAX_ACL_ENTRY_CHARS + 1)], rf"acl\[1\] is longer than {MAX_ACL_ENTRY_CHARS} characters"),
        ([f"user:{i}" for i in range(MAX_ACL_ENTRIES + 1)], f"acl lists more than {MAX_ACL_ENTRIES} items"),
        (["group:\x00hr"], r"acl\[0\] must not contain NUL characters"),
        (["group:hr", " "], r"acl\[1\] must be a non-empty string"),
        ("group:hr", "acl must be a list of strings"),
    ],
)
async def test_ingest_refuses_an_acl_past_the_limits_and_stores_nothing(
    engine: ContextEngine, acl: object, message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        await engine.ingest(text="Quarterly figures.", name="q3", acl=acl)  # type: ignore[arg-type]
    many = await engine.ingest_many([{"text": "Quarterly figures.", "name": "q3", "acl": acl}])
    assert many.items[0].error is not None and many.items[0].error.code == "invalid_request"
    assert (await engine.list_documents(principals=TRUSTED)).documents == []


async def test_update_refuses_an_acl_past_the_limits_and_keeps_the_old_one(engine: ContextEngine) -> None:
    report = await engine.ingest(text="Quarterly figures.", name="q3", acl=["group:finance"])
    doc_id = report.documents[0].document_id
    assert doc_id is not None
    with pytest.raises(InvalidRequest, match=rf"acl\[0\] is longer than {MAX_ACL_ENTRY_CHARS} characters"):
        await engine.update_document(doc_id, principals=TRUSTED, acl=["a" * (MAX_ACL_ENTRY_CHARS + 1)])
    assert (await engine.get_document(doc_id, principals=TRUSTED, include_text=False)).acl == ["group:finance"]


async def test_an_acl_within_the_limits_is_stored_distinct_and_sorted(engine: ContextEngine) -> None:
    acl = ["user:b", "user:a", "user:b", "a" * MAX_ACL_ENTRY_CHARS]
    report = await engine.ingest(text="Quarterly figures.", name="q3", acl=acl)
    doc_id = report.documents[0].document_id
    assert doc_id is not None
    assert (await engine.get_document(doc_id, principals=TRUSTED, include_text=False)).acl == sorted(set(acl))
