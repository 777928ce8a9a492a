"""Smoke test: each example app imports, mounts at /context and answers a search through its test client."""

from __future__ import annotations

import atexit
import importlib.util
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TOKEN = "example-token"

# (method, path, headers, json body) -> (status, parsed body)
Send = Callable[[str, str, dict[str, str], Any], tuple[int, Any]]


def load(relative: str) -> ModuleType:
    """Import an example file fresh, under a name of its own (examples are scripts, not a package)."""
    name = f"example_{Path(relative).stem}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def fastapi_example() -> Iterator[Send]:
    from fastapi.testclient import TestClient

    module = load("fastapi_app.py")
    try:
        with TestClient(module.app) as client:  # the lifespan closes the engine on the way out

            def send(method: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
                resp = client.request(method, path, headers=headers, json=body)
                return resp.status_code, resp.json()

            yield send
    finally:
        sys.modules.pop(module.__name__, None)


@contextmanager
def flask_example() -> Iterator[Send]:
    module = load("flask_app.py")
    client = module.app.test_client()

    def send(method: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        resp = client.open(path, method=method, headers=headers, json=body)
        return resp.status_code, resp.get_json()

    try:
        yield send
    finally:
        atexit.unregister(module.close_engine)
        module.close_engine()
        sys.modules.pop(module.__name__, None)


@contextmanager
def django_example() -> Iterator[Send]:
    module = load("django_project/project.py")
    from django.test import Client, override_settings

    client = Client(enforce_csrf_checks=True)

    def send(method: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        data = b"" if body is None else json.dumps(body).encode()
        resp = client.generic(method, path, data=data, content_type="application/json", headers=headers)
        return resp.status_code, json.loads(resp.content)

    try:
        # the settings are process-wide: whichever test configured them first, use the example's own
        with override_settings(**module.SETTINGS):
            yield send
    finally:
        atexit.unregister(module.close_engine)
        module.close_engine()
        sys.modules.pop(module.__name__, None)


EXAMPLE_APPS = {"fastapi": fastapi_example, "flask": flask_example, "django": django_example}


@pytest.fixture
def example_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples read ``CE_*`` settings and the token from the environment: point them at a test database."""
    monkeypatch.setenv("CE_DATABASE_URL", database_url)
    monkeypatch.setenv("CE_STORAGE__AUTO_MIGRATE", "true")
    monkeypatch.setenv("CONTEXT_API_TOKEN", TOKEN)


@pytest.mark.parametrize("framework", list(EXAMPLE_APPS))
def test_example_app_answers_a_search(example_env: None, framework: str) -> None:
    hr = {"Authorization": f"Bearer {TOKEN}", "X-Principals": "group:hr"}
    with EXAMPLE_APPS[framework]() as send:
        status, body = send(
            "POST",
            "/context/documents",
            hr,
            {"text": "The office closes for the summer holidays in July.", "name": "holidays.md", "acl": ["group:hr"]},
        )
        assert status == 201, body
        status, body = send("POST", "/context/search", hr, {"query": "summer holidays", "top_k": 3})
        assert status == 200, body
        assert [hit["document_name"] for hit in body["hits"]] == ["holidays.md"]
        status, body = send("POST", "/context/search", {"X-Principals": "group:hr"}, {"query": "summer holidays"})
        assert (status, body["error"]["code"]) == (401, "unauthorized")
        status, body = send(
            "POST", "/context/search", {**hr, "X-Principals": "group:eng"}, {"query": "summer holidays"}
        )
        assert (status, body["hits"]) == (200, [])


def test_the_fastapi_example_serves_its_docs_from_local_files(example_env: None) -> None:
    """``/docs`` of the example loads Swagger UI from the app itself (the ``docs`` extra), as ``serve`` does."""
    import re

    from fastapi.testclient import TestClient

    from tests.test_cli import EXTERNAL, local_reference

    module = load("fastapi_app.py")
    try:
        with TestClient(module.app) as client:
            html = client.get("/docs").text
            assert EXTERNAL.search(html) is None, EXTERNAL.search(html)
            assets = re.findall(r"""(?:src|href)="([^"]+)\"""", html)
            assert assets
            for asset in assets:
                assert local_reference(asset), asset
                assert client.get(asset).status_code == 200, asset
    finally:
        sys.modules.pop(module.__name__, None)


def test_every_example_reads_the_database_from_one_variable() -> None:
    """``CE_DATABASE_URL``, as the library itself: no example has a variable name of its own for it."""
    import re

    for path in sorted(EXAMPLES.rglob("*.py")):
        assert re.search(r"(?<!CE_)DATABASE_URL", path.read_text()) is None, path
