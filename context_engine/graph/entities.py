"""Entities and relationships read from chunks by the language model, one call per batch of chunks.

Why batches: a call per chunk would multiply the cost by the chunk count, while one call for a
whole document would not fit a model's context. A batch closes at ``BATCH_CHUNKS`` chunks or
``BATCH_CHARS`` characters of chunk text, whichever comes first. Where the provider enforces the
schema (native or tool mode) a batch is asked exactly once and a reply that fails the schema fails
the extraction, with nothing written; only the prompt path gets ``structured_call``'s one re-ask.
The reply is checked here again after the schema: names are normalised, relationship endpoints
missing from a chunk's entity list are added to it, and self-loops are dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from context_engine.errors import ContextEngineError
from context_engine.graph.errors import GraphExtractionFailed
from context_engine.graph.normalize import name_key, normalise_name, normalise_type
from context_engine.hooks import ErrorEvent, Hooks
from context_engine.llm.base import LLMClient
from context_engine.llm.structured import structured_call

BATCH_CHUNKS = 8
BATCH_CHARS = 12_000
#: batches in flight at once for one document
CONCURRENT_BATCHES = 4
MAX_NAME_CHARS = 200
MAX_LABEL_CHARS = 60
MAX_EVIDENCE_CHARS = 500

#: the fixed relationship categories the model chooses from (``find_related`` and ``traverse`` filter on them)
CATEGORIES = (
    "HIERARCHICAL",
    "MEMBERSHIP",
    "OWNERSHIP",
    "CREATION",
    "SUPPLY",
    "LOCATION",
    "PARTNERSHIP",
    "TEMPORAL",
    "ASSOCIATION",
)

SCHEMA_NAME = "graph_facts"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "chunks": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "index": {"type": "integer"},
                    "entities": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"name": {"type": "string"}, "type": {"type": "string"}},
                        },
                    },
                    "relationships": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "source": {"type": "string"},
                                "target": {"type": "string"},
                                "category": {"type": "string", "enum": list(CATEGORIES)},
                                "label": {"type": "string"},
                                "evidence": {"type": "string"},
                            },
                        },
                    },
                },
            },
        }
    },
}

SYSTEM = (
    "You extract a knowledge graph from numbered passages. For each passage, list the named entities "
    "it mentions (people, organisations, products, systems, places, teams...) with a short upper-case "
    "type such as PERSON, ORG, PRODUCT, SYSTEM, PLACE or TEAM, and the relationships the passage states "
    "between two of them: source and target exactly as named in its entity list, a category from the "
    "allowed set, a short snake_case label (supplies, owns, reports_to) and the sentence that states it "
    "as evidence. Use only what the passage says. Answer every passage by its index, with empty lists "
    "when it names nothing."
)


@dataclass(frozen=True)
class ChunkText:
    chunk_id: int
    text: str


@dataclass(frozen=True)
class Relation:
    source: str
    target: str
    category: str
    label: str
    evidence: str


@dataclass
class ChunkFacts:
    """What one chunk states: entity name -> type, and relationships between those names."""

    chunk_id: int
    entities: dict[str, str] = field(default_factory=dict)
    relations: list[Relation] = field(default_factory=list)


@dataclass
class Extraction:
    facts: list[ChunkFacts]
    llm_calls: int
    batches: int
    tokens: int


def batches(chunks: Sequence[ChunkText]) -> list[list[ChunkText]]:
    """Consecutive chunks grouped up to ``BATCH_CHUNKS`` chunks or ``BATCH_CHARS`` characters."""
    out: list[list[ChunkText]] = []
    size = 0
    for chunk in chunks:
        if out and len(out[-1]) < BATCH_CHUNKS and size + len(chunk.text) <= BATCH_CHARS:
            out[-1].append(chunk)
            size += len(chunk.text)
        else:
            out.append([chunk])
            size = len(chunk.text)
    return out


def prompt(batch: Sequence[ChunkText]) -> str:
    return "\n\n".join(f"[{i}] {chunk.text}" for i, chunk in enumerate(batch))


async def extract(
    llm: LLMClient, chunks: Sequence[ChunkText], *, hooks: Hooks | None = None, document_id: str | None = None
) -> Extraction:
    """Every chunk's facts; ``GraphExtractionFailed`` if any batch fails (so the caller writes nothing).

    A failed batch is reported to ``hooks.on_error`` as ``entity_extraction`` (beside the model
    call's own ``structured_call*`` events)."""
    groups = batches(chunks)
    gate = asyncio.Semaphore(CONCURRENT_BATCHES)
    tokens = 0

    async def one(batch: list[ChunkText]) -> list[ChunkFacts]:
        nonlocal tokens
        async with gate:
            try:
                result = await structured_call(
                    llm, system=SYSTEM, user=prompt(batch), schema=SCHEMA, schema_name=SCHEMA_NAME, hooks=hooks
                )
            except ContextEngineError as exc:
                if hooks is not None:
                    context: dict[str, Any] = {"stage": "entity_extraction", "document_id": document_id}
                    context["chunks"] = len(batch)
                    context.update({k: exc.details[k] for k in ("mode", "attempts") if k in exc.details})
                    event = ErrorEvent("entity_extraction", SCHEMA_NAME, document_id, exc.code, exc.message,
                                       context.get("attempts"), context)  # fmt: skip
                    await hooks.emit("on_error", event)
                raise GraphExtractionFailed(
                    f"entity extraction failed ({exc.code}); the document keeps its chunks and no graph facts "
                    "were written: ingest it again in graph mode to retry"
                ) from exc
        tokens += result.tokens
        return parse_reply(result.value, batch)

    found = await asyncio.gather(*(one(batch) for batch in groups))
    facts = [item for group in found for item in group]
    return Extraction(facts=facts, llm_calls=len(groups), batches=len(groups), tokens=tokens)


def parse_reply(value: dict[str, Any], batch: Sequence[ChunkText]) -> list[ChunkFacts]:
    """The validated reply as per-chunk facts, in batch order; indexes outside the batch are ignored."""
    facts = [ChunkFacts(chunk.chunk_id) for chunk in batch]
    for item in value["chunks"]:
        index = item["index"]
        if not 0 <= index < len(batch):
            continue
        target = facts[index]
        for entity in item["entities"]:
            name = clean_name(entity["name"])
            if name:
                target.entities.setdefault(name, normalise_type(entity["type"]))
        for rel in item["relationships"]:
            source, dest = clean_name(rel["source"]), clean_name(rel["target"])
            if not source or not dest or source == dest:
                continue
            target.entities.setdefault(source, "OTHER")
            target.entities.setdefault(dest, "OTHER")
            label = "_".join(normalise_name(rel["label"]).split())[:MAX_LABEL_CHARS] or rel["category"].lower()
            evidence = " ".join(rel["evidence"].split())[:MAX_EVIDENCE_CHARS]
            relation = Relation(source, dest, rel["category"], label, evidence)
            if relation not in target.relations:
                target.relations.append(relation)
    return facts


def clean_name(raw: str) -> str:
    """The stored form of a name, or "" when it is blank, punctuation only or too long to be a name."""
    name = normalise_name(raw)
    if not name_key(name) or len(name) > MAX_NAME_CHARS:
        return ""
    return name
