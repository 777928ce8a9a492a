"""Scripted OpenAI-compatible chat and rerank replies for ``tests.fakes.FakeHTTPServer``.

The providers under test talk real HTTP to a server on 127.0.0.1; only the server's replies are
scripted here. A chat handler dispatches on the schema name the client sent (``sub_queries`` for
expansion, ``relevance`` for the judge), so one fake server can play both parts of one pipeline.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.fakes import Target

Reply = tuple[int, dict[str, str], Any]
Handler = Callable[[Any, dict[str, str], Target], Reply]

_PASSAGE = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)


def completion(content: str, tokens: int = 50) -> dict[str, Any]:
    """An OpenAI chat completion carrying ``content``."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": tokens - 10, "completion_tokens": 10, "total_tokens": tokens},
    }


def schema_name(body: Any) -> str | None:
    fmt = (body or {}).get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return fmt["json_schema"]["name"]
    system = (body or {}).get("messages", [{}])[0].get("content", "")
    return "relevance" if "judge how well passages" in system else "sub_queries" if "search engine" in system else None


def last_user(body: Any) -> str:
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


def first_user(body: Any) -> str:
    return next(m for m in body["messages"] if m["role"] == "user")["content"]


def passages(body: Any) -> list[tuple[int, str]]:
    """The numbered passages of a judge request."""
    return [(int(i), text) for i, text in _PASSAGE.findall(first_user(body))]


def chat(**by_schema: Callable[[Any], str]) -> Handler:
    """A chat handler answering each schema name with ``by_schema[name](body)`` as the content."""

    def handler(body: Any, _headers: dict[str, str], _target: Target) -> Reply:
        name = schema_name(body)
        if name not in by_schema:
            return 400, {}, {"error": {"message": f"unexpected request for schema {name!r}"}}
        return 200, {}, completion(by_schema[name](body))

    return handler


# --- expansion ------------------------------------------------------------------------------------
def split_into(*queries: str) -> Callable[[Any], str]:
    return lambda body: json.dumps({"queries": list(queries)})


# --- judges ---------------------------------------------------------------------------------------
def judge_by_words(words: dict[str, float]) -> Callable[[Any], str]:
    """A sensible judge: each passage scores the highest weight of the words it contains (else 1)."""

    def content(body: Any) -> str:
        scores = []
        for index, text in passages(body):
            lowered = text.lower()
            hits = [score for word, score in words.items() if word in lowered]
            scores.append({"index": index, "score": max(hits) if hits else 1})
        return json.dumps({"scores": scores})

    return content


def judge_all(score: float) -> Callable[[Any], str]:
    """Every passage the same score (0 = "nothing is relevant")."""
    return lambda body: json.dumps({"scores": [{"index": i, "score": score} for i, _ in passages(body)]})


def judge_inverted(body: Any) -> str:
    """The exact reverse of the order it was given (the fused order): the last passage best."""
    found = passages(body)
    top = max(len(found) - 1, 1)
    return json.dumps({"scores": [{"index": i, "score": round(10 * i / top, 3)} for i, _ in found]})


def malformed(_body: Any) -> str:
    return '{"scores": [{"index": 0, "score": '


def slow(seconds: float, then: Handler) -> Handler:
    """Sleep before answering (a judge that times out)."""

    def handler(body: Any, headers: dict[str, str], target: Target) -> Reply:
        time.sleep(seconds)
        return then(body, headers, target)

    return handler


# --- rerank APIs ----------------------------------------------------------------------------------
def rerank_api(score_of: Callable[[str, str], float], *, results_key: str = "results") -> Handler:
    """Cohere/Jina (``results``) or Voyage (``data``) rerank replies scoring each document."""

    def handler(body: Any, _headers: dict[str, str], _target: Target) -> Reply:
        docs = body["documents"]
        items = [{"index": i, "relevance_score": score_of(body["query"], d)} for i, d in enumerate(docs)]
        items.sort(key=lambda item: -item["relevance_score"])
        return 200, {}, {results_key: items, "usage": {"total_tokens": 7 * len(docs)}}

    return handler


class Counter:
    """Counts calls of a handler it wraps (thread-safe: the fake server is threaded)."""

    def __init__(self, inner: Handler):
        self.inner = inner
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, body: Any, headers: dict[str, str], target: Target) -> Reply:
        with self._lock:
            self.calls += 1
        return self.inner(body, headers, target)
