"""What decides whether a knowledge-tool action can run: the engine's settings, the host's runners
and the graph tables, decided per call (a host runner turns ``compute`` on for one call).

Each action's record (:mod:`context_engine.knowledge.tool.actions`) names its check; the checks the
built-in actions use are here. ``query_meta`` and ``map_reduce`` need a configured ``llm``;
``compute`` also needs somewhere to run generated code; the graph actions need the tables
``migrate --graph`` creates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from context_engine.graph.schema import graph_enabled
from context_engine.knowledge.tool.engine_protocol import KnowledgeEngine


class Capabilities(Protocol):
    """What an availability check reads: the engine's settings, the host's runners, the graph."""

    @property
    def engine(self) -> KnowledgeEngine: ...
    @property
    def compute(self) -> Any: ...
    @property
    def map_reduce(self) -> Any: ...
    @property
    def graph_enabled(self) -> bool: ...


@dataclass(frozen=True)
class Deployment:
    """The capabilities of a deployment as a whole (a call's are the same, see ``ToolCall``)."""

    engine: KnowledgeEngine
    compute: Any = None
    map_reduce: Any = None
    graph_enabled: bool = False


def has_llm(call: Capabilities) -> bool:
    return call.engine.config.llm is not None


def compute_on(call: Capabilities) -> bool:
    """A host runner, or a model plus somewhere to run its code: the engine's ``code_runner`` or the
    built-in worker switched on (``compute.enable_code_execution``)."""
    runs_code = call.engine.code_runner is not None or call.engine.config.compute.enable_code_execution
    return call.compute is not None or (runs_code and has_llm(call))


def map_reduce_on(call: Capabilities) -> bool:
    """A host runner, or a configured model to ask each document."""
    return call.map_reduce is not None or has_llm(call)


def graph_on(call: Capabilities) -> bool:
    return call.graph_enabled


async def graph_available(engine: KnowledgeEngine) -> bool:
    """Whether ``migrate --graph`` made the graph tables in this engine's database."""
    async with (await engine.database()).connect() as conn:
        return await graph_enabled(conn)
