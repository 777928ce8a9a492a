"""A complete agent loop over the knowledge tool, against any OpenAI-compatible chat endpoint.

The model gets one tool, ``knowledge_tool_definition()``; each call it makes runs through
``call_knowledge_tool`` with the principals and scope THIS program decides, never the model. The
loop ends when the model answers without a tool call, or after ``max_turns`` rounds.

Run it against your own endpoint and database::

    LLM_BASE_URL=https://api.openai.com/v1 LLM_API_KEY=... LLM_MODEL=gpt-4o-mini \\
    python examples/agent_loop.py "How many days of annual leave carry over?"

``CE_DATABASE_URL`` picks the database (as in every example) (the embedded server when unset); ``AGENT_PRINCIPALS``
(comma-separated, empty = anonymous) and ``AGENT_SOURCES`` (comma-separated source ids, empty =
the whole corpus) stand in for your application's session and project.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import httpx

from context_engine import UNSCOPED, ContextEngine, ContextEngineConfig, call_knowledge_tool, knowledge_tool_definition

SYSTEM = (
    "You answer questions from the user's documents. Use the search_knowledge_base tool to find and read "
    "them; quote what you rely on and say when the documents do not answer the question."
)


def openai_tool() -> dict[str, Any]:
    """The knowledge tool in the chat-completions ``tools`` shape."""
    tool = knowledge_tool_definition()
    return {
        "type": "function",
        "function": {"name": tool["name"], "description": tool["description"], "parameters": tool["input_schema"]},
    }


async def run_agent(
    engine: ContextEngine,
    question: str,
    *,
    base_url: str,
    model: str,
    principals: list[str],
    scope: Any,
    api_key: str | None = None,
    max_turns: int = 8,
    http: httpx.AsyncClient | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """Ask ``question``; returns the model's final answer and the whole conversation."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    client = http or httpx.AsyncClient(timeout=120)
    try:
        for _ in range(max_turns):
            response = await client.post(
                base_url.rstrip("/") + "/chat/completions",
                headers=headers,
                json={"model": model, "messages": messages, "tools": [openai_tool()]},
            )
            response.raise_for_status()
            message = response.json()["choices"][0]["message"]
            messages.append({k: v for k, v in message.items() if v is not None})
            calls = message.get("tool_calls") or []
            if not calls:
                return message.get("content") or "", messages
            for tool_call in calls:
                result = await run_tool_call(engine, tool_call, principals=principals, scope=scope)
                messages.append({"role": "tool", "tool_call_id": tool_call["id"], "content": json.dumps(result)})
        return "I could not finish within the allowed number of steps.", messages
    finally:
        if http is None:
            await client.aclose()


async def run_tool_call(engine: ContextEngine, tool_call: dict[str, Any], *, principals: list[str], scope: Any
                        ) -> dict[str, Any]:
    """One tool call: only the model's arguments come from the model."""
    function = tool_call.get("function") or {}
    if function.get("name") != knowledge_tool_definition()["name"]:
        return {"success": False, "error": f"unknown tool {function.get('name')!r}; use search_knowledge_base."}
    try:
        model_args = json.loads(function.get("arguments") or "{}")
    except json.JSONDecodeError:
        return {"success": False, "error": "the tool arguments were not valid JSON; send a JSON object."}
    if not isinstance(model_args, dict):
        return {"success": False, "error": "the tool arguments must be a JSON object."}
    for host_only in ("principals", "scope", "redaction", "secret_key", "compute", "map_reduce"):
        model_args.pop(host_only, None)  # the host decides these, whatever the model sent
    return await call_knowledge_tool(engine, **model_args, principals=principals, scope=scope)


async def main(question: str) -> int:
    config = ContextEngineConfig.from_env()  # CE_DATABASE_URL and every other CE_ setting
    principals = [p for p in os.environ.get("AGENT_PRINCIPALS", "").split(",") if p]
    sources = [s for s in os.environ.get("AGENT_SOURCES", "").split(",") if s]
    async with ContextEngine(config) as engine:
        answer, _ = await run_agent(
            engine,
            question,
            base_url=os.environ.get("LLM_BASE_URL", "https://api.openai.com/v1"),
            model=os.environ.get("LLM_MODEL", "gpt-4o-mini"),
            api_key=os.environ.get("LLM_API_KEY"),
            principals=principals,
            scope=sources or UNSCOPED,
        )
    print(answer)
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print('usage: python examples/agent_loop.py "your question"', file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(asyncio.run(main(sys.argv[1])))
