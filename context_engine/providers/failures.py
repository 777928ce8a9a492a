"""What a failed provider call means to the caller: retry it, halve the batch, or give up.

One mapping for every remote provider: 429 and 5xx are retryable (429 with its ``Retry-After``),
a transport error is retryable and named by its type only (no URL, no headers), and any other
status is final. Embedding calls also say how many inputs they sent, so a 413 or a 400 that says
"too large" becomes :class:`BatchTooLarge` (the caller halves) or ``InputTooLarge`` (one input).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from context_engine.errors import InputTooLarge, ProviderError
from context_engine.providers.redact import error_snippet, redact
from context_engine.providers.retry import RetryableFailure, parse_retry_after

# How providers phrase "this request is too big" in a 400 body (OpenAI, Azure, Cohere, Voyage,
# and the common self-hosted servers).
_TOO_LARGE = re.compile(
    r"too (large|long|many)|maximum context length|context length"
    r"|max(imum)?( allowed)?( number of)? (tokens|texts|inputs|input|batch|array)"
    r"|per (request|batch|call)|batch size|array size|payload|exceeds?",
    re.IGNORECASE,
)


class BatchTooLarge(ProviderError):
    """The provider refused a batch for its size: the caller may halve it and try again.

    Raised for 413, and for 400 whose body says the input/batch is too large, when the batch
    holds more than one input (a single input too large is ``InputTooLarge``: halving cannot help).
    """

    code = "provider_rejected"
    status = 413


def status_failure(
    what: str,
    status: int,
    body: Any,
    headers: Mapping[str, str] | None,
    *,
    secrets: tuple[str, ...],
    details: dict[str, Any] | None = None,
    batch_size: int | None = None,
) -> Exception:
    """One non-2xx reply as the retry loop sees it (``what`` names the call: "openai chat").

    ``batch_size`` (embedding calls only) turns a size refusal into ``BatchTooLarge`` or
    ``InputTooLarge``; without it every status other than 429/5xx is ``provider_rejected``.
    """
    snippet = error_snippet(body, secrets)
    message = f"{what} failed with HTTP {status}" + (f": {snippet}" if snippet else "")
    details = {**(details or {}), "status": status}
    if status == 429:
        return RetryableFailure(message, retry_after=parse_retry_after(headers))
    if status >= 500:
        return RetryableFailure(message)
    if batch_size is not None and (status == 413 or (status == 400 and _TOO_LARGE.search(snippet))):
        if batch_size <= 1:
            return InputTooLarge(message, details=details)
        return BatchTooLarge(message, code="provider_rejected", details={**details, "batch_size": batch_size})
    return ProviderError(message, code="provider_rejected", details=details)


def transport_failure(what: str, exc: BaseException, secrets: tuple[str, ...]) -> RetryableFailure:
    """A connection error or a per-attempt timeout: retryable, described by its type."""
    text = redact(str(exc), secrets)
    return RetryableFailure(f"{what} could not be reached ({type(exc).__name__}{': ' + text if text else ''})")

