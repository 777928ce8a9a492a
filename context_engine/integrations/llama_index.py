"""A LlamaIndex retriever over ``engine.search`` (the ``[llama-index]`` extra, ``llama-index-core``).

``ContextEngineRetriever(engine, principals=[...])`` returns ``NodeWithScore``s: a ``TextNode``
per passage (or per document with ``group_by="document"``) whose metadata holds the fields
``POST /search`` returns for it, redacted exactly as the routes redact, and our fused score. It
plugs into ``RetrieverQueryEngine`` and anything else that takes a LlamaIndex retriever.

The caller is never implicit: ``principals`` is required (``[]`` is anonymous, ``TRUSTED`` skips
the ACL on purpose, ``None`` is refused). LlamaIndex passes no per-call arguments to a
retriever, so build one per request (it holds no connection) or derive one with ``for_caller``.
Only the document name, section and page are shown to the model; the ids and scores stay in the
metadata for the application.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode

from context_engine.engine import ContextEngine
from context_engine.integrations.retrieval import (
    GroupBy,
    Record,
    SearchOptions,
    explicit_caller,
    search_records,
    search_records_sync,
)

#: metadata the model sees beside a passage's text
_SHOWN_TO_MODEL = ("document_name", "section", "page")


class ContextEngineRetriever(BaseRetriever):
    """Permission-aware hybrid retrieval as a LlamaIndex retriever (sync and async)."""

    def __init__(
        self,
        engine: ContextEngine,
        *,
        principals: Any,
        top_k: int = 4,
        source_ids: Sequence[str] | None = None,
        group_by: GroupBy = "chunk",
        as_of: int | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.engine = engine
        self.options = SearchOptions(
            principals=explicit_caller(principals),
            top_k=top_k,
            source_ids=source_ids,
            group_by=group_by,
            as_of=as_of,
        )
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def for_caller(self, principals: Any) -> ContextEngineRetriever:
        """The same retriever for another caller (cheap: it shares the engine)."""
        other = copy.copy(self)
        other.options = replace(self.options, principals=explicit_caller(principals))
        return other

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [_node(r) for r in search_records_sync(self.engine, query_bundle.query_str, self.options)]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [_node(r) for r in await search_records(self.engine, query_bundle.query_str, self.options)]


def _node(record: Record) -> NodeWithScore:
    hidden = [key for key, value in record.metadata.items() if key not in _SHOWN_TO_MODEL or value is None]
    node = TextNode(
        id_=record.id,
        text=record.text,
        metadata=record.metadata,
        excluded_llm_metadata_keys=hidden,
        excluded_embed_metadata_keys=hidden,
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=record.metadata["document_id"])},
    )
    return NodeWithScore(node=node, score=record.score)
