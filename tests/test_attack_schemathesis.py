"""Every operation of ``openapi/openapi.json``, fuzzed by schemathesis through each adapter in-process.

The FastAPI app is driven as ASGI and the Flask and Django apps as WSGI, each on its own fresh
database with a few documents. Schemathesis's whole engine runs, as ``st run --checks all`` does:
the examples, coverage, fuzzing and stateful phases, every check (no 5xx, every status, body,
content type and header as the document says, schema-valid requests accepted and schema-invalid
ones refused, deleted resources gone). The example budget is small on purpose; a larger run is
``benchmarks/contract/run.py``. What the run adjusts, and why, is in ``tests/contract_run.py``; the
injection suite (``test_attack_injection.py``) covers the hostile values by hand.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import schemathesis

from context_engine import ContextEngine
from routing_core import sync_bridge
from tests.conftest import make_config
from tests.contract_run import StoreState, bind, engine_config, run_contract, unbind
from tests.test_conformance import configure_django, fresh_database

SPEC = Path(__file__).resolve().parent.parent / "openapi" / "openapi.json"
PREFIX = "/context"
EXAMPLES = 4  # per operation, phase and adapter
ADAPTERS = ("fastapi", "flask", "django")


def _allow(request: Any) -> bool:
    return True


def _principals(request: Any) -> list[str]:
    return ["group:hr"]


def _app(adapter: str, engine: ContextEngine, stack: ExitStack) -> Any:
    """The host application of one adapter, mounted under ``PREFIX``."""
    mount = {"auth": _allow, "principals": _principals}
    if adapter == "fastapi":
        from fastapi import FastAPI

        from context_engine import create_router

        app = FastAPI()
        app.include_router(create_router(engine, **mount), prefix=PREFIX)
        return app
    if adapter == "flask":
        import flask

        from context_engine import create_flask_blueprint

        app = flask.Flask(__name__)
        app.register_blueprint(create_flask_blueprint(engine, **mount), url_prefix=PREFIX)
        return app
    configure_django()
    from django.core.handlers.wsgi import WSGIHandler
    from django.test import override_settings
    from django.urls import include, path

    from context_engine import create_django_urlpatterns

    urlconf = types.ModuleType("context_engine_attack_urls")
    urlconf.urlpatterns = [path("context/", include(create_django_urlpatterns(engine, **mount)))]  # type: ignore[attr-defined]
    stack.enter_context(override_settings(ROOT_URLCONF=urlconf, ALLOWED_HOSTS=["*"]))
    return WSGIHandler()


@contextmanager
def mounted_schema(adapter: str, pg_base_url: str, max_examples: int = EXAMPLES) -> Iterator[Any]:
    """The checked-in document, bound to one adapter's app on a fresh database with two documents."""
    with ExitStack() as stack, fresh_database(pg_base_url) as url:
        engine = ContextEngine(make_config(url))
        seed = ("Leave policy: 25 days a year.", "Runbook: promote the replica, then repoint.")
        for number, text in enumerate(seed):
            sync_bridge.run(engine.ingest(text=text, name=f"seed-{number}.md", acl=["group:hr"]))
        spec = json.loads(SPEC.read_text(encoding="utf-8"))
        spec["servers"] = [{"url": PREFIX}]
        schema = schemathesis.openapi.from_dict(spec, config=engine_config(max_examples))
        schema.app = _app(adapter, engine, stack)
        page = sync_bridge.run(engine.list_documents(principals=["group:hr"], limit=1))
        assert page.next_cursor is not None
        # the callers are not trusted: the revision they may pass back is their view's handle
        revision = sync_bridge.run(engine.revision(principals=["group:hr"]))
        bind(schema, StoreState(cursor=page.next_cursor, revision=revision))
        try:
            yield schema
        finally:
            unbind(schema)
            sync_bridge.run(engine.aclose())


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_every_operation_answers_inside_its_contract(adapter: str, pg_base_url: str) -> None:
    with mounted_schema(adapter, pg_base_url) as schema:
        found = run_contract(schema)
    assert found.failures == [], "\n\n".join(found.failures)
    assert not found.errors, found.errors
    assert found.cases > 100, found  # every phase ran
    assert found.statuses[200] and found.statuses[201] and found.statuses[400], found.statuses
