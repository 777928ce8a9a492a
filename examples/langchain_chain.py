"""A LangChain RAG chain over the engine: each caller's answer comes only from what they may read.

The chain is the usual one (retriever -> prompt -> chat model -> text); the retriever is
``context_engine.integrations.langchain.ContextEngineRetriever`` with the caller made a
configurable field, so ONE chain serves every user and each request names its caller::

    chain.invoke(question, config={"configurable": {"principals": ["group:hr"]}})

Run it in one command (embedded PostgreSQL, the local embedding model, and a scripted stand-in
model on 127.0.0.1, see ``scripted_model.py``)::

    python examples/langchain_chain.py "How many days of leave do I get?"

``CE_DATABASE_URL`` points it at your own database; ``LLM_BASE_URL`` / ``LLM_API_KEY`` /
``LLM_MODEL`` at a real OpenAI-compatible endpoint. Needs the ``[langchain]`` extra.
"""

from __future__ import annotations

import asyncio
import os
import sys
from contextlib import nullcontext
from typing import Any

import httpx
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import ConfigurableField, Runnable, RunnablePassthrough

from context_engine import TRUSTED, ContextEngine, ContextEngineConfig
from context_engine.integrations.langchain import ContextEngineRetriever

try:  # imported as ``examples.langchain_chain`` (the tests) or run as a script
    from examples.scripted_model import scripted_model
except ModuleNotFoundError:
    from scripted_model import scripted_model  # type: ignore[no-redef]

SOURCE = "langchain-example"
QUESTION = "How many days of leave do I get?"
DOCUMENTS: dict[str, tuple[str, list[str]]] = {
    "leave-policy": ("Every employee accrues 25 days of paid annual leave a year. Unused leave carries over.",
                     ["group:hr"]),
    "oncall-runbook": ("Engineers get one day of leave after a night on call. The pager rotates weekly.",
                       ["group:eng"]),
    "office-hours": ("The office opens at eight and closes at six on weekdays.", []),
}
CALLERS: dict[str, list[str]] = {"hr": ["group:hr"], "engineer": ["group:eng"]}
SYSTEM = "Answer the question from the context only. If the context does not answer it, say so."


class OpenAICompatibleChat(BaseChatModel):
    """A minimal chat model for any OpenAI-compatible ``/chat/completions`` endpoint (httpx)."""

    base_url: str
    model: str = "gpt-4o-mini"
    api_key: str | None = None
    timeout: float = 120.0

    @property
    def _llm_type(self) -> str:
        return "openai-compatible"

    def _request(self, messages: list[BaseMessage]) -> dict[str, Any]:
        roles = {"human": "user", "ai": "assistant", "system": "system"}
        return {"model": self.model, "messages": [{"role": roles.get(m.type, "user"), "content": m.content}
                                                  for m in messages]}

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @staticmethod
    def _result(response: httpx.Response) -> ChatResult:
        response.raise_for_status()
        content = response.json()["choices"][0]["message"].get("content") or ""
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=content))])

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        url = self.base_url.rstrip("/") + "/chat/completions"
        return self._result(httpx.post(url, json=self._request(messages), headers=self._headers(),
                                       timeout=self.timeout))

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            url = self.base_url.rstrip("/") + "/chat/completions"
            return self._result(await client.post(url, json=self._request(messages), headers=self._headers()))


def format_context(documents: list[Document]) -> str:
    return "\n".join(f"[{d.metadata['document_name']}] {d.page_content}" for d in documents)


def build_chain(engine: ContextEngine, llm: BaseChatModel, source_ids: list[str] | None = None) -> Runnable[str, str]:
    """retriever -> prompt -> model -> text, with the caller chosen per request (anonymous unless named)."""
    retriever = ContextEngineRetriever(engine=engine, principals=[], top_k=3, source_ids=source_ids)
    per_request = retriever.configurable_fields(principals=ConfigurableField(id="principals"))
    prompt = ChatPromptTemplate.from_messages(
        [("system", SYSTEM), ("human", "Context:\n{context}\n\nQuestion: {question}")]
    )
    inputs = {"context": per_request | format_context, "question": RunnablePassthrough()}
    return inputs | prompt | llm | StrOutputParser()


async def seed(engine: ContextEngine) -> None:
    """File the example's documents (idempotent: an unchanged document is skipped)."""
    for name, (text, acl) in DOCUMENTS.items():
        await engine.ingest(text=text, name=name, acl=acl, source_id=SOURCE, principals=TRUSTED)


async def main(question: str) -> None:
    endpoint = os.environ.get("LLM_BASE_URL")
    async with ContextEngine(ContextEngineConfig.from_env()) as engine:
        await seed(engine)
        with nullcontext(endpoint) if endpoint else scripted_model() as base_url:
            llm = OpenAICompatibleChat(base_url=base_url, model=os.environ.get("LLM_MODEL", "gpt-4o-mini"),
                                       api_key=os.environ.get("LLM_API_KEY"))
            chain = build_chain(engine, llm, source_ids=[SOURCE])
            print(f"Q: {question}")
            for caller, principals in CALLERS.items():
                reply = await chain.ainvoke(question, config={"configurable": {"principals": principals}})
                print(f"  {caller:<9} {reply}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else QUESTION))
