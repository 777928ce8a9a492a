"""The knowledge tool through its three doors, with identical answers.

Every case runs through ``engine.search_knowledge_base``, ``call_knowledge_tool`` and the MCP tool
served by ``create_mcp_app`` (uvicorn on 127.0.0.1, called with the MCP SDK's own client over HTTP).
The three answers must be equal; then the case checks what the answer says. The MCP host reads the
caller's principals and scope from its own request headers through ``current_request()``, as a real
host reads its auth.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import psycopg
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from context_engine import TRUSTED, UNSCOPED, ContextEngine, Scope, call_knowledge_tool
from context_engine.knowledge.tool.actions import actions
from context_engine.mcp import create_mcp_app, current_request
from tests.conftest import make_config
from tests.waiting import until

Corpus = dict[str, str]  # document name -> id
#: the sentence each action that can be off answers (read from the action records)
OFF_SENTENCES = {a.name: a.off_sentence for a in actions() if a.available is not None}

LEAVE_POLICY = """# Leave policy

## Annual leave
Annual leave accrues at two days per month of service.

## Carry over
Up to five unused days of annual leave carry over into the next year.

## Sick leave
Sick leave needs a doctor's note after three days.
"""

CONTRACT = """# Supplier contract

## Term
The contract runs for two years and renews automatically unless cancelled.

