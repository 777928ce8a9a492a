"""Every operation of ``openapi/openapi.json``, fuzzed by schemathesis through each adapter in-process.

The FastAPI app is driven as ASGI and the Flask and Django apps as WSGI, each on its own fresh
database with a few documents. Schemathesis generates valid and invalid requests from the checked-in
document and applies all its default checks: no 5xx, every status and body as the document says,
content types, headers. The example budget is small on purpose (the file should stay well under a
minute); the injection suite (``test_attack_injection.py``) covers the hostile values by hand.
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
from hypothesis import HealthCheck, given, settings

from context_engine import ContextEngine
from context_engine.limits import MAX_CURSOR_CHARS
from routing_core import sync_bridge
from tests.conftest import make_config
from tests.test_conformance import configure_django, fresh_database

SPEC = Path(__file__).resolve().parent.parent / "openapi" / "openapi.json"
PREFIX = "/context"
EXAMPLES = 6  # per operation and adapter
#: Strings the transport can carry (UTF-8) and no NUL: the routes refuse NUL characters on purpose
#: (PostgreSQL text cannot hold one), which the injection suite checks value by value. A valid
#: upload whose bytes are no readable document is 422 (nothing stored), a documented answer the
#: schema cannot foresee: it counts as accepting schema-valid data, as 404 and 409 do by default.
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]
CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {"allow-x00": False, "codec": "utf-8"},
        "checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTED}},
    }
)


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
def mounted_schema(adapter: str, pg_base_url: str) -> Iterator[tuple[Any, str]]:
    """The checked-in document, bound to one adapter's app on a fresh database with two documents."""
    with ExitStack() as stack, fresh_database(pg_base_url) as url:
        engine = ContextEngine(make_config(url))
        seed = ("Leave policy: 25 days a year.", "Runbook: promote the replica, then repoint.")
        for number, text in enumerate(seed):
            sync_bridge.run(engine.ingest(text=text, name=f"seed-{number}.md", acl=["group:hr"]))
        spec = json.loads(SPEC.read_text(encoding="utf-8"))
        spec["servers"] = [{"url": PREFIX}]
        schema = schemathesis.openapi.from_dict(spec, config=CONFIG)
        schema.app = _app(adapter, engine, stack)
        page = sync_bridge.run(engine.list_documents(principals=["group:hr"], limit=1))
        try:
            yield schema, page.next_cursor
        finally:
            sync_bridge.run(engine.aclose())


@pytest.mark.parametrize("adapter", ["fastapi", "flask", "django"])
def test_every_operation_answers_inside_its_contract(adapter: str, pg_base_url: str) -> None:
    with mounted_schema(adapter, pg_base_url) as (schema, cursor):
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) == sum(len(item) for item in schema.raw_schema["paths"].values())
        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                database=None,
                derandomize=True,
            )
            def check(case: schemathesis.Case) -> None:
                given_cursor = (case.query or {}).get("cursor")
                if case.operation.path == "/tools" and given_cursor is not None:
                    # a tools cursor continues only the query and filters it was issued for
                    case.query.pop("cursor")
                elif isinstance(given_cursor, str) and len(given_cursor) <= MAX_CURSOR_CHARS:
                    # a cursor is opaque: only one the server issued is valid, whatever its shape
                    case.query["cursor"] = cursor
                # a revision is valid only up to the store's current one, which the document cannot
                # state; as-of reads have their own tests (tests/test_revision_routes.py)
                if case.query:
                    case.query.pop("as_of", None)
                if isinstance(case.body, dict):
                    case.body.pop("as_of", None)
                    case.body.pop("asOf", None)
                if isinstance(case.body, dict) and case.body.get("file") in (b"", ""):
                    # werkzeug's test encoder (the WSGI transport) writes an empty file part without
                    # the CRLF RFC 2046 puts before the next delimiter; Django's parser then sees no
                    # file. A one-byte file keeps the case meaningful on every adapter.
                    case.body["file"] = b"\n"
                case.call_and_validate()

            check()
