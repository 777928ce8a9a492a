"""Readable is not writable: a non-trusted caller changes (re-ingests, re-ACLs, renames) or deletes
only a document whose ACL names a principal it holds; a public document only as a trusted caller,
an ``access.writers`` principal, or as the host's ``write_policy`` says. The engine, ingest_many,
the knowledge provider and the routes of all three adapters answer alike."""

from __future__ import annotations

import pytest

from context_engine import TRUSTED, ContextEngine
from context_engine.errors import Forbidden, NotFound
from context_engine.knowledge.provider import KnowledgeScope, local_knowledge
from context_engine.write_access import REFUSAL, WriteTarget
from tests.conftest import make_config
from tests.test_conformance import CLIENTS, Caller, HostLog, host_callables

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated()


async def _doc(engine: ContextEngine, name: str, text: str, acl: list[str], source: str = "s") -> str:
    report = await engine.ingest(text=text, name=name, source_id=source, acl=acl, principals=TRUSTED)
    return report.documents[0].document_id  # type: ignore[return-value]


async def test_a_public_document_is_read_only_for_callers(engine: ContextEngine) -> None:
    doc = await _doc(engine, "holidays.md", "Public holidays: New Year and Midsummer.", [])
    for who in ([], ["group:eng"]):
        assert (await engine.get_document(doc, principals=who)).id == doc  # readable
        with pytest.raises(Forbidden) as deleted:
            await engine.delete_document(doc, principals=who)
        with pytest.raises(Forbidden) as reacled:
            await engine.update_document(doc, acl=list(who), principals=who)
        with pytest.raises(Forbidden) as refiled:
            await engine.ingest(text="Public holidays: none.", name="holidays.md", source_id="s", principals=who)
        # re-posting the stored content writes nothing: "unchanged", to any reader
        same = await engine.ingest(text="Public holidays: New Year and Midsummer.", name="holidays.md", source_id="s",
                                   principals=who)
        assert (same.documents[0].status, same.documents[0].skip_reason) == ("skipped", "unchanged")
        answers = {(e.value.status, e.value.code, e.value.message) for e in (deleted, reacled, refiled)}
        assert answers == {(403, "forbidden", REFUSAL)}
    many = await engine.ingest_many([{"text": "Holidays: none.", "name": "holidays.md", "source_id": "s"}],
                                    principals=[])
    assert many.items[0].report is None and many.items[0].error is not None
    assert many.items[0].error.code == "forbidden"
    current = await engine.get_document(doc, principals=TRUSTED)
    assert current.version == 1 and current.acl == [] and current.text == "Public holidays: New Year and Midsummer."
    assert await engine.delete_document(doc, principals=TRUSTED) > 0


async def test_an_acl_member_may_write_and_a_hidden_document_stays_missing(engine: ContextEngine) -> None:
    doc = await _doc(engine, "plan.md", "The roadmap lists launch dates.", ["group:eng", "group:pm"])
    with pytest.raises(NotFound):
        await engine.delete_document(doc, principals=["group:hr"])
    renamed = await engine.update_document(doc, name="plan-2026.md", principals=["group:pm"])
    assert renamed.name == "plan-2026.md"
    again = await engine.ingest(text="The roadmap lists new dates.", name="plan-2026.md", source_id="s",
                                acl=["group:eng"], principals=["group:eng"])
    assert again.documents[0].document_id == doc and again.documents[0].version == 3
    assert await engine.delete_document(doc, principals=["group:eng"]) > 0


async def test_writers_and_a_write_policy_open_public_documents(database_url: str) -> None:
    config = make_config(database_url)
    config.access.writers = ["role:editor"]
    calls: list[tuple[WriteTarget, tuple[str, ...]]] = []

    def policy(target: WriteTarget, principals: tuple[str, ...]) -> bool | None:
        calls.append((target, principals))
        if "role:banned" in principals:
            return False
        return True if target.source_id == "wiki" and "role:wiki" in principals else None

    async with ContextEngine(config, write_policy=policy) as engine:
        public = await _doc(engine, "faq.md", "Ask the front desk.", [])
        wiki = await _doc(engine, "home.md", "Welcome to the wiki.", [], source="wiki")
        updated = await engine.update_document(public, attributes={"k": "v"}, principals=["role:editor"])
        assert updated.attributes == {"k": "v"}
        with pytest.raises(Forbidden):  # the policy refuses before the writers list is consulted
            await engine.update_document(public, attributes={}, principals=["role:editor", "role:banned"])
        with pytest.raises(Forbidden):  # the policy has no opinion outside the wiki: the default rule refuses
            await engine.delete_document(public, principals=["role:wiki"])
        assert await engine.delete_document(wiki, principals=["role:wiki"]) > 0
        assert calls and calls[0][0].document_id == public and calls[0][0].acl == ()


async def test_the_knowledge_provider_is_refused_the_same_write(engine: ContextEngine) -> None:
    doc = await _doc(engine, "notes.md", "Shared run notes.", [], source="runs")
    provider = local_knowledge(engine)
    scope = KnowledgeScope(source_ids=("runs",), principals=("agent",))
    removed = await provider.remove(scope, doc, "k1")
    assert not removed.ok and removed.error is not None and removed.error.code == "scope_violation"
    assert (await engine.get_document(doc, principals=TRUSTED)).id == doc


@pytest.mark.parametrize("adapter", ["fastapi", "flask", "django"])
def test_routes_refuse_writes_of_what_the_caller_may_only_read(database_url: str, adapter: str) -> None:
    engine = ContextEngine(make_config(database_url))
    auth, principals = host_callables(HostLog())
    with CLIENTS[adapter](engine, auth, principals) as send:
        call = Caller(send)
        created = call("POST", "/documents", who="", json_body={"text": "Parking rules.", "name": "parking.md"})
        assert created.status == 201
        doc_id = created.body["documents"][0]["document_id"]
        refusals = [
            call("DELETE", f"/documents/{doc_id}", who=""),
            call("DELETE", f"/documents/{doc_id}", who="group:eng"),
            call("PATCH", f"/documents/{doc_id}", who="group:eng", json_body={"acl": ["group:eng"]}),
            call("POST", "/documents", who="", json_body={"text": "No parking.", "name": "parking.md"}),
        ]
        assert [(r.status, r.body) for r in refusals] == [
            (403, {"error": {"code": "forbidden", "message": REFUSAL}})
        ] * 4
        assert call("GET", f"/documents/{doc_id}", who="").body["version"] == 1
        mine = call("POST", "/documents", who="group:eng",
                    json_body={"text": "Eng rota.", "name": "rota.md", "acl": ["group:eng"]})
        rota = mine.body["documents"][0]["document_id"]
        assert call("DELETE", f"/documents/{rota}", who="group:hr").status == 404
        assert call("DELETE", f"/documents/{rota}", who="group:eng").status in (200, 204)
