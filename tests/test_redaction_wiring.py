"""Redaction placement: ingest rules scrub before storage, output rules on every read path."""

from __future__ import annotations

import warnings

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from context_engine import TRUSTED, ContextEngine
from context_engine.redaction import RedactionConfigError, RedactionPolicy, RedactionRule
from tests.conftest import make_config

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated()

EMAIL = "dana.scully@fbi.example.com"
PHONE = "+1 415 555 0123"
CARD = "4111 1111 1111 1111"
BODY = (
    f"# Contact\n\nReach the case officer at {EMAIL} or {PHONE}.\n\n"
    f"# Billing\n\nThe expense card on file is {CARD} for travel."
)
RAW = (EMAIL, PHONE, CARD)

OUTPUT = RedactionPolicy(
    rules=[
        RedactionRule(name="email", detector="email"),
        RedactionRule(name="phone", detector="phone"),
        RedactionRule(name="card", detector="credit_card"),
    ]
)


def _clean(value: object) -> bool:
    text = repr(value) if not isinstance(value, str) else value
    return not any(raw in text for raw in RAW)


async def test_every_engine_read_path_applies_the_output_policy(database_url: str) -> None:
    config = make_config(database_url, redaction=OUTPUT)
    async with ContextEngine(config) as engine:
        report = await engine.ingest(
            text=BODY, name=f"notes for {EMAIL}", attributes={"owner": EMAIL, "tags": [PHONE]}
        )
        doc_id = report.documents[0].document_id
        assert _clean(report.model_dump())
        hits = (await engine.search("case officer expense card", principals=TRUSTED, top_k=5)).hits
        assert hits and all(_clean(h.model_dump()) for h in hits)
        assert any("[EMAIL]" in h.chunk_text for h in hits) and any("[CARD]" in h.chunk_text for h in hits)
        doc = await engine.get_document(doc_id, principals=TRUSTED)
        assert _clean(doc.model_dump()) and "[PHONE]" in (doc.text or "")
        page = await engine.list_documents(principals=TRUSTED)
        assert _clean(page.model_dump())
        updated = await engine.update_document(doc_id, principals=TRUSTED, attributes={"owner": EMAIL})
        assert _clean(updated.model_dump())
        assert _clean((await engine.stats(principals=TRUSTED)).model_dump())


async def test_routes_apply_a_per_request_policy(database_url: str) -> None:
    from context_engine import create_router

    async with ContextEngine(make_config(database_url)) as engine:
        await engine.ingest(text=BODY, name="notes", attributes={"owner": EMAIL})
        app = FastAPI()
        app.include_router(
            create_router(
                engine,
                auth=lambda request: True,
                principals=lambda request: TRUSTED,
                redaction=lambda request: OUTPUT if request.headers.get("x-tenant") == "strict" else None,
            )
        )
        with TestClient(app) as client:
            strict = {"x-tenant": "strict"}
            search = client.post("/search", json={"query": "case officer card"}, headers=strict).json()
            listed = client.get("/documents", headers=strict).json()
            doc_id = listed["documents"][0]["id"]
            got = client.get(f"/documents/{doc_id}", headers=strict).json()
            patched = client.patch(f"/documents/{doc_id}", json={"attributes": {"o": EMAIL}}, headers=strict).json()
            for body in (search, listed, got, patched):
                assert _clean(body), body
            open_search = client.post("/search", json={"query": "case officer card"}).json()
            assert not _clean(open_search)  # no policy for this tenant: clear text


async def test_default_policy_changes_nothing(engine: ContextEngine) -> None:
    report = await engine.ingest(text=BODY, name="notes")
    doc = await engine.get_document(report.documents[0].document_id, principals=TRUSTED)
    assert doc.text is not None and EMAIL in doc.text and CARD in doc.text
    hits = (await engine.search("case officer", principals=TRUSTED)).hits
    assert any(EMAIL in h.chunk_text for h in hits)
    red = engine.output_redactor(None, None, None)
    sample = f"x {EMAIL} y"
    assert red.noop and red.text(sample) is sample


async def test_ingest_rules_leave_no_raw_value_in_any_table(database_url: str) -> None:
    policy = RedactionPolicy(
        rules=[
            RedactionRule(name="email", detector="email", apply_at="ingest"),
            RedactionRule(name="phone", detector="phone", apply_at="both"),
            RedactionRule(name="card", detector="credit_card", apply_at="ingest", action="remove"),
        ]
    )
    async with ContextEngine(make_config(database_url, redaction=policy)) as engine:
        await engine.ingest(text=BODY, name=f"about {EMAIL}", attributes={"contact": PHONE})
        csv_data = f"name,email,card\nDana,{EMAIL},{CARD}\n".encode()
        await engine.ingest(file=csv_data, name="people.csv")
    with psycopg.connect(database_url) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        for table in tables:
            for raw in RAW:
                found = conn.execute(
                    f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE %s', (f"%{raw}%",)
                ).fetchone()
                assert found == (0,), (table, raw)
        # the tsvector was built from scrubbed text as well
        lexemes = conn.execute("SELECT string_agg(tsv::text, ' ') FROM ce_chunks").fetchone()[0]
        assert "scully" not in lexemes


async def test_tenant_views_hash_with_their_own_keys(database_url: str) -> None:
    hashing = RedactionPolicy(rules=[RedactionRule(name="email", detector="email", action="hash")])
    async with ContextEngine(make_config(database_url)) as engine:
        await engine.ingest(text=BODY, name="notes")
        tenant_a = engine.with_redaction(hashing, secret_key="key-a")
        tenant_b = engine.with_redaction(hashing, secret_key="key-b")
        a = (await tenant_a.search("case officer", principals=TRUSTED, top_k=1)).hits[0].chunk_text
        b = (await tenant_b.search("case officer", principals=TRUSTED, top_k=1)).hits[0].chunk_text
        again = (await tenant_a.search("case officer", principals=TRUSTED, top_k=1)).hits[0].chunk_text
        assert EMAIL not in a and EMAIL not in b
        assert a != b and a == again
        await tenant_a.aclose()  # closing a view closes nothing
        assert (await engine.stats(principals=TRUSTED)).documents == 1
        # the same pair per call
        per_call = await engine.search(
            "case officer", principals=TRUSTED, top_k=1, redaction=hashing, redaction_secret_key="key-a"
        )
        assert per_call.hits[0].chunk_text == a


async def test_unless_lets_listed_principals_see_clear_text(database_url: str) -> None:
    policy = RedactionPolicy(rules=[RedactionRule(name="email", detector="email", unless=["group:legal"])])
    async with ContextEngine(make_config(database_url, redaction=policy)) as engine:
        await engine.ingest(text=BODY, name="notes")
        legal = (await engine.search("case officer", principals=["group:legal"], top_k=1)).hits[0]
        other = (await engine.search("case officer", principals=["group:ops"], top_k=1)).hits[0]
    assert EMAIL in legal.chunk_text and EMAIL not in other.chunk_text


def test_hash_keys_fall_back_with_a_warning_or_are_refused(database_url: str) -> None:
    hashing = RedactionPolicy(rules=[RedactionRule(name="email", detector="email", action="hash")])
    with pytest.raises(RedactionConfigError):
        ContextEngine(make_config(database_url, redaction=hashing))
    with pytest.warns(UserWarning, match="secret_key"):
        ContextEngine(make_config(database_url, redaction=hashing, secret_key="shared"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ContextEngine(make_config(database_url, redaction=hashing, redaction_secret_key="k"))
    plain = ContextEngine(make_config(database_url))
    with pytest.raises(RedactionConfigError):
        plain.with_redaction(hashing)
