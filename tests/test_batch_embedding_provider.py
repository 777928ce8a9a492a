"""The provider side of batch embedding: OpenAI's ``/files`` + ``/batches`` over real HTTP, against
``tests.fakes.openai_batches.FakeBatchServer``."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from context_engine.config import EmbeddingConfig
from context_engine.embeddings.batches import BatchHandle, BatchNotSupported, BatchProgress, BatchResultInvalid
from context_engine.embeddings.factory import build_embedder
from context_engine.embeddings.openai_batches import MAX_BATCH_REQUESTS
from context_engine.errors import DimensionMismatch, InvalidRequest, ProviderError
from tests.fakes.http_server import FakeHTTPServer, Target, fake_vector, json_reply, sequence
from tests.fakes.openai_batches import FakeBatchServer

API_KEY = "sk-batch-SECRET-0123456789abcdef"
GUARD_SECONDS = 15.0
TEXTS = ["alpha", "beta", "gamma — ünïcode", "delta", "epsilon"]


@pytest.fixture
def server() -> Iterator[FakeHTTPServer]:
    with FakeHTTPServer() as fake:
        yield fake


@pytest.fixture
def batches(server: FakeHTTPServer) -> FakeBatchServer:
    return FakeBatchServer(server)


def config(server: FakeHTTPServer, **overrides: Any) -> EmbeddingConfig:
    settings: dict[str, Any] = {
        "provider": "custom",
        "api_key": API_KEY,
        "base_url": server.url("/v1"),
        "model": "embed-small",
        "dim": 8,
    }
    settings.update(overrides)
    return EmbeddingConfig(**settings)


async def guarded(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, GUARD_SECONDS)


async def collect(api: Any, handle: BatchHandle, progress: BatchProgress) -> list[tuple[int, list[float]]]:
    return [item async for item in api.vectors(handle, progress)]


async def test_a_job_is_uploaded_created_polled_and_paired_by_position(
    server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    embedder = build_embedder(config(server))
    api = embedder.batch_api()
    try:
        handle = await guarded(api.submit(TEXTS))
        assert handle.count == len(TEXTS) and handle.embedding_key == embedder.key
        first = await guarded(api.poll(handle))
        assert first.status == "pending" and first.provider_status == "in_progress"
        done = await guarded(api.poll(handle))
        assert done.status == "completed" and done.done == len(TEXTS)
        pairs = await guarded(collect(api, handle, done))
    finally:
        await embedder.aclose()

    # the output lists the replies in reverse; each vector still lands on its own position
    assert sorted(pairs) == [(i, fake_vector(text, 8)) for i, text in enumerate(TEXTS)]
    assert [p for p, _ in pairs] == list(reversed(range(len(TEXTS))))

    uploaded = batches.files[handle.input_file_id].decode().splitlines()
    assert batches.purposes[handle.input_file_id] == "batch"
    assert [json.loads(line) for line in uploaded] == [
        {"custom_id": str(i), "method": "POST", "url": "/v1/embeddings", "body": {"model": "embed-small", "input": t}}
        for i, t in enumerate(TEXTS)
    ]
    created = server.requests_to("/v1/batches", "POST")[0].json()
    assert created == {
        "input_file_id": handle.input_file_id,
        "endpoint": "/v1/embeddings",
        "completion_window": "24h",
        "metadata": {"embedding_key": embedder.key},
    }
    assert {r.header("authorization") for r in server.requests} == {f"Bearer {API_KEY}"}


async def test_a_shortened_width_is_sent_on_every_line(server: FakeHTTPServer, batches: FakeBatchServer) -> None:
    embedder = build_embedder(config(server, provider="openai", model="text-embedding-3-small", dim=16))
    api = embedder.batch_api()
    try:
        handle = await guarded(api.submit(["one", "two"]))
        await guarded(api.poll(handle))
        pairs = await guarded(collect(api, handle, await guarded(api.poll(handle))))
    finally:
        await embedder.aclose()
    lines = [json.loads(line) for line in batches.files[handle.input_file_id].decode().splitlines()]
    assert {line["body"]["dimensions"] for line in lines} == {16}
    assert dict(pairs) == {0: fake_vector("one", 16), 1: fake_vector("two", 16)}


async def test_creating_the_job_is_never_retried(server: FakeHTTPServer, batches: FakeBatchServer) -> None:
    server.route("POST", "/v1/batches", json_reply(500, {"error": {"message": "upstream timeout"}}))
    embedder = build_embedder(config(server, max_retries=3))
    try:
        with pytest.raises(ProviderError) as caught:
            await guarded(embedder.batch_api().submit(TEXTS))
    finally:
        await embedder.aclose()
    assert caught.value.code == "provider_unavailable"
    assert len(server.requests_to("/v1/batches", "POST")) == 1  # a second job would be paid twice


async def test_the_upload_and_polls_retry_like_any_request(server: FakeHTTPServer, batches: FakeBatchServer) -> None:
    server.route("POST", "/v1/files", sequence(json_reply(503, {"error": {"message": "busy"}}), batches.upload))
    embedder = build_embedder(config(server, max_retries=1))
    embedder.backoff_base = 0.01  # type: ignore[attr-defined]
    api = embedder.batch_api()
    try:
        handle = await guarded(api.submit(TEXTS))
        polls = sequence(
            json_reply(502, {"error": {"message": "bad gateway"}}), lambda *_: batches.poll(handle.batch_id, 1)
        )
        server.route("GET", f"/v1/batches/{handle.batch_id}", polls)
        progress = await guarded(api.poll(handle))
    finally:
        await embedder.aclose()
    assert progress.status == "completed"
    assert len(server.requests_to("/v1/files", "POST")) == 2
    assert len(server.requests_to(f"/v1/batches/{handle.batch_id}")) == 2
    # the retried upload sent the whole file again, not the tail the first attempt left
    first, second = server.requests_to("/v1/files", "POST")
    assert len(first.body) == len(second.body)  # same size: only the multipart boundary differs
    assert len(batches.files[handle.input_file_id].decode().splitlines()) == len(TEXTS)


@pytest.mark.parametrize(
    ("status", "extra", "reason"),
    [
        (
            "failed",
            {"errors": {"data": [{"code": "invalid_json_line", "message": "line 3 is not JSON"}]}},
            "line 3 is not JSON",
        ),
        ("expired", {}, "expired"),
        ("cancelled", {}, "cancelled"),
    ],
)
async def test_a_job_that_ends_without_every_vector_is_failed_with_a_reason(
    server: FakeHTTPServer, batches: FakeBatchServer, status: str, extra: dict[str, Any], reason: str
) -> None:
    embedder = build_embedder(config(server))
    api = embedder.batch_api()
    try:
        handle = await guarded(api.submit(TEXTS))
        server.route(
            "GET", f"/v1/batches/{handle.batch_id}", json_reply(200, {"id": handle.batch_id, "status": status, **extra})
        )
        progress = await guarded(api.poll(handle))
        with pytest.raises(InvalidRequest, match="not completed"):
            await guarded(collect(api, handle, progress))
    finally:
        await embedder.aclose()
    assert progress.status == "failed" and progress.provider_status == status
    assert reason in (progress.message or "")


async def test_a_completed_job_with_failed_lines_is_failed_and_names_the_first_error(
    server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    embedder = build_embedder(config(server))
    api = embedder.batch_api()
    errors = {"custom_id": "3", "response": {"status_code": 400, "body": {"error": {"message": "input too long"}}}}
    server.route("GET", "/v1/files/file-err/content", json_reply(200, (json.dumps(errors) + "\n").encode()))
    try:
        handle = await guarded(api.submit(TEXTS))
        server.route(
            "GET",
            f"/v1/batches/{handle.batch_id}",
            json_reply(
                200,
                {
                    "id": handle.batch_id,
                    "status": "completed",
                    "output_file_id": "file-out",
                    "error_file_id": "file-err",
                    "request_counts": {"total": 5, "completed": 4, "failed": 1},
                },
            ),
        )
        progress = await guarded(api.poll(handle))
    finally:
        await embedder.aclose()
    assert progress.status == "failed" and progress.failed == 1
    assert progress.message == "1 of 5 embedding requests failed: input too long"


@pytest.mark.parametrize(
    ("rewrite", "error", "message"),
    [
        (lambda lines: lines[:-1], BatchResultInvalid, "covered 4 of 5"),
        (lambda lines: [*lines, lines[0]], BatchResultInvalid, "repeats position 0"),
        (lambda lines: [{**lines[0], "custom_id": "9"}, *lines[1:]], BatchResultInvalid, "outside 0..4"),
        (
            lambda lines: [
                {**lines[0], "response": {"status_code": 500, "body": {"error": {"message": "boom"}}}},
                *lines[1:],
            ],
            BatchResultInvalid,
            "request 0 failed: boom",
        ),
    ],
)
async def test_output_that_does_not_cover_every_position_once_is_refused(
    server: FakeHTTPServer, batches: FakeBatchServer, rewrite: Any, error: type[Exception], message: str
) -> None:
    batches.output = rewrite
    embedder = build_embedder(config(server))
    api = embedder.batch_api()
    try:
        handle = await guarded(api.submit(TEXTS))
        await guarded(api.poll(handle))
        progress = await guarded(api.poll(handle))
        with pytest.raises(error, match=message):
            await guarded(collect(api, handle, progress))
    finally:
        await embedder.aclose()


async def test_vectors_of_the_wrong_width_are_a_dimension_mismatch(
    server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    embedder = build_embedder(config(server))
    api = embedder.batch_api()
    narrow = {"custom_id": "0", "response": {"status_code": 200, "body": {"data": [{"embedding": [0.1, 0.2, 0.3]}]}}}
    try:
        handle = await guarded(api.submit(["x"]))
        await guarded(api.poll(handle))
        progress = await guarded(api.poll(handle))
        server.route(
            "GET", f"/v1/files/{progress.output_file_id}/content", json_reply(200, (json.dumps(narrow) + "\n").encode())
        )
        with pytest.raises(DimensionMismatch, match=r"embedding\.dim is 8"):
            await guarded(collect(api, handle, progress))
    finally:
        await embedder.aclose()


async def test_a_job_submitted_under_other_embedding_settings_is_refused(
    server: FakeHTTPServer, batches: FakeBatchServer
) -> None:
    embedder = build_embedder(config(server))
    other = build_embedder(config(server, dim=4))
    try:
        handle = await guarded(embedder.batch_api().submit(["x"]))
        with pytest.raises(InvalidRequest, match="cannot be stored under the current embedding settings") as caught:
            await guarded(other.batch_api().poll(handle))
    finally:
        await embedder.aclose()
        await other.aclose()
    assert caught.value.code == "batch_embedding_mismatch"
    assert server.requests_to(f"/v1/batches/{handle.batch_id}") == []


async def test_a_handle_survives_json_and_a_broken_one_is_named() -> None:
    handle = BatchHandle("custom", "batch_1", "file-1", 3, "custom\tm\t8")
    assert BatchHandle.from_dict(json.loads(json.dumps(handle.to_dict()))) == handle
    with pytest.raises(InvalidRequest) as caught:
        BatchHandle.from_dict({"provider": "custom", "batch_id": "b"})
    assert caught.value.code == "batch_handle_invalid"


async def test_a_document_over_the_job_limit_is_refused_before_any_request(server: FakeHTTPServer) -> None:
    embedder = build_embedder(config(server))
    try:
        with pytest.raises(BatchNotSupported, match=f"at most {MAX_BATCH_REQUESTS}"):
            await guarded(embedder.batch_api().submit(["t"] * (MAX_BATCH_REQUESTS + 1)))
        with pytest.raises(InvalidRequest, match="at least one chunk"):
            await guarded(embedder.batch_api().submit([]))
    finally:
        await embedder.aclose()
    assert server.requests == []


async def test_the_key_never_reaches_an_error_or_a_log(
    server: FakeHTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    def echo(_body: Any, headers: dict[str, str], _target: Target) -> Any:
        return 401, {}, {"error": {"message": f"Incorrect API key provided: {headers.get('authorization')}"}}

    server.route("POST", "/v1/files", echo)
    embedder = build_embedder(config(server))
    try:
        with pytest.raises(ProviderError) as caught:
            await guarded(embedder.batch_api().submit(TEXTS))
    finally:
        await embedder.aclose()
    assert caught.value.code == "provider_rejected"
    assert API_KEY not in caught.value.message and API_KEY not in caplog.text


@pytest.mark.parametrize(
    "settings",
    [
        {"provider": "cohere", "api_key": "k"},
        {"provider": "gemini", "api_key": "k", "dim": 8},
        {"provider": "local"},
        {"provider": "azure_openai", "api_key": "k", "base_url": "http://127.0.0.1:9", "deployment": "d", "dim": 1536},
    ],
)
def test_providers_without_a_batch_api_refuse_precisely(settings: dict[str, Any]) -> None:
    embedder = build_embedder(EmbeddingConfig(**settings))
    with pytest.raises(BatchNotSupported) as caught:
        embedder.batch_api()
    error = caught.value
    assert error.code == "batch_unsupported" and error.status == 422
    assert f"embedding.provider {settings['provider']!r}" in error.message and "batch=True" in error.message
