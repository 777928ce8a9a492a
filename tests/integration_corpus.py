"""A small two-audience corpus for the framework retriever tests (LangChain and LlamaIndex).

HR and engineering each have their own leave documents, all matching the same question, so a
caller seeing the other audience's text in a chain's prompt is a leak, not a ranking accident.
"""

from __future__ import annotations

from typing import Any

from context_engine import TRUSTED, ContextEngine

SOURCE = "handbook"
OTHER_SOURCE = "wiki"
QUESTION = "how many days of annual leave"
HR = ["group:hr"]
ENG = ["group:eng"]

#: name -> (text, acl, source)
DOCUMENTS: dict[str, tuple[str, list[str], str]] = {
    "hr-leave": ("# Annual leave\n\nStaff accrue 25 days of annual leave each year, HR-SECRET-ALPHA.", HR, SOURCE),
    "hr-carry": ("# Carry over\n\nUp to five days of annual leave carry over, HR-SECRET-BRAVO.", HR, SOURCE),
    "hr-parental": ("# Parental leave\n\nParental leave lasts 16 weeks of paid leave, HR-SECRET-CHARLIE.", HR, SOURCE),
    "hr-sick": ("# Sick leave\n\nSick leave days do not reduce annual leave, HR-SECRET-DELTA.", HR, OTHER_SOURCE),
    "eng-oncall": ("# On call\n\nOne day of annual leave after each on-call week, ENG-SECRET-ECHO.", ENG, SOURCE),
    "eng-freeze": ("# Release freeze\n\nNo annual leave days during the release freeze, ENG-SECRET-FOXTROT.", ENG,
                   SOURCE),
}
HR_MARKERS = ("HR-SECRET-ALPHA", "HR-SECRET-BRAVO", "HR-SECRET-CHARLIE", "HR-SECRET-DELTA")
ENG_MARKERS = ("ENG-SECRET-ECHO", "ENG-SECRET-FOXTROT")


async def seed(engine: ContextEngine) -> dict[str, str]:
    """File every document as a trusted loader; returns name -> document id."""
    ids: dict[str, str] = {}
    for name, (text, acl, source) in DOCUMENTS.items():
        report = await engine.ingest(text=text, name=name, acl=acl, source_id=source, principals=TRUSTED)
        doc = report.documents[0]
        assert doc.status == "completed" and doc.document_id is not None, doc
        ids[name] = doc.document_id
    return ids


def names_for(principals: Any) -> set[str]:
    """The documents a caller may read."""
    held = set(principals)
    return {name for name, (_t, acl, _s) in DOCUMENTS.items() if not acl or held & set(acl)}
