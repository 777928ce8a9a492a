"""``EngineContext``: what an engine operation reads, for the engine or one of its redaction views.

A view shares the root's services, retriever, function tools and pending OAuth flows, and differs
only in its redaction policy (and the ingestor that scrubs with it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from context_engine.config import ContextEngineConfig
from context_engine.hooks import Hooks
from context_engine.ingest.pipeline import Ingestor
from context_engine.redaction import RedactionPolicy
from context_engine.redaction.apply import IngestScrubber, Redactor, SecretKey, effective_key
from context_engine.retrieval.retriever import Retriever
from context_engine.revisions import view as revision_view
from context_engine.services import Services, Shared
from context_engine.tools.functions import FunctionRegistry
from context_engine.tools.mcp_oauth import McpOAuthFlows


@dataclass(frozen=True)
class EngineContext:
    """The shared services and tools, and this view's output and ingest redaction."""

    services: Services
    retriever: Retriever
    policy: RedactionPolicy
    policy_key: SecretKey | None
    #: function tools registered on the engine (in memory, shared by its views)
    functions: FunctionRegistry
    #: mcp OAuth flows waiting for their callback (shared by the views)
    oauth_flows: McpOAuthFlows
    #: the host's own isolation for generated code (sync or async), used when a call names none
    code_runner: Any = None
    #: resolves tool hosts for the egress check of mcp and http tools (default: the system's)
    mcp_resolver: Any = None
    ingestor: Ingestor = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ingestor", Ingestor(self.services, self.scrubber()))

    @classmethod
    def root(cls, services: Services, *, code_runner: Any = None, mcp_resolver: Any = None) -> EngineContext:
        """The context of a new engine: its configured policy, new tool holders."""
        config = services.config
        policy = config.redaction
        key = effective_key(policy, None, config.redaction_secret_key, config.secret_key)
        return cls(services, Retriever(services), policy, key, FunctionRegistry(), McpOAuthFlows(),
                   code_runner=code_runner, mcp_resolver=mcp_resolver)

    def with_policy(self, policy: RedactionPolicy, secret_key: str | bytes | None) -> EngineContext:
        """The same context under another output and ingest policy (``with_redaction``)."""
        key = effective_key(policy, secret_key, self.config.redaction_secret_key, self.config.secret_key)
        return dataclasses.replace(self, policy=policy, policy_key=key)

    config = Shared[ContextEngineConfig]()
    hooks = Shared[Hooks]()

    async def db(self) -> AsyncEngine:
        """The pool for the running loop; migrates (or checks) the schema once per engine."""
        return await self.services.db()

    def redactor(
        self, caller: tuple[str, ...] | None, redaction: RedactionPolicy | None, key: str | bytes | None
    ) -> Redactor:
        """The output redaction for one call: a per-call pair wins over the engine's or view's."""
        if redaction is None:
            return Redactor(self.policy, key if key is not None else self.policy_key, caller)
        resolved = effective_key(
            redaction,
            key if key is not None else self.policy_key,
            self.config.redaction_secret_key,
            self.config.secret_key,
        )
        return Redactor(redaction, resolved, caller)

    def scrubber(self) -> IngestScrubber:
        return IngestScrubber(self.policy, self.policy_key)

    async def revisions(self, caller: tuple[str, ...] | None) -> revision_view.CallerRevisions:
        """The revisions ``caller`` is told about (a trusted caller's are the store's own)."""
        return await revision_view.for_caller(await self.db(), caller)
