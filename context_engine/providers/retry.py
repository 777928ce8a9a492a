"""One retry policy for every remote call: 429, 5xx and transport errors retried, ``Retry-After`` honoured.

``max_retries`` counts retries on top of the first attempt; the wait is the provider's
``retry-after-ms``/``Retry-After`` when it sent one (capped), else exponential backoff with jitter.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from context_engine.errors import ProviderError
from context_engine.providers.redact import redact

T = TypeVar("T")

#: Retry-After is honoured up to this many seconds; a longer wait is better surfaced as unavailable
MAX_RETRY_AFTER_SECONDS = 60.0
MAX_BACKOFF_SECONDS = 8.0


class RetryableFailure(Exception):
    """One attempt failed in a way another attempt may not (429, 5xx, connection error, timeout)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date), capped."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    value: float | None = None
    if "retry-after-ms" in lowered:
        try:
            value = float(lowered["retry-after-ms"]) / 1000.0
        except ValueError:
            value = None
    if value is None and "retry-after" in lowered:
        raw = lowered["retry-after"].strip()
        try:
            value = float(raw)
        except ValueError:
            try:
                value = email.utils.parsedate_to_datetime(raw).timestamp() - time.time()
            except (TypeError, ValueError, IndexError, OverflowError):
                value = None
    if value is None:
        return None
    return min(max(value, 0.0), MAX_RETRY_AFTER_SECONDS)


def backoff_delay(attempt: int, base: float) -> float:
    """Exponential backoff with a little jitter, so synchronised clients spread out."""
    delay = min(base * (2**attempt), MAX_BACKOFF_SECONDS)
    return delay + random.uniform(0, delay * 0.25)


async def with_retries(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    max_retries: int,
    backoff_base: float,
    secrets: tuple[str, ...],
    details: dict[str, Any] | None = None,
) -> T:
    """Run ``attempt`` once plus up to ``max_retries`` retries of its ``RetryableFailure``s.

    Every other exception propagates from the attempt that raised it; exhaustion raises
    ``ProviderError(code="provider_unavailable")`` saying ``what`` was unavailable, with ``details``
    and the attempt count.
    """
    attempts = max_retries + 1
    last = ""
    for number in range(attempts):
        try:
            return await attempt()
        except RetryableFailure as failure:
            last = failure.message
            if number + 1 >= attempts:
                break
            delay = failure.retry_after if failure.retry_after is not None else backoff_delay(number, backoff_base)
            await asyncio.sleep(delay)
    raise ProviderError(
        redact(f"{what} unavailable after {attempts} attempt(s): {last}", secrets),
        code="provider_unavailable",
        details={**(details or {}), "attempts": attempts},
    )
