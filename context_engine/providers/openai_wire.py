"""What OpenAI's API and its copies expect of every request, embeddings and chat alike: where the
request goes (``openai``, an Azure deployment, a ``custom`` base URL) and how the key is sent."""

from __future__ import annotations

from urllib.parse import quote

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
AZURE_DEFAULT_API_VERSION = "2024-10-21"


def auth_headers(provider: str, api_key: str | None) -> dict[str, str]:
    """Azure takes the key as ``api-key``; OpenAI and the servers that copy it as a bearer token."""
    if not api_key:
        return {}
    if provider == "azure_openai":
        return {"api-key": api_key}
    return {"Authorization": f"Bearer {api_key}"}


def azure_deployment_url(
    base_url: str, deployment: str, path: str, api_version: str | None
) -> tuple[str, dict[str, str]]:
    """The URL of ``path`` (``embeddings``, ``chat/completions``) on one Azure deployment, and its query."""
    url = f"{base_url.rstrip('/')}/openai/deployments/{quote(deployment, safe='')}/{path}"
    return url, {"api-version": api_version or AZURE_DEFAULT_API_VERSION}
