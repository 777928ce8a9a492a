"""Hostile values in every user value of every route, through every adapter.

Values that cannot be stored or read back (NUL characters, lone surrogates, invalid UTF-8, 1 MB
strings, JSON nested thousands deep, non-finite numbers, numbers and booleans written as strings)
are refused with a 4xx in the error contract, never a 5xx, and nothing is written: every
``ce_*`` table holds the same rows before and after. SQL and tsquery metacharacters are ordinary
text: searched for, they answer 200 and change nothing; stored as a name, they read back verbatim.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

from context_engine import ContextEngine
from context_engine.limits import MAX_NAME_CHARS, MAX_SOURCE_ID_CHARS
from tests.conftest import make_config
from tests.test_conformance import ADAPTERS, CLIENTS, Reply, fresh_database, multipart

MEGABYTE = 1024 * 1024
HUGE = "x" * (MEGABYTE + 1)
#: JSON text of values no route may store; each is put where a string goes
REFUSED_STRINGS: dict[str, bytes] = {
    "nul": b'"a\\u0000b"',
    "lone_surrogate": b'"a\\ud800b"',
    "invalid_utf8": b'"a\xff\xfeb"',
    "one_megabyte": json.dumps(HUGE).encode(),
}
#: text that is harmless as long as every value is a bound parameter
METACHARACTERS = (
    "'; DELETE FROM ce_documents; --",
    "leave' OR '1'='1",
    "a & !b | (c <-> d):* \\ $1 %_",
    'x")) OR 1=1; SELECT pg_sleep(1); --',
)
DEEP = 2000  # past the JSON decoder's recursion limit, under the suite's 4 KiB body cap


@dataclass
class Api:
    send: Callable[[str, str, bytes | None, dict[str, str]], Reply]
    conn: psycopg.Connection
    document_id: str

    def __call__(self, method: str, path: str, body: bytes | None = None, content_type: str | None = None) -> Reply:
        headers = {"Content-Type": content_type} if content_type else {}
        return self.send(method, "/context" + path, body, headers)

    def rows(self) -> dict[str, int]:
        """Rows per ``ce_*`` table: the tables listed, then all counted in one statement.

        Each refused request is checked before and after; a new connection and a statement per
        table each time cost more than the request itself.
        """
        tables = [name for (name,) in self.conn.execute(CE_TABLES)]
        counts = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {}, count(*) FROM {}").format(sql.Literal(t), sql.Identifier(t)) for t in tables
        )
        return dict(self.conn.execute(counts).fetchall())


CE_TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'ce\\_%' ORDER BY 1"


@pytest.fixture(scope="module", params=ADAPTERS)
def api(request: pytest.FixtureRequest, pg_base_url: str) -> Iterator[Api]:
    with fresh_database(pg_base_url) as url:
        engine = ContextEngine(make_config(url))
        with CLIENTS[request.param](engine, lambda r: True, lambda r: ["group:hr"]) as send:
            seeded = send(
                "POST",
                "/context/documents",
                json.dumps(
                    {"text": "Leave policy: 25 days of paid leave.", "name": "seed.md", "acl": ["group:hr"]}
                ).encode(),
                {"Content-Type": "application/json"},
            )
            assert seeded.status == 201, seeded.body
            with psycopg.connect(url, autocommit=True) as conn:
                api = Api(send, conn, seeded.body["documents"][0]["document_id"])
                counted = api.rows()
                assert counted["ce_documents"] == 1 and counted["ce_chunks"] >= 1, counted  # the seed is seen
                yield api


def refused(api: Api, method: str, path: str, body: bytes | None = None, content_type: str | None = None) -> Reply:
    """Send, and check the refusal: 4xx, the error contract, no table changed."""
    before = api.rows()
    reply = api(method, path, body, content_type)
    assert 400 <= reply.status < 500, (method, path, reply.status, reply.raw[:300])
    assert reply.body.keys() == {"error"} and reply.body["error"].keys() == {"code", "message"}, reply.raw[:300]
    assert b"Traceback" not in reply.raw
    assert api.rows() == before, (method, path, "a refused request wrote")
    return reply


# every place a string goes in a JSON body: (method, path template, body template)
JSON_STRING_SLOTS = [
    ("POST", "/documents", b'{"text": %s}'),
    ("POST", "/documents", b'{"text": "ok", "name": %s}'),
    ("POST", "/documents", b'{"text": "ok", "source_id": %s}'),
    ("POST", "/documents", b'{"text": "ok", "acl": ["group:hr", %s]}'),
    ("POST", "/documents", b'{"text": "ok", "attributes": {"k": %s}}'),
    ("POST", "/documents", b'{"text": "ok", "attributes": {%s: 1}}'),
    ("PATCH", "/documents/{id}", b'{"name": %s}'),
    ("PATCH", "/documents/{id}", b'{"acl": ["group:hr", %s]}'),
    ("PATCH", "/documents/{id}", b'{"attributes": {"k": [%s]}}'),
    ("POST", "/search", b'{"query": %s}'),
    ("POST", "/search", b'{"query": "leave", "source_ids": [%s]}'),
    ("POST", "/search", b'{"query": "leave", "document_ids": [%s]}'),
    ("POST", "/knowledge/query", b'{"query": %s, "expand": false, "rerank": false}'),
    ("POST", "/knowledge/query", b'{"query": "leave", "agentId": %s, "expand": false, "rerank": false}'),
]


# a document's text has no length limit of its own (the body cap governs it): 1 MB of it is a document
HOSTILE_JSON = [
    (method, template, body, payload)
    for method, template, body in JSON_STRING_SLOTS
    for payload in sorted(REFUSED_STRINGS)
    if not (payload == "one_megabyte" and body.startswith(b'{"text": %s'))
]


@pytest.mark.parametrize(("method", "template", "body", "payload"), HOSTILE_JSON)
def test_a_hostile_string_in_a_json_body_is_refused(
    api: Api, method: str, template: str, body: bytes, payload: str
) -> None:
    refused(api, method, template.format(id=api.document_id), body % REFUSED_STRINGS[payload], "application/json")


# every number or flag, given as something else
JSON_TYPE_CONFUSION = [
    ("/search", b'{"query": "leave", "top_k": %s}', ['"5"', "true", "1e400", "NaN", "Infinity", "-1", "10000000000"]),
    ("/knowledge/query", b'{"query": "leave", "topK": %s}', ['"5"', "false", "-Infinity", "21", "2.5"]),
    ("/knowledge/query", b'{"query": "leave", "expand": %s}', ['"true"', "1", "null"]),
    ("/knowledge/query", b'{"query": "leave", "rerank": %s}', ['"false"', "0"]),
]


@pytest.mark.parametrize(("path", "body", "value"), [(p, b, v) for p, b, values in JSON_TYPE_CONFUSION for v in values])
def test_a_number_or_flag_of_the_wrong_kind_is_refused(api: Api, path: str, body: bytes, value: str) -> None:
    reply = refused(api, "POST", path, body % value.encode(), "application/json")
    assert reply.status == 400


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/documents", b"[" * DEEP + b"]" * DEEP),
        ("POST", "/search", b'{"query": "x", "source_ids": ' + b"[" * DEEP + b"]" * DEEP + b"}"),
        ("POST", "/documents", b'{"text": "ok", "attributes": ' + b'{"a": ' * 300 + b"1" + b"}" * 301),
        ("PATCH", "/documents/{id}", b'{"attributes": ' + b'{"a": ' * 300 + b"1" + b"}" * 301),
        ("PATCH", "/documents/{id}", b'{"attributes": {"a": ' + b"[" * 100 + b"]" * 100 + b"}}"),
    ],
)
def test_deep_json_is_refused(api: Api, method: str, path: str, body: bytes) -> None:
    reply = refused(api, method, path.format(id=api.document_id), body, "application/json")
    assert reply.status == 400 and "deeper" in reply.body["error"]["message"]


def test_a_body_not_declared_json_is_415_and_writes_nothing(api: Api) -> None:
    body = json.dumps({"text": "cross-site", "name": "csrf.md"}).encode()
    assert refused(api, "POST", "/documents", body, "text/plain").status == 415


# every multipart field
MULTIPART_REFUSED = [
    ("name", "a\x00b"),
    ("name", HUGE),
    ("source_id", "s" * 5000),
    ("source_id", "a\x00b"),
    ("acl", "group:hr,a\x00b"),
    ("acl", '["' + "p" * 600 + '"]'),
    ("acl", "[1]"),
    ("attributes", "true"),
    ("attributes", "[1]"),
    ("attributes", "NaN"),
    ("attributes", '{"a": Infinity}'),
    ("attributes", '{"a": "\\u0000"}'),
    ("attributes", '{"a": ' * 300 + "1" + "}" * 300),
    ("attributes", "[" * DEEP + "]" * DEEP),
]


@pytest.mark.parametrize(("field", "value"), MULTIPART_REFUSED, ids=lambda v: v[:20] if isinstance(v, str) else v)
def test_a_hostile_multipart_field_is_refused(api: Api, field: str, value: str) -> None:
    body, content_type = multipart({field: value}, {"file": ("note.md", b"# Note\n\nSome text.", "text/markdown")})
    refused(api, "POST", "/documents", body, content_type)


@pytest.mark.parametrize(
    ("field", "value"),
    [("name", "n" * (MAX_NAME_CHARS + 1)), ("source_id", "s" * (MAX_SOURCE_ID_CHARS + 1)), ("acl", "p" * 501)],
)
def test_the_json_and_multipart_paths_share_their_limits(api: Api, field: str, value: str) -> None:
    as_json = {"text": "ok", field: [value] if field == "acl" else value}
    from_json = refused(api, "POST", "/documents", json.dumps(as_json).encode(), "application/json")
    body, content_type = multipart({field: value}, {"file": ("note.md", b"# Note\n\nText.", "text/markdown")})
    from_form = refused(api, "POST", "/documents", body, content_type)
    assert from_json.status == from_form.status == 400
    assert from_json.body == from_form.body and field in from_json.body["error"]["message"]


def test_invalid_utf8_in_a_multipart_field_is_decoded_lossily_and_reads_back(api: Api) -> None:
    """The frameworks decode form fields themselves (U+FFFD for Django and werkzeug, Latin-1 for starlette).

    What reaches the route is then valid text: it is stored as decoded and reads back the same.
    """
    body, content_type = multipart(
        {"name": "PLACEHOLDER", "acl": "group:hr"}, {"file": ("utf8.md", b"# Note\n\nText.", "text/markdown")}
    )
    created = api("POST", "/documents", body.replace(b"PLACEHOLDER", b"a\xff\xfeb"), content_type)
    assert created.status == 201, created.body
    (doc,) = created.body["documents"]
    assert doc["name"].startswith("a") and doc["name"].endswith("b") and len(doc["name"]) > 2
    assert api("GET", f"/documents/{doc['document_id']}").body["name"] == doc["name"]
    assert api("DELETE", f"/documents/{doc['document_id']}").status == 200


# every query parameter and the path parameter
QUERY_REFUSED = [
    "/documents?limit=5_0",
    "/documents?limit=1e3",
    "/documents?limit=%00",
    "/documents?limit=99999999999999999999999",
    "/documents?cursor=%00",
    "/documents?cursor=" + "c" * 5000,
    "/documents?source_id=a%00b",
    "/documents?source_id=" + "x" * 60_000,  # a megabyte cannot travel in a URL (clients stop at 64 KiB)
    "/documents?source_id=%20",
    "/documents/{id}?include_text=%00",
    "/stats?source_id=a%00b",
    "/stats?source_id=" + "s" * 5000,
    "/documents/a%00b",
    "/documents/a%0Ab",
    "/documents/'%20OR%20'1'='1",
    "/documents/" + "d" * 5000,
]


@pytest.mark.parametrize("url", QUERY_REFUSED, ids=lambda u: u[:40])
def test_a_hostile_query_or_path_value_is_refused(api: Api, url: str) -> None:
    refused(api, "GET", url.format(id=api.document_id))


@pytest.mark.parametrize("text", METACHARACTERS)
def test_metacharacters_are_inert_in_searches(api: Api, text: str) -> None:
    before = api.rows()
    search = api("POST", "/search", json.dumps({"query": text}).encode(), "application/json")
    knowledge = api(
        "POST",
        "/knowledge/query",
        json.dumps({"query": text, "expand": False, "rerank": False}).encode(),
        "application/json",
    )
    listed = api("GET", "/documents?source_id=" + quote(text))
    assert (search.status, knowledge.status, listed.status) == (200, 200, 200), (search.raw, knowledge.raw)
    assert listed.body["documents"] == []
    assert api.rows() == before


def test_metacharacters_are_stored_verbatim_as_values(api: Api) -> None:
    name = " ".join(METACHARACTERS)
    created = api(
        "POST",
        "/documents",
        json.dumps(
            {"text": "Metacharacters as data.", "name": name, "source_id": METACHARACTERS[0], "acl": ["group:hr"]}
        ).encode(),
        "application/json",
    )
    assert created.status == 201, created.body
    document_id = created.body["documents"][0]["document_id"]
    read = api("GET", f"/documents/{document_id}")
    assert (read.body["name"], read.body["source_id"]) == (name, METACHARACTERS[0])
    renamed = api(
        "PATCH", f"/documents/{document_id}", json.dumps({"name": METACHARACTERS[1]}).encode(), "application/json"
    )
    assert renamed.status == 200 and renamed.body["name"] == METACHARACTERS[1]
    assert api("DELETE", f"/documents/{document_id}").status == 200
