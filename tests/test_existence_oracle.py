"""A caller cannot tell whether a document it may not read exists under a name: filing under that
name and renaming onto it answer the one generic conflict that a visible name gets, word for word,
through the engine and through the routes (409)."""

from __future__ import annotations

import pytest

from context_engine import TRUSTED, ContextEngine
from context_engine.errors import NameTaken
from tests.conftest import make_config
from tests.test_conformance import CLIENTS, Caller, HostLog, host_callables


async def test_hidden_and_visible_names_answer_alike(engine: ContextEngine) -> None:
    await engine.ingest(text="Salary bands for 2026.", name="bands.md", source_id="hr", acl=["group:hr"])
    mine = await engine.ingest(text="Team offsite plan.", name="offsite.md", source_id="hr", acl=["group:eng"])
    await engine.ingest(text="Team lunch menu.", name="lunch.md", source_id="hr", acl=["group:eng"])
    eng = ["group:eng"]
    with pytest.raises(NameTaken) as filed_hidden:
        await engine.ingest(text="Something else.", name="bands.md", source_id="hr", acl=["group:eng"], principals=eng)
    with pytest.raises(NameTaken) as renamed_hidden:
        await engine.update_document(mine.documents[0].document_id, name="bands.md", principals=eng)
    with pytest.raises(NameTaken) as renamed_visible:
        await engine.update_document(mine.documents[0].document_id, name="lunch.md", principals=eng)
    answers = {(e.value.status, e.value.code, e.value.message) for e in (filed_hidden, renamed_hidden, renamed_visible)}
    assert answers == {(409, "conflict", "a document with that name already exists in this source")}
    assert (await engine.stats(principals=TRUSTED)).documents == 3  # nothing was written


@pytest.mark.parametrize("adapter", ["fastapi", "flask", "django"])
def test_over_http_both_are_the_same_409(database_url: str, adapter: str) -> None:
    engine = ContextEngine(make_config(database_url))
    auth, principals = host_callables(HostLog())
    with CLIENTS[adapter](engine, auth, principals) as send:
        call = Caller(send)
        assert call("POST", "/documents", who="group:hr", json_body={
            "text": "Salary bands.", "name": "bands.md", "source_id": "hr", "acl": ["group:hr"]}).status == 201
        own = call("POST", "/documents", who="group:eng", json_body={
            "text": "Offsite plan.", "name": "offsite.md", "source_id": "hr", "acl": ["group:eng"]})
        doc_id = own.body["documents"][0]["document_id"]
        filed = call("POST", "/documents", who="group:eng", json_body={
            "text": "Other text.", "name": "bands.md", "source_id": "hr", "acl": ["group:eng"]})
        renamed = call("PATCH", f"/documents/{doc_id}", who="group:eng", json_body={"name": "bands.md"})
    assert (filed.status, filed.body) == (renamed.status, renamed.body)
    assert filed.status == 409 and filed.body["error"]["code"] == "conflict"
