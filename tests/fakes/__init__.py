"""Reusable fakes for tests: real servers on 127.0.0.1 instead of mocks of our own code."""

from .http_server import (
    DROP_CONNECTION,
    FakeHTTPServer,
    RecordedRequest,
    Target,
    fake_http_server,
    fake_openai_embeddings,
    fake_vector,
    json_reply,
    sequence,
)

__all__ = [
    "DROP_CONNECTION",
    "FakeHTTPServer",
    "RecordedRequest",
    "Target",
    "fake_http_server",
    "fake_openai_embeddings",
    "fake_vector",
    "json_reply",
    "sequence",
]