## Payment
Invoices are paid within thirty days.
"""


def costs_csv() -> bytes:
    rows = ["region,amount,month"] + [f"{r},{100 + i},2024-{1 + i % 12:02d}" for i, r in
                                       enumerate(["north", "south", "east", "west"] * 5)]
    return ("\n".join(rows) + "\n").encode()


def workbook() -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    first = book.active
    first.title = "Sales"
    first.append(["product", "units", "price"])
    for i in range(6):
        first.append([f"p{i}", i + 1, 9.5 + i])
    second = book.create_sheet("Staff")
    second.append(["name", "team"])
    second.append(["Ada", "core"])
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def manual() -> str:
    """A public manual of 30 sections, longer than one get_doc answer carries."""
    body = " ".join(f"Step {n} of the procedure is described here in plain words." for n in range(28))
    return "# Operations manual\n\n" + "\n\n".join(f"## Chapter {c}\n{body}" for c in range(30))


def wide_csv() -> bytes:
    header = ",".join(f"col{i}" for i in range(30))
    rows = "\n".join(",".join(str(r * i) for i in range(30)) for r in range(3))
    return f"{header}\n{rows}\n".encode()


async def build_corpus(engine: ContextEngine) -> Corpus:
    """Six sources, ACLs, prose, spreadsheets, JSON, one failed document and two oversized ones."""
    docs: list[tuple[dict[str, Any], str]] = [
        ({"text": LEAVE_POLICY, "name": "leave-policy.md", "source_id": "hr", "acl": ["group:hr"]}, "leave-policy.md"),
        ({"text": "Public holidays are New Year's Day and Labour Day.", "name": "holidays.txt", "source_id": "hr"},
         "holidays.txt"),
        ({"file": costs_csv(), "name": "costs.csv", "source_id": "finance"}, "costs.csv"),
        ({"file": workbook(), "name": "sales.xlsx", "source_id": "sheets"}, "sales.xlsx"),
        ({"file": costs_csv(), "name": "budget.csv", "source_id": "sheets"}, "budget.csv"),
        ({"text": "Invoice number 2525 for consulting, total 1,200 EUR.", "name": "invoice-2525.txt",
          "source_id": "finance"}, "invoice-2525.txt"),
        ({"text": CONTRACT, "name": "contract.md", "source_id": "legal", "acl": ["group:legal"]}, "contract.md"),
        ({"file": json.dumps({"service": "billing", "owner": "ops", "retries": 3}).encode(), "name": "config.json",
          "source_id": "finance"}, "config.json"),
        ({"file": b"%PDF-1.4\nnot really a pdf\n%%EOF", "name": "broken.pdf", "source_id": "finance"}, "broken.pdf"),
        ({"text": manual(), "name": "manual.md", "source_id": "archive"}, "manual.md"),
        ({"file": wide_csv(), "name": "wide.csv", "source_id": "archive"}, "wide.csv"),
    ]
    corpus: Corpus = {}
    for kwargs, name in docs:
        report = await engine.ingest(**kwargs, attributes={"owner": "ops"} if name == "config.json" else None)
        corpus[name] = report.documents[0].document_id or ""
    return corpus


@pytest.fixture(scope="module")
def module_database(pg_base_url: str) -> Iterator[str]:
    name = f"kt_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_base_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, _, query = pg_base_url.partition("?")
    try:
        yield head.rsplit("/", 1)[0] + f"/{name}" + (f"?{query}" if query else "")
    finally:
        with psycopg.connect(pg_base_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
async def tool_engine(module_database: str) -> AsyncIterator[ContextEngine]:
    async with ContextEngine(make_config(module_database)) as engine:
        yield engine


@pytest.fixture(scope="module")
async def corpus(tool_engine: ContextEngine) -> Corpus:
    return await build_corpus(tool_engine)


# ---------------------------------------------------------------------------------------- MCP door
def _header_principals() -> Any:
    raw = current_request().headers["x-principals"]  # type: ignore[union-attr]
    return TRUSTED if raw == "trusted" else json.loads(raw)


def _header_scope() -> Any:
    raw = json.loads(current_request().headers["x-scope"])  # type: ignore[union-attr]
    if raw is None:
        return UNSCOPED
    if isinstance(raw, list):
        return raw
    return Scope(source_ids=raw.get("source_ids"), document_ids=raw.get("document_ids"))


class ServerThread:
    """uvicorn serving an ASGI app on 127.0.0.1 in a thread of its own."""

    def __init__(self, app: Any):
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        until(lambda: self.server.started or not self.thread.is_alive(), "uvicorn starting")
        if not self.server.started:
            raise RuntimeError("uvicorn did not start")
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def mcp_url(tool_engine: ContextEngine) -> Iterator[str]:
    """Two mounts on one server: ``/mcp`` as deployed, ``/mcp-runners`` with the host runners below."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    plain = create_mcp_app(tool_engine, principals=_header_principals, scope=_header_scope)
    with_runners = create_mcp_app(
        tool_engine, principals=_header_principals, scope=_header_scope, **RUNNERS  # type: ignore[arg-type]
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        async with plain.lifespan(), with_runners.lifespan():
            yield

    app = Starlette(routes=[Mount("/mcp-runners", with_runners), Mount("/mcp", plain)], lifespan=lifespan)
    with ServerThread(app) as base:
        yield base + "/mcp"


async def echo_compute(instruction: str, *, source_ids: Any, document_ids: Any, principals: Any) -> dict[str, Any]:
    """A host compute runner that reports what it was handed (and one address to be masked)."""
    return {"result": instruction.upper(), "source_ids": source_ids, "document_ids": document_ids,
            "principals": principals, "contact": "ops@example.com"}


async def echo_map_reduce(instruction: str, **kwargs: Any) -> dict[str, Any]:
    return {"results": [{"document_id": d, "data": {"answer": instruction}} for d in sorted(kwargs["document_ids"])],
            "processed": len(kwargs["document_ids"]), "limit": kwargs["limit"]}


RUNNERS = {"compute": echo_compute, "map_reduce": echo_map_reduce}


def _scope_header(scope: Any) -> str:
    if scope is UNSCOPED:
        return "null"
    if isinstance(scope, Scope):
        return json.dumps({"source_ids": scope.source_ids, "document_ids": scope.document_ids})
    return json.dumps(list(scope))


async def mcp_call(url: str, principals: Any, scope: Any, args: dict[str, Any]) -> dict[str, Any]:
    headers = {"x-principals": "trusted" if principals is TRUSTED else json.dumps(principals),
               "x-scope": _scope_header(scope)}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            result = await client.call_tool("search_knowledge_base", args)
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
    assert result.is_error == (not result.structured_content["success"])
    return result.structured_content


# -------------------------------------------------------------------------------------- the cases
@dataclass
class Case:
    name: str
    args: Callable[[Corpus], dict[str, Any]]
    check: Callable[[dict[str, Any], Corpus], None]
    principals: Any = field(default_factory=list)
    scope: Any = field(default_factory=lambda: UNSCOPED)
    #: run with the host's compute and map_reduce runners (and the MCP mount that has them)
    runners: bool = False


def _stable(answer: dict[str, Any]) -> dict[str, Any]:
    """The answer without wall-clock figures (each door times its own run)."""
    copy = json.loads(json.dumps(answer, default=str))
    usage = copy.get("usage")
    if isinstance(usage, dict):
        usage.pop("timings_ms", None)
        usage.pop("vector_plan", None)
        usage.pop("lexical_pass", None)
    return copy


async def three_doors(engine: ContextEngine, url: str, case: Case, corpus: Corpus) -> dict[str, Any]:
    args = case.args(corpus)
    host: dict[str, Any] = dict(RUNNERS) if case.runners else {}
    by_method = await engine.search_knowledge_base(principals=case.principals, scope=case.scope, **host, **args)
    by_call = await call_knowledge_tool(engine, principals=case.principals, scope=case.scope, **host, **args)
    by_mcp = await mcp_call(url + "-runners" if case.runners else url, case.principals, case.scope, args)
    assert _stable(by_method) == _stable(by_call), "call_knowledge_tool differs from the engine method"
    assert _stable(by_method) == _stable(by_mcp), "the MCP tool differs from the engine method"
    return json.loads(json.dumps(by_method, default=str))


def names(answer: dict[str, Any], key: str = "documents") -> set[str]:
    return {d["name"] for d in answer[key]}


def _refused(fragment: str) -> Callable[[dict[str, Any], Corpus], None]:
    def check(answer: dict[str, Any], _corpus: Corpus) -> None:
        assert answer["success"] is False, answer
        assert fragment in answer["error"], answer["error"]
        assert set(answer) <= {"success", "error", "next_action"}

    return check


def check_discover_anonymous(answer: dict[str, Any], corpus: Corpus) -> None:
    assert answer["success"] is True
    listed = names(answer)
    assert "leave-policy.md" not in listed and "contract.md" not in listed  # ACL in SQL
    assert {"holidays.txt", "costs.csv", "sales.xlsx", "config.json", "broken.pdf"} <= listed
    by_name = {d["name"]: d for d in answer["documents"]}
    costs = by_name["costs.csv"]
    assert costs["kind"] == "spreadsheet" and costs["mode"] == "hybrid"
    sheet = costs["structure"]["sheets"][0]
    assert [c["name"] for c in sheet["columns"]] == ["region", "amount", "month"]
    assert [c["type"] for c in sheet["columns"]][:2] == ["text", "integer"]
    assert sheet["rows"] == 20 and sheet["frame_key"] == "costs.csv"  # compute's own names for its frames
    sales = by_name["sales.xlsx"]["structure"]["sheets"]
    keyed = [(s["name"], s["frame_key"]) for s in sales]
    assert keyed == [("Sales", "sales.xlsx:Sales"), ("Staff", "sales.xlsx:Staff")]
    assert by_name["config.json"]["structure"]["keys"] == ["service", "owner", "retries"]
    broken = by_name["broken.pdf"]
    assert broken["status"] == "failed" and broken["failure_reason"] == "extraction_failed"
    assert "error" not in broken
    assert answer["has_more"] is False and "next_cursor" not in answer
    assert isinstance(answer["revision"], int) and answer["revision"] > 0
    census = {(t["kind"], t["document_type"]): t["count"] for t in answer["document_types"]}
    assert census[("spreadsheet", None)] == 4
    assert answer["fields_by_type"]["text"]["owner"] == {"type": "string", "documents": 1}
    actions = answer["available_actions"]
    assert list(actions) == [
        "discover", "search", "get_doc", "get_docs", "get_chunks", "list", "query_meta", "compute",
        "map_reduce", "get_neighbors", "traverse", "find_related", "community_summary",
    ]
    for action in ("query_meta", "compute", "map_reduce", "get_neighbors", "traverse", "find_related",
                   "community_summary"):
        assert actions[action].endswith(f"(OFF: {OFF_SENTENCES[action]})")
    assert "OFF" not in actions["search"]
    read = answer["next_action"]["to read a document in order"]
    assert read["action"] == "get_chunks" and read["start"] == 0


def check_discover_hr(answer: dict[str, Any], corpus: Corpus) -> None:
    assert names(answer) == {"leave-policy.md", "holidays.txt"}
    policy = next(d for d in answer["documents"] if d["name"] == "leave-policy.md")
    sections = policy["structure"]["sections"]
    assert [s["name"] for s in sections] == ["Annual leave", "Carry over", "Sick leave"]
    assert all(0 <= s["start"] < policy["structure"]["chunks"] for s in sections)


def check_discover_page(answer: dict[str, Any], corpus: Corpus) -> None:
    assert answer["count"] == 2 and answer["has_more"] is True
    assert answer["next_page"] == {"action": "discover", "limit": 2, "cursor": answer["next_cursor"]}


def check_search(answer: dict[str, Any], corpus: Corpus) -> None:
    assert answer["success"] is True and answer["hits"]
    top = answer["hits"][0]
    assert top["document_name"] == "leave-policy.md"
    assert set(top) >= {"document_id", "document_name", "chunk_text", "score", "source_id", "chunk_idx"}
    assert isinstance(top["chunk_idx"], int)
    assert "hint" not in answer


def check_search_anonymous(answer: dict[str, Any], corpus: Corpus) -> None:
    assert answer["success"] is True
    assert "leave-policy.md" not in {h["document_name"] for h in answer["hits"]}


def check_aggregate_refusal(answer: dict[str, Any], corpus: Corpus) -> None:
    assert answer["success"] is False and "spreadsheets" in answer["error"]
    nxt = answer["next_action"]
    assert nxt["action"] == "compute" and nxt["query"] == "what is the total amount by region?"
    # the newest sheet in scope is budget.csv (ingested after sales.xlsx)
    assert nxt["suggestion"] == {"frame_key": "budget.csv", "measure": "amount", "group_by": "region"}


def check_aggregate_hint(answer: dict[str, Any], corpus: Corpus) -> None:
    assert answer["success"] is True
    assert answer["hint"]["action"] == "compute"


def check_filename(answer: dict[str, Any], corpus: Corpus) -> None:
    assert answer["success"] is True
    top = answer["hits"][0]
    assert top["matched_by"] == "filename" and top["document_name"] == "invoice-2525.txt"
    assert top["chunk_idx"] == 0 and "2525" in top["chunk_text"]
    assert answer["usage"]["legs"] == [] and answer["usage"]["leg_hits"] == {}


def check_get_doc(answer: dict[str, Any], corpus: Corpus) -> None:
    doc = answer["document"]
    assert doc["id"] == corpus["leave-policy.md"] and "carry over" in doc["text"]
    assert doc["kind"] == "text" and doc["failure_reason"] is None and "error" not in doc


def check_get_doc_failed(answer: dict[str, Any], corpus: Corpus) -> None:
    doc = answer["document"]
    assert doc["status"] == "failed" and doc["failure_reason"] == "extraction_failed"
    assert doc["failure_message"] and "error" not in doc


def check_get_docs(answer: dict[str, Any], corpus: Corpus) -> None:
    assert answer["count"] == 2
    assert [d["name"] for d in answer["documents"]] == ["holidays.txt", "invoice-2525.txt"]
    assert answer["not_found"] == [corpus["contract.md"]]  # outside the caller's ACL: reads as missing


def check_get_chunks(answer: dict[str, Any], corpus: Corpus) -> None:
    assert answer["document_id"] == corpus["costs.csv"] and answer["start"] == 1
    assert answer["chunks"][0]["position"] == 1
    assert answer["end"] == answer["chunks"][-1]["position"]
    assert answer["has_more"] == (answer["end"] + 1 < answer["total_chunks"])


def check_list(answer: dict[str, Any], corpus: Corpus) -> None:
    assert names(answer) == {"costs.csv", "invoice-2525.txt", "config.json", "broken.pdf"}
    broken = next(d for d in answer["documents"] if d["name"] == "broken.pdf")
    assert broken["failure_reason"] == "extraction_failed"
    assert "failure_message" not in broken and "error" not in broken  # list carries the code only


def check_capped_structure(answer: dict[str, Any], corpus: Corpus) -> None:
    by_name = {d["name"]: d for d in answer["documents"]}
    sections = by_name["manual.md"]["structure"]
    assert len(sections["sections"]) == 25 and sections["more_sections"] == 5
    assert sections["next_page"] == {"action": "discover", "document_ids": [corpus["manual.md"]]}
    sheet = by_name["wide.csv"]["structure"]["sheets"][0]
    assert len(sheet["columns"]) == 25 and sheet["more_columns"] == 5
    assert by_name["wide.csv"]["structure"]["next_page"] == {"action": "discover", "document_ids": [corpus["wide.csv"]]}


def check_named_structure_whole(answer: dict[str, Any], corpus: Corpus) -> None:
    (manual_doc,) = answer["documents"]
    assert len(manual_doc["structure"]["sections"]) == 30 and "more_sections" not in manual_doc["structure"]
    assert [t["count"] for t in answer["document_types"]] == [1]  # the census narrows to the named documents


def check_get_doc_truncated(answer: dict[str, Any], corpus: Corpus) -> None:
    doc = answer["document"]
    assert doc["text_truncated"] is True and len(doc["text"]) <= 40_000
    nxt = doc["next_page"]
    assert nxt["action"] == "get_chunks" and nxt["document_id"] == corpus["manual.md"] and nxt["start"] > 0
    assert doc["text"].rstrip().endswith(".")


def check_get_docs_budget(answer: dict[str, Any], corpus: Corpus) -> None:
    assert [d["name"] for d in answer["documents"]] == ["holidays.txt"]
    assert answer["remaining_document_ids"] == [corpus["manual.md"], corpus["invoice-2525.txt"]]
    assert answer["next_page"] == {"action": "get_docs", "document_ids": answer["remaining_document_ids"]}


def check_filename_falls_back(answer: dict[str, Any], corpus: Corpus) -> None:
    assert answer["success"] is True
    assert all("matched_by" not in h for h in answer["hits"])
    assert "leave-policy.md" not in {h["document_name"] for h in answer["hits"]}
    assert answer["usage"]["legs"]


def check_compute_runner(answer: dict[str, Any], corpus: Corpus) -> None:
    assert answer["success"] is True and answer["result"] == "TOTAL AMOUNT BY REGION"
    assert answer["source_ids"] == ["finance"] and answer["document_ids"] is None
    assert answer["principals"] == ["group:hr"]


def check_map_reduce_runner(answer: dict[str, Any], corpus: Corpus) -> None:
    assert answer["success"] is True and answer["limit"] == 2
    assert answer["processed"] == 2 and "hint" not in answer  # the two newest in hr are prose


def check_discover_with_runners(answer: dict[str, Any], corpus: Corpus) -> None:
    actions = answer["available_actions"]
    assert "OFF" not in actions["compute"] and "OFF" not in actions["map_reduce"]
    assert "OFF" in actions["query_meta"]


def check_filename_aggregate_mixed(answer: dict[str, Any], corpus: Corpus) -> None:
    assert answer["hits"][0]["matched_by"] == "filename" and answer["hits"][0]["document_name"] == "costs.csv"
    assert answer["hint"]["action"] == "compute"


def check_not_found_outside_ceiling(answer: dict[str, Any], corpus: Corpus) -> None:
    _refused("was not found")(answer, corpus)


CASES = [
    Case("discover-anonymous", lambda c: {"action": "discover"}, check_discover_anonymous),
    Case("discover-hr", lambda c: {"action": "discover"}, check_discover_hr, ["group:hr"], ["hr"]),
    Case("discover-page", lambda c: {"action": "discover", "limit": 2}, check_discover_page),
    Case("search", lambda c: {"action": "search", "query": "unused annual leave carry over"},
         check_search, ["group:hr"], ["hr", "finance"]),
    Case("search-anonymous", lambda c: {"action": "search", "query": "annual leave carry over"},
         check_search_anonymous),
    Case("search-aggregate-refused", lambda c: {"action": "search", "query": "what is the total amount by region?"},
         check_aggregate_refusal, [], ["sheets"]),
    Case("search-aggregate-mixed", lambda c: {"action": "search", "query": "what is the total amount by region?"},
         check_aggregate_hint, [], ["finance"]),
    Case("search-filename", lambda c: {"action": "search", "query": "what is in invoice-2525.txt?"},
         check_filename, [], ["finance"]),
    Case("get_doc", lambda c: {"action": "get_doc", "document_id": c["leave-policy.md"]}, check_get_doc,
         ["group:hr"], ["hr"]),
    Case("get_doc-failed", lambda c: {"action": "get_doc", "document_id": c["broken.pdf"]}, check_get_doc_failed,
         [], ["finance"]),
    Case("get_doc-outside-ceiling", lambda c: {"action": "get_doc", "document_id": c["leave-policy.md"]},
         check_not_found_outside_ceiling, TRUSTED, ["finance"]),
    Case("get_doc-outside-document-ceiling", lambda c: {"action": "get_doc", "document_id": c["holidays.txt"]},
         check_not_found_outside_ceiling, TRUSTED, Scope(source_ids=("hr",), document_ids=())),
    Case("get_docs", lambda c: {"action": "get_docs", "document_ids": [c["holidays.txt"], c["contract.md"],
                                                                       c["invoice-2525.txt"]]},
         check_get_docs),
    Case("get_chunks", lambda c: {"action": "get_chunks", "document_id": c["costs.csv"], "start": 1},
         check_get_chunks),
    Case("list", lambda c: {"action": "list"}, check_list, [], ["finance"]),
    Case("discover-capped", lambda c: {"action": "discover"}, check_capped_structure, [], ["archive"]),
    Case("discover-named", lambda c: {"action": "discover", "document_ids": [c["manual.md"]]},
         check_named_structure_whole),
    Case("get_doc-truncated", lambda c: {"action": "get_doc", "document_id": c["manual.md"]}, check_get_doc_truncated),
    Case("get_docs-budget", lambda c: {"action": "get_docs", "document_ids": [c["holidays.txt"], c["manual.md"],
                                                                            c["invoice-2525.txt"]]},
         check_get_docs_budget),
    Case("search-filename-invisible", lambda c: {"action": "search", "query": "what is in leave-policy.md"},
         check_filename_falls_back, [], ["hr"]),
    *[
        Case(f"off-{action}", lambda c, a=action: {"action": a, **({"query": "q"} if a in ("query_meta", "compute",
                                                                  "map_reduce") else {}),
                                                  **({"entity": "Acme"} if a in ("get_neighbors", "traverse") else {})},
             _refused(sentence))
        for action, sentence in OFF_SENTENCES.items()
    ],
    Case("compute-runner", lambda c: {"action": "compute", "query": "total amount by region",
                                      "source_ids": ["finance", "legal"]},
         check_compute_runner, ["group:hr"], ["finance", "hr"], runners=True),
    Case("map_reduce-runner", lambda c: {"action": "map_reduce", "query": "is leave mentioned?", "limit": 2},
         check_map_reduce_runner, ["group:hr"], ["hr"], runners=True),
    Case("map_reduce-runner-refused-over-sheets", lambda c: {"action": "map_reduce", "query": "mentions north?"},
         _refused("these documents are spreadsheets"), [], ["sheets"], runners=True),
    Case("discover-with-runners", lambda c: {"action": "discover", "limit": 1}, check_discover_with_runners,
         runners=True),
    Case("search-filename-aggregate-mixed", lambda c: {"action": "search", "query": "what is the total in costs.csv"},
         check_filename_aggregate_mixed, [], ["finance"]),
    Case("unknown-action", lambda c: {"action": "summarise"}, _refused("unknown action 'summarise'")),
    Case("missing-action", lambda c: {"query": "leave"}, _refused("action is required")),
    Case("missing-query", lambda c: {"action": "search"}, _refused("search needs query")),
    Case("content-id-as-document-id", lambda c: {"action": "get_doc", "document_id": "INV-2525"},
         _refused("'INV-2525' is not a document id")),
    Case("document_ids-refused", lambda c: {"action": "get_doc", "document_id": c["holidays.txt"],
                                            "document_ids": [c["holidays.txt"]]},
         _refused("document_ids is not honored by get_doc")),
    Case("start-past-end", lambda c: {"action": "get_chunks", "document_id": c["holidays.txt"], "start": 99},
         _refused("start 99 is past the end")),
    Case("scope-of-nothing", lambda c: {"action": "search", "query": "leave", "source_ids": ["legal"]},
         _refused("nothing is in scope"), ["group:hr"], ["hr"]),
    Case("unused-argument", lambda c: {"action": "search", "query": "x", "cursor": "abc"},
         _refused("cursor is not used by search")),
    Case("bad-cursor", lambda c: {"action": "list", "cursor": "not-a-cursor"},
         _refused("cursor is not one this tool gave out")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_three_doors_answer_alike(tool_engine: ContextEngine, corpus: Corpus, mcp_url: str, case: Case) -> None:
    answer = await three_doors(tool_engine, mcp_url, case, corpus)
    case.check(answer, corpus)


async def test_next_page_and_cursors_are_bound_to_their_query(
    tool_engine: ContextEngine, corpus: Corpus, mcp_url: str
) -> None:
    """Following discover's next_page reads the rest; a list cursor sent to discover is refused."""
    first = await tool_engine.search_knowledge_base(action="discover", limit=3, principals=[], scope=UNSCOPED)
    second = await tool_engine.search_knowledge_base(**first["next_page"], principals=[], scope=UNSCOPED)
    assert second["success"] is True
    assert not names(first) & names(second)
    listed = await tool_engine.search_knowledge_base(action="list", limit=1, principals=[], scope=UNSCOPED)
    foreign = await tool_engine.search_knowledge_base(
        action="discover", cursor=listed["next_cursor"], principals=[], scope=UNSCOPED
    )
    assert foreign["success"] is False and "belongs to another query" in foreign["error"]
    narrowed = await tool_engine.search_knowledge_base(
        action="list", cursor=listed["next_cursor"], source_ids=["hr"], principals=[], scope=UNSCOPED
    )
    assert narrowed["success"] is False and "belongs to another query" in narrowed["error"]


async def test_discover_is_enough_to_write_get_chunks(tool_engine: ContextEngine, corpus: Corpus) -> None:
    """Each section's start from discover is a valid get_chunks call whose first chunk is under that heading."""
    found = await tool_engine.search_knowledge_base(action="discover", principals=["group:hr"], scope=["hr"])
    policy = next(d for d in found["documents"] if d["name"] == "leave-policy.md")
    for section in policy["structure"]["sections"]:
        page = await tool_engine.search_knowledge_base(
            action="get_chunks", document_id=policy["id"], start=section["start"], principals=["group:hr"], scope=["hr"]
        )
        assert page["success"] is True, page
        assert page["chunks"][0]["position"] == section["start"]
        assert page["chunks"][0]["section"] == section["name"]
    last = policy["structure"]["chunks"] - 1
    tail = await tool_engine.search_knowledge_base(
        action="get_chunks", document_id=policy["id"], start=last, principals=["group:hr"], scope=["hr"]
    )
    assert tail["success"] is True and tail["has_more"] is False and tail["end"] == last


async def test_definition_and_mcp_listing_agree(mcp_url: str) -> None:
    from context_engine import KNOWLEDGE_ACTIONS, knowledge_tool_definition

    definition = knowledge_tool_definition()
    assert definition["name"] == "search_knowledge_base"
    assert definition["input_schema"]["required"] == ["action"]
    assert definition["input_schema"]["properties"]["action"]["enum"] == list(KNOWLEDGE_ACTIONS)
    assert definition["annotations"] == {"readOnlyHint": False, "openWorldHint": False}
    assert len(KNOWLEDGE_ACTIONS) == 13
    positions = [definition["description"].index(f"- {a}:") for a in KNOWLEDGE_ACTIONS]
    assert positions == sorted(positions)
    assert "(OFF:" not in definition["description"]  # without an engine, nothing is claimed off
    headers = {"x-principals": "[]", "x-scope": "null"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with Client(streamable_http_client(mcp_url, http_client=http)) as client:
            listed = await client.list_tools()
    by_name = {t.name: t for t in listed.tools}
    assert set(by_name) == {definition["name"], "search_tools", "execute_tool"}  # the governed tools beside it
    tool = by_name[definition["name"]]
    assert tool.name == definition["name"]
    assert tool.input_schema == definition["input_schema"]
    # this deployment has no model and no graph: the listing marks exactly those actions off
    for action, sentence in OFF_SENTENCES.items():
        assert f"- {action}: " in tool.description and f"(OFF: {sentence})" in tool.description
    assert "permitted" in tool.description
    assert tool.annotations is not None and tool.annotations.read_only_hint is False


async def test_host_mistakes_raise_in_process(tool_engine: ContextEngine) -> None:
    with pytest.raises(ValueError, match="scope is required"):
        await tool_engine.search_knowledge_base(action="discover", principals=[], scope=None)
    with pytest.raises(TypeError):
        await tool_engine.search_knowledge_base(action="discover", principals=[])  # type: ignore[call-arg]
    with pytest.warns(DeprecationWarning, match="principals=None"):
        answer = await tool_engine.search_knowledge_base(action="list", principals=None, scope=["legal"])
    assert {d["name"] for d in answer["documents"]} == {"contract.md"}  # None means trusted


async def test_one_pooled_connection_serves_concurrent_calls(module_database: str, corpus: Corpus) -> None:
    """With a pool of one connection, concurrent calls of every reading action finish: no action holds its
    connection while it waits for another one (that would never end; the wait is generous so that
    sixteen calls taking turns on one connection of a busy machine are not mistaken for it)."""
    config = make_config(module_database, storage={"auto_migrate": True, "pool_size": 1, "max_overflow": 0,
                                                   "pool_timeout": 60})
    async with ContextEngine(config) as engine:
        calls = [
            {"action": "discover"},
            {"action": "list"},
            {"action": "search", "query": "public holidays"},
            {"action": "search", "query": "what is in invoice-2525.txt"},
            {"action": "search", "query": "total amount by region"},
            {"action": "get_doc", "document_id": corpus["manual.md"]},
            {"action": "get_docs", "document_ids": [corpus["holidays.txt"], corpus["manual.md"]]},
            {"action": "get_chunks", "document_id": corpus["costs.csv"]},
        ]
        answers = await asyncio.gather(
            *(engine.search_knowledge_base(principals=[], scope=UNSCOPED, **args) for args in calls * 2)
        )
    assert all(a["success"] for a in answers), [a for a in answers if not a["success"]]
