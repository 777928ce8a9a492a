"""What the knowledge tool calls on the engine, as a Protocol: ``ContextEngine`` is one.

The tool's actions read through these methods (so every rule of the engine's own methods holds for
them), and naming them here keeps the tool below the engine: it never imports ``engine.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.config import ContextEngineConfig
from context_engine.models import Document, SearchResult
from context_engine.principals import Principals
from context_engine.redaction import RedactionPolicy
from context_engine.redaction.apply import Redactor


class KnowledgeEngine(Protocol):
    """The engine methods and settings the knowledge tool's actions use."""

    @property
    def config(self) -> ContextEngineConfig: ...

    @property
    def code_runner(self) -> Any: ...

    async def database(self) -> AsyncEngine: ...

    def output_redactor(
        self,
        caller: tuple[str, ...] | None,
        redaction: RedactionPolicy | None = None,
        secret_key: str | bytes | None = None,
    ) -> Redactor: ...

    async def search(
        self,
        query: str,
        *,
        source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None,
        principals: Principals = None,
        top_k: int = 10,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
        mode: str | None = None,
    ) -> SearchResult: ...

    async def get_document(
        self,
        document_id: str,
        *,
        principals: Principals = None,
        include_text: bool = True,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> Document: ...

    async def compute(
        self,
        question: str,
        *,
        principals: Principals = None,
        source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> dict[str, Any]: ...

    async def query_meta(
        self,
        question: str,
        *,
        principals: Principals = None,
        source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> dict[str, Any]: ...

    async def map_reduce(
        self,
        instruction: str,
        *,
        principals: Principals = None,
        source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None,
        limit: int | None = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
    ) -> dict[str, Any]: ...

    async def graph_query(
        self,
        action: str,
        *,
        principals: Principals = None,
        source_ids: Sequence[str] | None = None,
        document_ids: Sequence[str] | None = None,
        redaction: RedactionPolicy | None = None,
        redaction_secret_key: str | bytes | None = None,
        **arguments: Any,
    ) -> dict[str, Any]: ...
