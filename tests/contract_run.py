"""Run schemathesis's whole engine (every phase, every check) in process against one adapter's app.

What ``st run --checks all`` does over HTTP, with the app as the transport: the examples, coverage,
fuzzing and stateful phases, each failure reported by operation, check, what was sent and what came
back. ``tests/test_attack_schemathesis.py`` runs it with a small budget per adapter,
``benchmarks/contract/run.py`` with a larger one.

A schema states shapes, not the store's state, so three kinds of schema-valid value are valid only
in a given state; for positive cases (only) the run puts in a value of that state, and negative
cases go out as generated:

* a page ``cursor`` continues a list only when the server issued it (any other one is 400
  ``invalid_cursor``, as the document says): a cursor the seeded store issued is sent instead;
  a tools cursor continues only the query it was issued for, so it is left out there;
* an ``as_of`` past the current revision is 400 (the document says so; the schema cannot state
  the revision): the seeded store's revision is sent instead, and ``version`` is left out beside it;
* werkzeug's test encoder (the WSGI transport) writes an empty file part without the CRLF RFC 2046
  puts before the next delimiter, so Django sees no file: a one-byte file keeps the case meaningful.

And one check is read as the document states the API: a deleted document's history stays readable
(``GET /documents/{id}/versions``, ``GET /documents/{id}`` with ``as_of`` or ``version``), so
``use_after_free`` does not apply to reads of history; it applies to every other read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import schemathesis
from schemathesis.engine import Status, events, from_schema
from schemathesis.specs.openapi.checks import use_after_free

#: a schema-valid upload whose bytes are no readable document is 422 (nothing stored), a documented
#: answer the schema cannot foresee: it counts as accepting schema-valid data, as 404 and 409 do
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]


#: generous on purpose: the figure that matters is the server's own bound on work per request
REQUEST_TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class StoreState:
    """What the seeded store issued: a page cursor and its revision then."""

    cursor: str
    revision: int


@dataclass
class ContractRun:
    """What one engine run found: cases sent, statuses seen, and each failure described."""

    cases: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def engine_config(max_examples: int) -> schemathesis.Config:
    """Every phase and every check, strings the transport can carry, ``max_examples`` per operation.

    No NUL characters: the routes refuse them on purpose (PostgreSQL text cannot hold one), which
    the injection suite checks value by value.
    """
    return schemathesis.Config.from_dict(
        {
            # the run waits for what the server takes: a request cut off is no answer to check
            "request-timeout": REQUEST_TIMEOUT_SECONDS,
            "generation": {"allow-x00": False, "codec": "utf-8", "max-examples": max_examples, "deterministic": True},
            "phases": {name: {"enabled": True} for name in ("examples", "coverage", "fuzzing", "stateful")},
            "checks": {
                "enabled": True,
                "positive_data_acceptance": {"expected-statuses": ACCEPTED},
                "use_after_free": {"enabled": False},  # replaced by ``use_after_free_of_the_present``
            },
        }
    )


#: each bound schema's store, by the schema's id (schemathesis takes ``before_call`` only as a
#: process-wide hook, and its schemas are not hashable)
_STATES: dict[int, StoreState] = {}


def bind(schema: Any, state: StoreState) -> None:
    """Have positive cases of ``schema`` sent in the store's state (see the module's docstring)."""
    _STATES[id(schema)] = state


def unbind(schema: Any) -> None:
    _STATES.pop(id(schema), None)


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    state = _STATES.get(id(case.operation.schema))
    if state is not None:
        _in_state(case, state)


def _in_state(case: Any, state: StoreState) -> None:
    if isinstance(case.body, dict) and case.body.get("file") in (b"", ""):
        case.body["file"] = b"\n"
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return
    query = case.query if isinstance(case.query, dict) else None
    if query:
        if isinstance(query.get("cursor"), str):
            if case.operation.path == "/tools":
                query.pop("cursor")
            else:
                query["cursor"] = state.cursor
        if isinstance(query.get("as_of"), int | str):
            query["as_of"] = state.revision
            query.pop("version", None)
    if isinstance(case.body, dict):
        for key in ("as_of", "asOf"):
            value = case.body.get(key)  # JSON Schema's integers include 138.0
            if isinstance(value, int | float) and not isinstance(value, bool):
                case.body[key] = state.revision


def _reads_history(case: Any) -> bool:
    query = case.query if isinstance(case.query, dict) else {}
    return case.operation.path.endswith("/versions") or "as_of" in query or "version" in query


@schemathesis.check
def use_after_free_of_the_present(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis's ``use_after_free``, except for reads of a deleted document's history."""
    if _reads_history(case):
        return None
    return use_after_free(ctx, response, case)


def run_contract(schema: Any) -> ContractRun:
    """Execute every phase of ``schema`` (bound to an app) and collect what failed."""
    found = ContractRun()
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            recorder = event.recorder
            found.cases += len(recorder.cases)
            for interaction in recorder.interactions.values():
                if interaction.response is not None:
                    found.statuses[interaction.response.status_code] += 1
            for case_id, checks in recorder.checks.items():
                for check in checks:
                    if check.status == Status.FAILURE and check.failure_info is not None:
                        found.failures.append(_describe(recorder, case_id, check))
        elif isinstance(event, events.NonFatalError | events.FatalError):
            found.errors.append(str(getattr(event, "info", event))[:600])
    return found


def _describe(recorder: Any, case_id: str, check: Any) -> str:
    """``operation | check | title: message`` and the request and answer that showed it."""
    case = recorder.cases[case_id].value
    failure = check.failure_info.failure
    sent = {"path": case.path_parameters, "query": case.query, "type": case.media_type, "body": case.body}
    interaction = recorder.interactions.get(case_id)
    answer = ""
    if interaction is not None and interaction.response is not None:
        answer = f"{interaction.response.status_code} {interaction.response.content[:300]!r}"
    return f"{case.operation.label} | {check.name} | {failure.title}: {failure.message} | got {answer} | sent {sent!r}"[
        :2000
    ]
