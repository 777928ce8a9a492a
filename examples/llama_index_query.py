"""A LlamaIndex query engine over the engine: each caller's answer comes only from what they may read.

``RetrieverQueryEngine`` runs over ``context_engine.integrations.llama_index.ContextEngineRetriever``;
LlamaIndex passes no per-call arguments to a retriever, so each request gets a retriever for its
caller (``retriever.for_caller(principals)``, which shares the engine and holds no connection).

Run it in one command (embedded PostgreSQL, the local embedding model, and a scripted stand-in
model on 127.0.0.1, see ``scripted_model.py``)::

    python examples/llama_index_query.py "How many days of leave do I get?"

``CE_DATABASE_URL`` points it at your own database; ``LLM_BASE_URL`` / ``LLM_API_KEY`` /
``LLM_MODEL`` at a real OpenAI-compatible endpoint. Needs the ``[llama-index]`` extra.
"""

from __future__ import annotations

import asyncio
import os
import sys
from contextlib import nullcontext
from typing import Any

import httpx
from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata
from llama_index.core.query_engine import RetrieverQueryEngine

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.integrations.llama_index import ContextEngineRetriever

try:  # imported as ``examples.llama_index_query`` (the tests) or run as a script
    from examples.scripted_model import scripted_model
except ModuleNotFoundError:
    from scripted_model import scripted_model  # type: ignore[no-redef]

SOURCE = "llama-index-example"
QUESTION = "How many days of leave do I get?"
DOCUMENTS: dict[str, tuple[str, list[str]]] = {
    "leave-policy": ("Every employee accrues 25 days of paid annual leave a year. Unused leave carries over.",
                     ["group:hr"]),
    "oncall-runbook": ("Engineers get one day of leave after a night on call. The pager rotates weekly.",
                       ["group:eng"]),
    "office-hours": ("The office opens at eight and closes at six on weekdays.", []),
}
CALLERS: dict[str, list[str]] = {"hr": ["group:hr"], "engineer": ["group:eng"]}


class OpenAICompatibleLLM(CustomLLM):
    """A minimal LlamaIndex LLM for any OpenAI-compatible ``/chat/completions`` endpoint (httpx):
    each completion prompt is sent as one user message."""

    base_url: str
    model: str = "gpt-4o-mini"
    api_key: str | None = None
    timeout: float = 120.0
    context_window: int = 8192

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model, context_window=self.context_window, num_output=512)

    def _post(self, prompt: str) -> dict[str, Any]:
        return {
            "url": self.base_url.rstrip("/") + "/chat/completions",
            "json": {"model": self.model, "messages": [{"role": "user", "content": prompt}]},
            "headers": {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {},
        }

    @staticmethod
    def _text(response: httpx.Response) -> CompletionResponse:
        response.raise_for_status()
        return CompletionResponse(text=response.json()["choices"][0]["message"].get("content") or "")

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self._text(httpx.post(**self._post(prompt), timeout=self.timeout))

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            return self._text(await client.post(**self._post(prompt)))

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        whole = self.complete(prompt)  # the endpoint is asked without streaming; one chunk is the whole reply
        yield CompletionResponse(text=whole.text, delta=whole.text)


def build_query_engine(retriever: ContextEngineRetriever, llm: CustomLLM) -> RetrieverQueryEngine:
    return RetrieverQueryEngine.from_args(retriever, llm=llm)


async def seed(engine: ContextEngine) -> None:
    """File the example's documents (idempotent: an unchanged document is skipped)."""
    for name, (text, acl) in DOCUMENTS.items():
        await engine.ingest(text=text, name=name, acl=acl, source_id=SOURCE, principals=TRUSTED)


async def main(question: str) -> None:
    endpoint = os.environ.get("LLM_BASE_URL")
    async with ContextEngine(ContextEngineConfig.from_env()) as engine:
        await seed(engine)
        anonymous = ContextEngineRetriever(engine, principals=[], top_k=3, source_ids=[SOURCE])
        with nullcontext(endpoint) if endpoint else scripted_model() as base_url:
            llm = OpenAICompatibleLLM(base_url=base_url, model=os.environ.get("LLM_MODEL", "gpt-4o-mini"),
                                      api_key=os.environ.get("LLM_API_KEY"))
            print(f"Q: {question}")
            for caller, principals in CALLERS.items():
                response = await build_query_engine(anonymous.for_caller(principals), llm).aquery(question)
                print(f"  {caller:<9} {response}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else QUESTION))
