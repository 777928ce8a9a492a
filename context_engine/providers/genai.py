"""The ``google-genai`` SDK as both Gemini providers use it: Gemini API (key) or Vertex AI (ADC).

The embedder and the LLM share the client construction (the SDK's retries off, a per-attempt
timeout, the host's httpx client), where ``vertex_ai`` goes, and how an SDK exception reads as
an HTTP failure or a credentials problem.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from context_engine.errors import ConfigError, ProviderError
from context_engine.providers.failures import status_failure
from context_engine.providers.redact import redact
from context_engine.providers.retry import RetryableFailure
from context_engine.providers.sdk import import_sdk

log = logging.getLogger("context_engine.embeddings.gemini")


_NEEDS = "The gemini and vertex_ai providers need the google-genai SDK"


def import_genai() -> Any:
    return import_sdk("google.genai", needed_by=_NEEDS, extra="gemini")


@dataclass(frozen=True)
class GenaiTarget:
    """Which service the SDK talks to and how it signs in (``vertex`` = ADC, else the API key)."""

    vertex: bool
    api_key: str | None
    project: str | None
    location: str | None
    base_url: str | None
    timeout: float


def vertex_target(api_key: Any, project: str | None, location: str | None, base_url: str | None,
                  timeout: float) -> GenaiTarget:  # fmt: skip
    """Where ``vertex_ai`` goes: the project and region as configured, else ``GOOGLE_CLOUD_PROJECT`` /
    ``GOOGLE_CLOUD_LOCATION`` (else the SDK finds them from ADC). An ``api_key`` with no project
    anywhere is Vertex express mode; beside a project it is ignored (the SDK refuses the pair)."""
    project = project or os.environ.get("GOOGLE_CLOUD_PROJECT") or None
    location = location or os.environ.get("GOOGLE_CLOUD_LOCATION") or None
    key = api_key.get_secret_value() if hasattr(api_key, "get_secret_value") else api_key
    if key and project:
        log.info("vertex_ai: api_key is ignored because a project is set (application default credentials)")
        key = None
    return GenaiTarget(True, key or None, project, location, base_url, timeout)


def build_genai_client(genai: Any, target: GenaiTarget, http_client: httpx.AsyncClient) -> Any:
    """A ``genai.Client`` with the SDK's retries off, a per-attempt timeout and ``http_client``.

    Every input is passed explicitly, so ``GOOGLE_API_KEY``/``GOOGLE_GENAI_USE_VERTEXAI`` in the
    environment cannot redirect a configured provider. Vertex credentials are resolved by the SDK
    from application default credentials on the first request.
    """
    options = genai.types.HttpOptions(
        base_url=target.base_url,
        timeout=max(1, int(target.timeout * 1000)),
        retry_options=None,
        httpx_async_client=http_client,
    )
    if target.vertex and target.api_key:  # express mode: a key and no project
        return genai.Client(vertexai=True, api_key=target.api_key, http_options=options)
    if target.vertex:
        return genai.Client(vertexai=True, project=target.project, location=target.location, http_options=options)
    return genai.Client(vertexai=False, api_key=target.api_key, http_options=options)


@dataclass(frozen=True)
class GenaiFailure:
    """An SDK exception read as HTTP: status 0 means nothing was answered (a transport failure)."""

    status: int
    body: Any
    headers: Mapping[str, str] | None


def read_genai_error(exc: BaseException) -> GenaiFailure | None:
    """The status, body and headers of a ``google.genai.errors.APIError``; None for any other exception."""
    errors = import_sdk("google.genai.errors", needed_by=_NEEDS, extra="gemini")
    if not isinstance(exc, errors.APIError):
        return None
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    body = exc.details if exc.details else {"error": {"message": exc.message or ""}}
    return GenaiFailure(int(exc.code or 0), body, headers if isinstance(headers, Mapping) else None)


def credentials_failure(provider: str, exc: BaseException) -> Exception | None:
    """What a failure to obtain Vertex credentials means; None when ``exc`` is not one.

    No credentials at all is a deployment mistake (``ConfigError``); a token endpoint that cannot be
    reached may pass on retry; a refused refresh is final. The exception text is not repeated: it
    can quote the token endpoint's reply.
    """
    auth_errors = import_sdk("google.auth.exceptions", needed_by=_NEEDS, extra="gemini")
    if isinstance(exc, auth_errors.DefaultCredentialsError):
        return ConfigError(
            f"provider {provider!r} found no application default credentials: set GOOGLE_APPLICATION_CREDENTIALS, "
            "attach a service account, or run `gcloud auth application-default login`."
        )
    if isinstance(exc, auth_errors.TransportError):
        return RetryableFailure(f"{provider} could not reach its token endpoint ({type(exc).__name__})")
    if isinstance(exc, auth_errors.GoogleAuthError):
        return ProviderError(
            f"{provider} could not obtain an access token from application default credentials ({type(exc).__name__})",
            code="provider_rejected",
            details={"provider": provider},
        )
    return None


def genai_failure(
    provider: str,
    what: str,
    exc: Exception,
    secrets: tuple[str, ...],
    *,
    details: dict[str, Any] | None = None,
    batch_size: int | None = None,
) -> Exception:
    """What an exception the SDK raised during ``what`` means: an HTTP status, a credentials
    problem, or anything else (a reply it could not read, a rejected argument): final, named by type."""
    failure = read_genai_error(exc)
    if failure is not None:
        return status_failure(what, failure.status, failure.body, failure.headers, secrets=secrets, details=details,
                              batch_size=batch_size)  # fmt: skip
    auth = credentials_failure(provider, exc)
    if auth is not None:
        return auth
    return ProviderError(
        redact(f"{what} failed ({type(exc).__name__}: {exc})", secrets)[:400],
        code="provider_unavailable",
        details=details or {},
    )
