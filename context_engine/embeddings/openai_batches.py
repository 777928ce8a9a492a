"""OpenAI's Batch API for embeddings (``openai``, and ``custom`` servers that copy ``/files`` + ``/batches``).

Submitting uploads one JSONL line per chunk (``custom_id`` is the chunk's position) to ``/files``
with purpose ``batch`` and creates the job on ``/batches``. Creating a job is not idempotent (a
retry after a 5xx that actually landed would be a second paid job), so that one request is never
retried; the upload and every poll retry like any other request. The output file is read as a
stream and handed over one ``(position, vector)`` at a time, so a 50,000-chunk result never sits
in memory at once. The input file is staged in a spooled temporary file for the same reason.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from typing import IO, Any, TypeVar

import httpx

from context_engine.embeddings.batches import BatchHandle, BatchNotSupported, BatchProgress, BatchResultInvalid
from context_engine.errors import DimensionMismatch, InvalidRequest, ProviderError
from context_engine.providers.failures import status_failure, transport_failure
from context_engine.providers.http import HttpClientHolder
from context_engine.providers.redact import error_snippet
from context_engine.providers.retry import RetryableFailure, with_retries

T = TypeVar("T")

#: the endpoint every line of the input file names
EMBEDDINGS_ENDPOINT = "/v1/embeddings"
#: OpenAI's cap on requests in one batch file (one request per chunk here)
MAX_BATCH_REQUESTS = 50_000
COMPLETION_WINDOW = "24h"
_PENDING = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
#: the input file is kept in memory up to this size, then spills to a temporary file
_SPOOL_BYTES = 8 * 1024 * 1024


class OpenAIBatchClient:
    """The batch side of an OpenAI-compatible embedder: same endpoint, key, model, width and client."""

    def __init__(
        self,
        *,
        provider: str,
        api_base: str,
        model: str,
        dim: int,
        dimensions: int | None,
        embedding_key: str,
        headers: Callable[[], dict[str, str]],
        http: HttpClientHolder,
        secrets: tuple[str, ...],
        max_retries: int,
        timeout: float,
        backoff_base: float,
    ):
        self.provider = provider
        self._base = api_base.rstrip("/")
        self._model = model
        self._dim = dim
        self._dimensions = dimensions
        self._key = embedding_key
        self._headers = headers
        self._http = http
        self._secrets = secrets
        self._max_retries = max_retries
        self._timeout = timeout
        self.backoff_base = backoff_base

    # -- submit ------------------------------------------------------------------------------------

    async def submit(self, texts: Sequence[str]) -> BatchHandle:
        """Upload every text as one job; the handle's positions are the order of ``texts``."""

        async def one_page() -> AsyncIterator[Sequence[str]]:
            yield texts

        return await self.submit_pages(one_page(), len(texts))

    def check_count(self, count: int) -> None:
        """Refuse a chunk count one job cannot hold, before anything is stored or sent."""
        if count < 1:
            raise InvalidRequest("an embedding batch needs at least one chunk", code="batch_empty")
        if count > MAX_BATCH_REQUESTS:
            raise BatchNotSupported(
                f"this document has {count} chunks and one {self.provider} batch holds at most "
                f"{MAX_BATCH_REQUESTS}; ingest it without batch=True",
                details={"chunks": count, "limit": MAX_BATCH_REQUESTS},
            )

    async def submit_pages(self, pages: AsyncIterable[Sequence[str]], count: int) -> BatchHandle:
        """Upload ``count`` texts that arrive a page at a time (a large document's chunks are read
        from the database in pages, never all held), as one job in arrival order.

        The count is checked before anything is read or sent; pages that add up to another count
        are refused before the job is created.
        """
        self.check_count(count)
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as staged:
            position = 0
            async for page in pages:
                for text in page:
                    staged.write(self._line(position, text))
                    position += 1
            if position != count:
                raise InvalidRequest(
                    f"the batch was announced with {count} inputs but {position} arrived; nothing was sent",
                    code="batch_count_mismatch",
                )
            file_id = await self._upload(staged)
        batch = await self._request(
            "POST",
            "/batches",
            body={
                "input_file_id": file_id,
                "endpoint": EMBEDDINGS_ENDPOINT,
                "completion_window": COMPLETION_WINDOW,
                "metadata": {"embedding_key": self._key},
            },
            retries=0,
        )
        batch_id = batch.get("id") if isinstance(batch, dict) else None
        if not isinstance(batch_id, str) or not batch_id:
            raise self._malformed("batch")
        return BatchHandle(self.provider, batch_id, file_id, count, self._key)

    def _line(self, position: int, text: str) -> bytes:
        body: dict[str, Any] = {"model": self._model, "input": text}
        if self._dimensions is not None:
            body["dimensions"] = self._dimensions
        line = {"custom_id": str(position), "method": "POST", "url": EMBEDDINGS_ENDPOINT, "body": body}
        return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"

    async def _upload(self, staged: IO[bytes]) -> str:
        client = self._http.get()

        async def attempt() -> str:
            staged.seek(0)
            try:
                response = await client.post(
                    f"{self._base}/files",
                    data={"purpose": "batch"},
                    files={"file": ("embeddings.jsonl", staged, "application/jsonl")},
                    headers=self._headers(),
                    timeout=self._timeout,
                )
            except httpx.TransportError as exc:
                raise transport_failure(self.provider, exc, self._secrets) from exc
            self._raise_for_status(response)
            file_id = self._json(response, "file").get("id")
            if not isinstance(file_id, str) or not file_id:
                raise self._malformed("file")
            return file_id

        return await self._retried(attempt, self._max_retries)

    async def cancel(self, handle: BatchHandle) -> None:
        """Ask the provider to stop a job nobody will collect (a newer version superseded it), so it
        is not billed for the rest of its inputs. One attempt: a job that already ended refuses."""
        await self._request("POST", f"/batches/{handle.batch_id}/cancel", retries=0)

    # -- poll --------------------------------------------------------------------------------------

    async def poll(self, handle: BatchHandle) -> BatchProgress:
        """The job's state now. ``completed`` only when every input has a reply and none failed."""
        self._check_handle(handle)
        batch = await self._request("GET", f"/batches/{handle.batch_id}", retries=self._max_retries)
        status = str(batch.get("status") or "")
        counts = batch.get("request_counts") or {}
        done, failed = int(counts.get("completed") or 0), int(counts.get("failed") or 0)
        total = int(counts.get("total") or handle.count)
        output = batch.get("output_file_id") or None
        if status in _PENDING:
            return BatchProgress("pending", status, done, failed, total)
        if status == "completed" and failed == 0 and done == handle.count and output:
            return BatchProgress("completed", status, done, failed, total, output_file_id=str(output))
        return BatchProgress(
            "failed", status, done, failed, total, output_file_id=output, message=await self._why(batch, handle)
        )

    async def _why(self, batch: dict[str, Any], handle: BatchHandle) -> str:
        """One line saying why a job did not produce every vector."""
        status = str(batch.get("status") or "unknown")
        errors = (batch.get("errors") or {}).get("data") or []
        if errors:
            first = errors[0] if isinstance(errors[0], dict) else {}
            return f"{self.provider} batch {status}: {error_snippet(first.get('message'), self._secrets)}"
        counts = batch.get("request_counts") or {}
        failed = int(counts.get("failed") or 0)
        if status == "completed" and failed:
            detail = await self._first_error_line(batch.get("error_file_id"))
            return f"{failed} of {handle.count} embedding requests failed" + (f": {detail}" if detail else "")
        if status == "completed":
            return f"{self.provider} batch completed with {int(counts.get('completed') or 0)} of {handle.count} replies"
        return f"{self.provider} batch {status}"

    async def _first_error_line(self, error_file_id: Any) -> str:
        if not isinstance(error_file_id, str) or not error_file_id:
            return ""
        url = f"{self._base}/files/{error_file_id}/content"
        try:
            async with self._http.get().stream("GET", url, headers=self._headers(), timeout=self._timeout) as response:
                if response.status_code >= 300:
                    return ""
                async for line in response.aiter_lines():
                    if line.strip():
                        record = json.loads(line)
                        body = ((record.get("response") or {}).get("body")) or record.get("error")
                        return error_snippet(body, self._secrets)
        except (httpx.TransportError, ValueError, AttributeError):
            return ""  # the reason is a courtesy: the counts already say the job failed
        return ""

    # -- collect -----------------------------------------------------------------------------------

    async def vectors(self, handle: BatchHandle, progress: BatchProgress) -> AsyncIterator[tuple[int, list[float]]]:
        """Each ``(position, vector)`` of a completed job, as read from its output file.

        Raises ``BatchResultInvalid`` when the output names a position twice or outside the job, a
        line failed, or (at the end) a position never came: the caller keeps what it stored and may
        poll again or embed the rest without a batch.
        """
        self._check_handle(handle)
        if progress.status != "completed" or not progress.output_file_id:
            raise InvalidRequest(
                f"batch {handle.batch_id} is {progress.provider_status}, not completed", code="batch_not_ready"
            )
        seen = bytearray(handle.count)
        received = 0
        url = f"{self._base}/files/{progress.output_file_id}/content"
        try:
            async with self._http.get().stream("GET", url, headers=self._headers(), timeout=self._timeout) as response:
                if response.status_code >= 300:
                    await response.aread()
                    raise self._final(self._status_error(response))
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    position, vector = self._parse_line(line, handle.count)
                    if seen[position]:
                        raise BatchResultInvalid(f"{self.provider} batch output repeats position {position}")
                    seen[position] = 1
                    received += 1
                    yield position, vector
        except httpx.TransportError as exc:
            raise ProviderError(
                transport_failure(self.provider, exc, self._secrets).message, code="provider_unavailable"
            ) from None
        if received != handle.count:
            raise BatchResultInvalid(
                f"{self.provider} batch output covered {received} of {handle.count} chunks",
                details={"received": received, "expected": handle.count},
            )

    def _parse_line(self, line: str, count: int) -> tuple[int, list[float]]:
        try:
            record = json.loads(line)
            position = int(record["custom_id"])
            response = record.get("response") or {}
            status = int(response.get("status_code") or 0)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise BatchResultInvalid(f"{self.provider} batch output has a line that is not a batch reply") from None
        if not 0 <= position < count:
            raise BatchResultInvalid(f"{self.provider} batch output names position {position} outside 0..{count - 1}")
        if status != 200 or record.get("error"):
            detail = error_snippet((response.get("body") if response else None) or record.get("error"), self._secrets)
            raise BatchResultInvalid(
                f"{self.provider} batch request {position} failed" + (f": {detail}" if detail else "")
            )
        try:
            vector = [float(x) for x in response["body"]["data"][0]["embedding"]]
        except (KeyError, IndexError, TypeError, ValueError):
            raise BatchResultInvalid(f"{self.provider} batch reply {position} holds no embedding") from None
        if len(vector) != self._dim:
            raise DimensionMismatch(
                f"{self.provider} batch returned {len(vector)}-dimensional vectors but embedding.dim is {self._dim}",
                details={"provider": self.provider, "expected": self._dim, "actual": len(vector)},
            )
        return position, vector

    # -- shared ------------------------------------------------------------------------------------

    def _check_handle(self, handle: BatchHandle) -> None:
        if handle.embedding_key != self._key:
            raise InvalidRequest(
                f"batch {handle.batch_id} was submitted for {handle.embedding_key!r} but the embedder is now "
                f"{self._key!r}; its vectors cannot be stored under the current embedding settings",
                code="batch_embedding_mismatch",
            )

    async def _request(self, method: str, path: str, *, retries: int, body: Any = None) -> dict[str, Any]:
        client = self._http.get()

        async def attempt() -> dict[str, Any]:
            try:
                response = await client.request(
                    method, f"{self._base}{path}", json=body, headers=self._headers(), timeout=self._timeout
                )
            except httpx.TransportError as exc:
                raise transport_failure(self.provider, exc, self._secrets) from exc
            self._raise_for_status(response)
            return self._json(response, "batch")

        return await self._retried(attempt, retries)

    async def _retried(self, attempt: Callable[[], Awaitable[T]], retries: int) -> T:
        return await with_retries(
            f"{self.provider} embeddings",
            attempt,
            max_retries=retries,
            backoff_base=self.backoff_base,
            secrets=self._secrets,
            details={"provider": self.provider},
        )

    def _final(self, failure: Exception) -> Exception:
        """Outside a retry loop a retryable failure is simply unavailable: the next poll tries again."""
        if isinstance(failure, RetryableFailure):
            return ProviderError(failure.message, code="provider_unavailable", details={"provider": self.provider})
        return failure

    def _raise_for_status(self, response: httpx.Response) -> None:
        if response.status_code >= 300:
            raise self._status_error(response)

    def _status_error(self, response: httpx.Response) -> Exception:
        return status_failure(
            f"{self.provider} embeddings request",
            response.status_code,
            response.content,
            response.headers,
            secrets=self._secrets,
            details={"provider": self.provider},
            batch_size=1,
        )

    def _json(self, response: httpx.Response, what: str) -> dict[str, Any]:
        try:
            data = response.json()
        except ValueError:
            raise self._malformed(what) from None
        if not isinstance(data, dict):
            raise self._malformed(what)
        return data

    def _malformed(self, what: str) -> ProviderError:
        return ProviderError(
            f"{self.provider} sent a reply that is not a {what} object",
            code="provider_unavailable",
            details={"provider": self.provider},
        )
