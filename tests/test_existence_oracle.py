"""A caller cannot tell whether a document it may not read exists under a name: names are unique
per visibility, so filing or renaming onto a hidden document's ``(source_id, name)`` answers
exactly as a free name does (the caller's own, separate document), the hidden document is left
untouched, and the only name conflict left is with a document the caller may see."""

from __future__ import annotations

import re
from typing import Any

import pytest

from context_engine import TRUSTED, ContextEngine
from context_engine.errors import NameTaken
from tests.conftest import make_config
from tests.test_conformance import CLIENTS, Caller, HostLog, host_callables


async def test_a_hidden_name_answers_like_a_free_one(engine: ContextEngine) -> None:
    hidden = await engine.ingest(text="Salary bands for 2026.", name="bands.md", source_id="hr", acl=["group:hr"])
    hidden_id = hidden.documents[0].document_id
    mine = await engine.ingest(text="Team offsite plan.", name="offsite.md", source_id="hr", acl=["group:eng"])
    await engine.ingest(text="Team lunch menu.", name="lunch.md", source_id="hr", acl=["group:eng"])
    eng = ["group:eng"]
    on_hidden = await engine.ingest(text="Something else.", name="bands.md", source_id="hr", acl=eng, principals=eng)
    on_free = await engine.ingest(text="Something new.", name="free.md", source_id="hr", acl=eng, principals=eng)
    shape = [
        {k: v for k, v in r.documents[0].model_dump().items() if k not in ("document_id", "name", "revision")}
        for r in (on_hidden, on_free)
    ]
    assert shape[0] == shape[1] and shape[0]["status"] == "completed" and shape[0]["version"] == 1
    assert on_hidden.documents[0].document_id != hidden_id
    untouched = await engine.get_document(hidden_id, principals=TRUSTED)
    assert (untouched.text, untouched.acl, untouched.version) == ("Salary bands for 2026.", ["group:hr"], 1)
    # renaming onto the hidden name succeeds as onto a free one; onto a name this caller sees, with the
    # same ACL, it is the one conflict (about a document the caller can read)
    renamed = await engine.update_document(mine.documents[0].document_id, name="bands-2.md", principals=eng)
    assert renamed.name == "bands-2.md"
    await engine.update_document(on_hidden.documents[0].document_id, name="old-bands.md", principals=eng)
    onto_hidden = await engine.update_document(renamed.id, name="bands.md", principals=eng)
    assert onto_hidden.name == "bands.md"
    with pytest.raises(NameTaken) as visible:
        await engine.update_document(renamed.id, name="lunch.md", principals=eng)
    assert (visible.value.status, visible.value.code) == (409, "conflict")
    # the holder of the hidden name still sees only its own document under it
    hr_view = await engine.list_documents(principals=["group:hr"])
    assert [(d.id, d.name) for d in hr_view.documents] == [(hidden_id, "bands.md")]
    assert (await engine.stats(principals=TRUSTED)).documents == 5


async def test_one_caller_seeing_two_holders_must_say_which(engine: ContextEngine) -> None:
    await engine.ingest(text="HR copy.", name="guide.md", source_id="s", acl=["group:hr"])
    await engine.ingest(text="Eng copy.", name="guide.md", source_id="s", acl=["group:eng"], principals=["group:eng"])
    both = ["group:eng", "group:hr"]
    with pytest.raises(NameTaken) as ambiguous:
        await engine.ingest(text="Merged.", name="guide.md", source_id="s", acl=both, principals=both)
    assert ambiguous.value.code == "conflict" and "ACL" in ambiguous.value.message
    chosen = await engine.ingest(text="Eng copy, revised.", name="guide.md", source_id="s", acl=["group:eng"],
                                 principals=both)
    assert chosen.documents[0].version == 2


def _same_shape(reply: Any) -> Any:
    return re.sub(r'"(document_id|name|revision)": ?("[^"]*"|\d+)', r'"\1": "X"', reply.raw.decode())


@pytest.mark.parametrize("adapter", ["fastapi", "flask", "django"])
def test_over_http_a_hidden_name_is_a_free_name(database_url: str, adapter: str) -> None:
    engine = ContextEngine(make_config(database_url))
    auth, principals = host_callables(HostLog())
    with CLIENTS[adapter](engine, auth, principals) as send:
        call = Caller(send)
        assert call("POST", "/documents", who="group:hr", json_body={
            "text": "Salary bands.", "name": "bands.md", "source_id": "hr", "acl": ["group:hr"]}).status == 201
        hidden = call("POST", "/documents", who="group:eng", json_body={
            "text": "Other text.", "name": "bands.md", "source_id": "hr", "acl": ["group:eng"]})
        free = call("POST", "/documents", who="group:eng", json_body={
            "text": "Other text!", "name": "unused.md", "source_id": "hr", "acl": ["group:eng"]})
        assert (hidden.status, _same_shape(hidden)) == (free.status, _same_shape(free))
        assert hidden.status == 201
        listed = call("GET", "/documents", who="group:hr")
        assert [d["name"] for d in listed.body["documents"]] == ["bands.md"]
        assert listed.body["documents"][0]["version"] == 1
