"""What both framework retrievers share: the explicit caller, the search call and the hit records.

One search call and one serialisation (``search_wire``, the routes' own) sit behind the LangChain
and LlamaIndex retrievers, so their metadata is exactly what ``POST /search`` returns for the same
caller: redacted by the engine's output policy, never a field the routes would not send.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from context_engine.engine import ContextEngine
from context_engine.models import search_wire
from context_engine.principals import TRUSTED, Principals
from context_engine.sync_loop import run

GroupBy = Literal["chunk", "document"]


def explicit_caller(principals: Any) -> Principals:
    """Check a caller given to a retriever: ``TRUSTED``, or a list of principal strings (``[]`` is anonymous).

    ``None`` is refused rather than read as trusted (the engine's deprecated spelling), because a
    retriever built once and shared is exactly where a forgotten caller would become everyone.
    """
    if principals is TRUSTED:
        return TRUSTED
    if principals is None:
        raise TypeError(
            "a retriever needs an explicit caller: principals=[...] (the caller's groups; [] is anonymous) "
            "or principals=TRUSTED to skip the ACL on purpose"
        )
    if isinstance(principals, str | bytes) or not isinstance(principals, Iterable):
        raise TypeError("principals must be a list of strings or TRUSTED")
    values = list(principals)
    if not all(isinstance(value, str) for value in values):
        raise TypeError("principals must be strings")
    return values


@dataclass(frozen=True)
class Record:
    """One retrieved item, framework-neutral: its text, our score, the routes' fields as metadata."""

    id: str
    text: str
    score: float
    metadata: dict[str, Any]


@dataclass(frozen=True)
class SearchOptions:
    """The knobs of one retriever call (validated by ``engine.search`` like any other door)."""

    principals: Principals
    top_k: int
    source_ids: Sequence[str] | None = None
    group_by: GroupBy = "chunk"
    as_of: int | None = None


async def search_records(engine: ContextEngine, query: str, options: SearchOptions) -> list[Record]:
    """Search as ``options.principals`` and turn the wire shape into records, best first."""
    result = await engine.search(
        query,
        principals=options.principals,
        top_k=options.top_k,
        source_ids=options.source_ids,  # the engine checks it (a bare string is refused, not split)
        group_by=options.group_by,
        as_of=options.as_of,
    )
    wire = search_wire(result)
    if options.group_by == "document":
        return [_document_record(item) for item in wire["documents"]]
    return [_passage_record(hit) for hit in wire["hits"]]


def search_records_sync(engine: ContextEngine, query: str, options: SearchOptions) -> list[Record]:
    """The same search from synchronous code, on the library's one background loop."""
    return run(search_records(engine, query, options))


def _passage_record(hit: dict[str, Any]) -> Record:
    metadata = {key: value for key, value in hit.items() if key != "chunk_text"}
    return Record(id=f"{hit['document_id']}:{hit['chunk_id']}", text=hit["chunk_text"], score=hit["score"],
                  metadata=metadata)


def _document_record(document: dict[str, Any]) -> Record:
    """A document of a ``group_by="document"`` search: its best passages' text, their fields listed."""
    passages = document["passages"]
    metadata = {key: value for key, value in document.items() if key != "passages"}
    metadata["passages"] = [_passage_record(hit).metadata for hit in passages]
    text = "\n\n".join(hit["chunk_text"] for hit in passages)
    return Record(id=document["document_id"], text=text, score=document["score"], metadata=metadata)
