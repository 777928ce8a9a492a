"""``examples/agent_loop.py`` driven by a scripted OpenAI-compatible chat server over real HTTP.

The fake model calls discover, then search, then get_chunks around the hit it found (taking the
ids from the tool results it was sent), then answers. The test checks what the loop sent the model:
the tool definition, the real tool results, and that a model-sent ``scope`` could not widen anything.
"""

from __future__ import annotations

import json
from typing import Any

from context_engine import ContextEngine, knowledge_tool_definition
from tests.fakes import FakeHTTPServer, Target
from tests.knowledge_fakes import completion
from tests.test_examples import load


def tool_call_reply(call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    reply = completion("")
    reply["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function",
                        "function": {"name": "search_knowledge_base", "arguments": json.dumps(arguments)}}],
    }
    reply["choices"][0]["finish_reason"] = "tool_calls"
    return reply


def last_tool_result(body: dict[str, Any]) -> dict[str, Any]:
    return json.loads([m for m in body["messages"] if m["role"] == "tool"][-1]["content"])


def scripted_model(body: Any, _headers: dict[str, str], _target: Target) -> tuple[int, dict[str, str], Any]:
    """Decide the next step from how many tool results the conversation holds so far."""
    done = [m for m in body["messages"] if m["role"] == "tool"]
    if not done:
        # a model trying to widen its own scope: the loop must drop this argument
        return 200, {}, tool_call_reply("c1", {"action": "discover", "scope": None})
    if len(done) == 1:
        return 200, {}, tool_call_reply("c2", {"action": "search", "query": "unused annual leave carry over"})
    if len(done) == 2:
        hit = last_tool_result(body)["hits"][0]
        return 200, {}, tool_call_reply(
            "c3", {"action": "get_chunks", "document_id": hit["document_id"], "start": hit["chunk_idx"]}
        )
    chunk = last_tool_result(body)["chunks"][0]["text"]
    return 200, {}, completion(f"The policy says: {chunk}")


async def test_agent_loop_runs_the_model_s_calls(engine: ContextEngine) -> None:
    await engine.ingest(text="# Leave\n\n## Carry over\nUp to five unused days carry over into the next year.",
                        name="leave.md", source_id="hr", acl=["group:hr"])
    await engine.ingest(text="Salary bands for every grade.", name="pay.md", source_id="payroll", acl=["group:hr"])
    example = load("agent_loop.py")
    with FakeHTTPServer() as server:
        server.route("POST", "/v1/chat/completions", scripted_model)
        answer, messages = await example.run_agent(
            engine, "How many unused days carry over?", base_url=server.url("/v1"), model="fake",
            principals=["group:hr"], scope=["hr"], api_key="sk-test",
        )
        requests = server.requests_to("/v1/chat/completions")
    assert answer == "The policy says: Up to five unused days carry over into the next year."
    assert len(requests) == 4
    first = requests[0].json()
    assert first["tools"][0]["function"]["parameters"] == knowledge_tool_definition()["input_schema"]
    assert requests[0].header("authorization") == "Bearer sk-test"
    results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    assert [r["success"] for r in results] == [True, True, True]
    assert [d["name"] for d in results[0]["documents"]] == ["leave.md"]  # the host's scope held: no payroll
    assert results[1]["hits"][0]["document_name"] == "leave.md"
    assert results[2]["chunks"][0]["section"] == "Carry over"
