"""A LangChain retriever over ``engine.search`` (the ``[langchain]`` extra, ``langchain-core``).

``ContextEngineRetriever(engine=engine, principals=[...])`` returns LangChain ``Document``s: the
passage text as ``page_content`` and the fields ``POST /search`` returns for a hit (score,
section, page, ids, the legs that matched) as ``metadata``, redacted exactly as the routes redact.

The caller is never implicit: ``principals`` is required (``[]`` is anonymous, ``TRUSTED`` skips
the ACL on purpose, ``None`` is refused), and a call may name another one
(``retriever.invoke(q, principals=[...])``); in a chain, make it a configurable field and pass it
per request (``config={"configurable": {"principals": [...]}}``).

No LangChain ``VectorStore`` is offered: that interface searches by a raw vector with an
``Embeddings`` object the caller supplies and stores each text as one record it names, while the
engine embeds with its own model, chunks every document and ranks with fused full-text, vector
and trigram scores; ingest and delete with an ACL are ``engine.ingest`` / ``engine.delete_document``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import field_validator

from context_engine.engine import ContextEngine
from context_engine.integrations.retrieval import (
    GroupBy,
    Record,
    SearchOptions,
    explicit_caller,
    search_records,
    search_records_sync,
)

#: what a single call may set for itself
_PER_CALL = frozenset({"principals", "top_k", "source_ids", "group_by", "as_of"})


class ContextEngineRetriever(BaseRetriever):
    """Permission-aware hybrid retrieval as a LangChain retriever (sync and async)."""

    engine: ContextEngine
    #: who is asking: a list of principals (``[]``: anonymous) or ``TRUSTED``; required
    principals: Any
    top_k: int = 4
    source_ids: list[str] | None = None
    #: ``"document"``: one ``Document`` per matching document (its best passages), ``top_k`` documents
    group_by: GroupBy = "chunk"
    #: search the store as it was at this revision (``None``: the current one)
    as_of: int | None = None

    @field_validator("principals", mode="plain")
    @classmethod
    def _explicit(cls, value: Any) -> Any:
        try:
            return explicit_caller(value)
        except TypeError as exc:  # pydantic reports a ValueError as a ValidationError naming the field
            raise ValueError(str(exc)) from None

    def _options(self, overrides: dict[str, Any]) -> SearchOptions:
        overrides = {key: value for key, value in overrides.items() if key != "verbose"}  # LangChain's own
        unknown = set(overrides) - _PER_CALL
        if unknown:
            raise TypeError(f"unexpected retriever argument(s): {', '.join(sorted(unknown))}")
        principals = explicit_caller(overrides["principals"]) if "principals" in overrides else self.principals
        return SearchOptions(
            principals=principals,
            top_k=overrides.get("top_k", self.top_k),
            source_ids=overrides.get("source_ids", self.source_ids),
            group_by=overrides.get("group_by", self.group_by),
            as_of=overrides.get("as_of", self.as_of),
        )

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return [_document(r) for r in search_records_sync(self.engine, query, self._options(kwargs))]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return [_document(r) for r in await search_records(self.engine, query, self._options(kwargs))]


def _document(record: Record) -> Document:
    return Document(id=record.id, page_content=record.text, metadata=record.metadata)
