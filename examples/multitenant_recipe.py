"""Recipe: one store, several audiences, one question.

An HR policy filed under ``group:hr``, an engineering runbook under ``group:eng`` and a public
holidays page with no ACL. The same question asked four ways shows what each caller gets:

- an HR member: the holidays and the HR policy
- an engineer: the holidays and the runbook
- anonymous (``principals=[]``): the holidays only
- ``TRUSTED`` (an internal job, no ACL applied): all three

The ACL is applied inside the SQL of every read, so a document a caller may not see is never
fetched, ranked or counted for them. Run it on the embedded PostgreSQL default::

    python examples/multitenant_recipe.py

(``CE_DATABASE_URL`` points it at your own server instead.) Everything is filed under its own
source, so re-runs are idempotent and other documents in the same store do not show up here.
"""

from __future__ import annotations

import asyncio
from typing import Any

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig

SOURCE = "multitenant-recipe"
QUESTION = "what are the holidays and policies"

DOCUMENTS: dict[str, tuple[str, list[str]]] = {
    "hr-policy": (
        "# Leave policy\n\nEvery employee accrues 25 days of paid leave a year. Parental leave lasts 16 weeks.",
        ["group:hr"],
    ),
    "eng-runbook": (
        "# Failover runbook\n\nPromote the standby database, then repoint the service's connection string.",
        ["group:eng"],
    ),
    "public-holidays": (
        "# Public holidays\n\nThe office is closed on New Year's Day, Midsummer and Christmas Day.",
        [],
    ),
}

#: who asks, and the principals the host's resolver would hand the engine for them
CALLERS: dict[str, Any] = {
    "hr": ["group:hr"],
    "engineer": ["group:eng"],
    "anonymous": [],
    "trusted": TRUSTED,
}


async def seed(engine: ContextEngine) -> dict[str, str]:
    """File the three documents (as a trusted loader); returns name -> document id."""
    ids: dict[str, str] = {}
    for name, (text, acl) in DOCUMENTS.items():
        report = await engine.ingest(text=text, name=name, acl=acl, source_id=SOURCE, principals=TRUSTED)
        doc = report.documents[0]
        if doc.status not in ("completed", "skipped") or doc.document_id is None:
            raise RuntimeError(f"could not ingest {name}: {doc.failure_message}")
        ids[name] = doc.document_id
    return ids


async def ask(engine: ContextEngine, principals: Any, question: str = QUESTION) -> set[str]:
    """The names of the documents whose passages answer ``question`` for this caller."""
    result = await engine.search(question, principals=principals, source_ids=[SOURCE], top_k=50)
    return {hit.document_name for hit in result.hits}


async def run_recipe(engine: ContextEngine) -> dict[str, set[str]]:
    """Seed the store, then ask the one question as each caller; caller -> document names."""
    await seed(engine)
    return {caller: await ask(engine, principals) for caller, principals in CALLERS.items()}


async def main() -> None:
    async with ContextEngine(ContextEngineConfig.from_env()) as engine:
        answers = await run_recipe(engine)
    print(f"Q: {QUESTION}")
    for caller, names in answers.items():
        print(f"  {caller:<10} sees {', '.join(sorted(names)) or 'nothing'}")


if __name__ == "__main__":
    asyncio.run(main())
