"""A stand-in chat model for the framework examples: an OpenAI-compatible ``/v1/chat/completions``
endpoint on 127.0.0.1 that answers with the sentence of its prompt that best matches the question.

It is scripted, not a model: it lets ``langchain_chain.py`` and ``llama_index_query.py`` run in one
command with no API key, and it answers only from what the chain put in the prompt, so what it
says shows what the retriever let through. Point the examples at a real endpoint with
``LLM_BASE_URL`` (and ``LLM_API_KEY``, ``LLM_MODEL``) instead.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_WORD = re.compile(r"[a-z0-9']+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
#: the line a chain puts the question on (LangChain example: "Question:", LlamaIndex: "Query:")
_QUESTION = re.compile(r"^(?:Question|Query):\s*(.+)$", re.MULTILINE)
_STOP = frozenset("a an and are do does for how i in is it many may much of on the to what when who".split())


def answer(prompt: str) -> str:
    """The prompt's sentence sharing the most words with its question, or a refusal."""
    found = _QUESTION.findall(prompt)
    question = found[-1] if found else prompt
    wanted = set(_WORD.findall(question.lower())) - _STOP
    context = prompt.replace(question, " ")
    best, best_overlap = "", 0
    for sentence in _SENTENCE.split(context):
        overlap = len(wanted & set(_WORD.findall(sentence.lower())))
        if overlap > best_overlap and not sentence.rstrip().endswith(":"):
            best, best_overlap = sentence.strip(), overlap
    return f"From the documents: {best}" if best else "The documents I was given do not answer that."


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
        prompt = "\n".join(str(m.get("content") or "") for m in body.get("messages", []))
        reply = {
            "id": "scripted",
            "object": "chat.completion",
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": answer(prompt)}}],
        }
        data = json.dumps(reply).encode()
        self.send_response(200 if self.path.endswith("/chat/completions") else 404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:  # keep the example's output clean
        pass


@contextmanager
def scripted_model() -> Iterator[str]:
    """Serve the stand-in on a free port; yields its base URL (``http://127.0.0.1:PORT/v1``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
