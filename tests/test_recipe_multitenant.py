"""The multi-tenant recipe: each caller's answer, and every other read, stay inside their ACL."""

from __future__ import annotations

from typing import Any

import pytest

from context_engine import TRUSTED, ContextEngine, NotFound
from examples.multitenant_recipe import CALLERS, DOCUMENTS, QUESTION, SOURCE, ask, run_recipe, seed

EXPECTED = {
    "hr": {"public-holidays", "hr-policy"},
    "engineer": {"public-holidays", "eng-runbook"},
    "anonymous": {"public-holidays"},
    "trusted": {"public-holidays", "hr-policy", "eng-runbook"},
}


async def test_one_question_four_callers(engine: ContextEngine) -> None:
    assert await run_recipe(engine) == EXPECTED


@pytest.mark.parametrize("caller", list(CALLERS))
async def test_every_read_stays_inside_the_callers_acl(engine: ContextEngine, caller: str) -> None:
    ids = await seed(engine)
    # a document outside the recipe's source must not leak into its answers either
    await engine.ingest(text="Unrelated holidays policy memo.", name="elsewhere", source_id="other", acl=[])
    principals: Any = CALLERS[caller]
    visible = EXPECTED[caller]

    assert await ask(engine, principals) == visible
    assert await ask(engine, principals, "runbook failover standby database") <= visible
    assert await ask(engine, principals, "parental leave weeks") <= visible

    page = await engine.list_documents(principals=principals, source_ids=[SOURCE], limit=500)
    assert {d.name for d in page.documents} == visible and page.next_cursor is None
    everything = await engine.list_documents(principals=principals, limit=500)
    assert {d.name for d in everything.documents} - {"elsewhere"} == visible

    for name, doc_id in ids.items():
        if name in visible:
            doc = await engine.get_document(doc_id, principals=principals)
            assert doc.name == name and doc.acl == sorted(DOCUMENTS[name][1])
        else:
            with pytest.raises(NotFound) as info:
                await engine.get_document(doc_id, principals=principals)
            assert info.value.message == f"document {doc_id} not found"  # reads exactly like a missing id

    stats = await engine.stats(principals=principals, source_ids=[SOURCE])
    assert stats.documents == len(visible) and stats.sources == {SOURCE: len(visible)}
    assert stats.by_status == {"completed": len(visible)}


async def test_the_recipe_is_idempotent(engine: ContextEngine) -> None:
    first = await seed(engine)
    assert await seed(engine) == first
    assert await ask(engine, TRUSTED, QUESTION) == EXPECTED["trusted"]
