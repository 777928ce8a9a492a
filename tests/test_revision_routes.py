"""The revisioned corpus over HTTP, answered alike by FastAPI, Flask and Django: a retried delete
with the same ``Idempotency-Key`` returns the first delete's revision, a deleted document stays
readable as of an earlier revision and is gone at the current one, ``POST /search`` and
``POST /knowledge/query`` take the revision, and a bad revision is a 400."""

from __future__ import annotations

from typing import Any

import pytest

from context_engine import ContextEngine
from tests.conftest import make_config
from tests.test_conformance import ADAPTERS, CLIENTS, TOKEN, Caller, HostLog, fresh_database, host_callables


def transcript(adapter: str, pg_base_url: str) -> dict[str, Any]:
    with fresh_database(pg_base_url) as url:
        engine = ContextEngine(make_config(url))
        auth, principals = host_callables(HostLog())
        out: dict[str, Any] = {}
        with CLIENTS[adapter](engine, auth, principals) as send:
            call = Caller(send)
            made = call("POST", "/documents", json_body={
                "text": "Tide tables for the harbour.", "name": "tides.md", "acl": ["group:hr"]})
            doc_id = made.body["documents"][0]["document_id"]
            before = made.body["documents"][0]["revision"]
            out["renamed"] = call("PATCH", f"/documents/{doc_id}", json_body={"name": "tides-2026.md"})
            headers = {"Authorization": f"Bearer {TOKEN}", "X-Principals": "group:hr", "Idempotency-Key": "del-1"}
            out["deleted"] = send("DELETE", f"/context/documents/{doc_id}", None, headers)
            out["deleted_again"] = send("DELETE", f"/context/documents/{doc_id}", None, headers)
            out["now"] = call("GET", f"/documents/{doc_id}")
            out["then"] = call("GET", f"/documents/{doc_id}", query={"as_of": before})
            out["list_then"] = call("GET", "/documents", query={"as_of": before})
            out["search_then"] = call("POST", "/search", json_body={"query": "harbour tides", "as_of": before})
            out["search_now"] = call("POST", "/search", json_body={"query": "harbour tides"})
            out["knowledge_then"] = call(
                "POST", "/knowledge/query", json_body={"query": "harbour tides", "asOf": before, "expand": False}
            )
            out["future"] = call("POST", "/search", who="!trusted", json_body={"query": "harbour", "as_of": 10_000})
            # a caller is told handles, not the store's revisions: a number that is no handle of a
            # revision reached is refused with one sentence that names no number
            out["future_caller"] = call("POST", "/search", json_body={"query": "harbour", "as_of": 10_000})
            out["handle_then"] = call("GET", f"/documents/{doc_id}/versions", who="!trusted")
            out["negative"] = call("GET", "/documents", query={"as_of": -1})
    return out


@pytest.fixture(scope="module")
def transcripts(pg_base_url: str) -> dict[str, dict[str, Any]]:
    return {adapter: transcript(adapter, pg_base_url) for adapter in ADAPTERS}


def test_history_over_http(transcripts: dict[str, dict[str, Any]]) -> None:
    for adapter, t in transcripts.items():
        assert t["renamed"].status == 200, adapter
        assert t["deleted"].status == 200 and t["deleted_again"].body == t["deleted"].body
        assert t["now"].status == 404
        assert t["then"].status == 200 and t["then"].body["name"] == "tides.md"
        assert [d["name"] for d in t["list_then"].body["documents"]] == ["tides.md"]
        assert [h["document_name"] for h in t["search_then"].body["hits"]] == ["tides.md"]
        assert t["search_now"].body["hits"] == []
        assert [m["sourceName"] for m in t["knowledge_then"].body["matches"]] == ["tides.md"]
        assert t["future"].status == 400 and "beyond the current revision" in t["future"].body["error"]["message"]
        assert t["future_caller"].status == 400 and t["future_caller"].body["error"] == {
            "code": "invalid_request",
            "message": "as_of is not a revision handle of this store (pass one a response gave you)",
        }
        # the write response told the caller a handle, not the store's revision the trusted caller sees
        store_revisions = {v["valid_from"] for v in t["handle_then"].body["versions"]}
        assert t["then"].body["revision"] not in store_revisions | {0, 1, 2, 3}
        assert t["negative"].status == 400
    bodies = {a: {k: r.status for k, r in t.items()} for a, t in transcripts.items()}
    assert bodies["fastapi"] == bodies["flask"] == bodies["django"]
