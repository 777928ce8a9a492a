"""The SSRF guard: a corpus of loopback spellings, private, link-local, metadata and IPv6 forms,
names resolving to private addresses and redirects, each refused before any connection is made.

A host-supplied client records every connection the engine attempts and refuses any that is not to
127.0.0.1, so even a guard bug could not send traffic off this machine; the corpus asserts it
attempted none at all.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_engine import ContextEngine
from context_engine.hooks import Hooks
from context_engine.tools import EgressRefused, ToolConfig, ToolConfigInvalid
from context_engine.tools.egress import EgressPolicy, checked_address
from tests.conftest import make_config
from tests.fakes import FakeHTTPServer, json_reply
from tests.tools_support import SECRET_KEY, HookLog, table_rows

# the tests' databases start migrated (a copy of the session's template; see tests/conftest.py)
pytestmark = pytest.mark.migrated()


class LoopbackOnly(httpx.AsyncBaseTransport):
    """A real transport that records every request and refuses any to a non-loopback address."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.seen: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(str(request.url))
        if request.url.host != "127.0.0.1":
            raise httpx.ConnectError("test safety net: only 127.0.0.1 is reachable")
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
async def guarded(database_url: str) -> AsyncIterator[tuple[ContextEngine, LoopbackOnly]]:
    transport = LoopbackOnly()
    client = httpx.AsyncClient(transport=transport)
    config = make_config(database_url, secret_key=SECRET_KEY)
    async with ContextEngine(config, http_client_factory=lambda purpose: client, hooks=Hooks(HookLog())) as eng:
        yield eng, transport
    await client.aclose()


def corpus(port: int) -> list[str]:
    return [
        f"http://127.0.0.1:{port}/",
        f"http://127.1:{port}/",
        f"http://0x7f.0.0.1:{port}/",
        f"http://2130706433:{port}/",
        f"http://127.255.255.254:{port}/",
        f"http://[::1]:{port}/",
        f"http://[::ffff:127.0.0.1]:{port}/",
        f"http://[::ffff:7f00:1]:{port}/",
        f"http://[64:ff9b::7f00:1]:{port}/",
        f"http://[2002:7f00:1::]:{port}/",
        f"http://0.0.0.0:{port}/",
        f"http://[::]:{port}/",
        f"http://localhost:{port}/",
        f"http://LOCALHOST.:{port}/",
        "http://169.254.169.254/latest/meta-data/iam/",
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://100.100.100.200/latest/meta-data/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://Metadata.Google.Internal./computeMetadata/v1/",
        "http://metadata/computeMetadata/v1/",
        "http://[fe80::1]/",
        "http://169.254.1.1/",
        "http://10.0.0.1/",
        "http://172.16.5.4/",
        "http://192.168.1.1/",
        "http://[fd12:3456::1]/",
        "http://224.0.0.1/",
    ]


async def test_ssrf_corpus_is_refused_without_any_connection(
    guarded: tuple[ContextEngine, LoopbackOnly], database_url: str
) -> None:
    engine, transport = guarded
    with FakeHTTPServer() as server:
        server.route("GET", "/", json_reply(200, {"reached": True}))
        targets = corpus(int(server.base_url.rsplit(":", 1)[1]))
        assert len(targets) >= 20
        for i, url in enumerate(targets):
            tool = await engine.register_tool(ToolConfig(name=f"t{i}", kind="http", config={"url": url}))
            with pytest.raises(EgressRefused) as caught:
                await engine.execute_tool(f"http_t{i}", {}, principals=[], tool_id=tool["tool_id"])
            assert caught.value.status == 403 and caught.value.code == "egress_refused", url
        assert server.requests == []
    assert transport.seen == []
    outcomes = table_rows(database_url, "SELECT outcome, error_code FROM ce_tool_calls")
    assert len(outcomes) == len(targets)
    assert {(r["outcome"], r["error_code"]) for r in outcomes} == {("refused", "egress_refused")}


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://127.0.0.1:70/", "http://0177.0.0.1/", "http:///x"])
async def test_non_http_and_malformed_urls_are_refused_at_registration(
    guarded: tuple[ContextEngine, LoopbackOnly], url: str
) -> None:
    engine, _ = guarded
    with pytest.raises(ToolConfigInvalid):
        await engine.register_tool(ToolConfig(name="bad", kind="http", config={"url": url}))


async def test_redirects_are_refused_even_from_an_allowed_server(guarded: tuple[ContextEngine, LoopbackOnly]) -> None:
    engine, transport = guarded
    with FakeHTTPServer() as server:
        server.route("GET", "/meta", json_reply(302, None, {"Location": "http://169.254.169.254/latest/meta-data/"}))
        server.route("GET", "/local", json_reply(307, None, {"Location": server.url("/other")}))
        server.route("GET", "/other", json_reply(200, {"reached": True}))
        for path in ("/meta", "/local"):
            name = path.strip("/")
            config = {"url": server.url(path), "allowed_hosts": ["127.0.0.1"]}
            await engine.register_tool(ToolConfig(name=name, kind="http", config=config))
            with pytest.raises(EgressRefused) as caught:
                await engine.execute_tool(f"http_{name}", {}, principals=[])
            assert "redirect" in caught.value.message
        assert [r.path for r in server.requests] == ["/meta", "/local"]
    assert all(url.startswith("http://127.0.0.1:") for url in transport.seen)


async def test_private_addresses_are_reachable_only_when_the_config_says_so(
    guarded: tuple[ContextEngine, LoopbackOnly],
) -> None:
    engine, _ = guarded
    with FakeHTTPServer() as server:
        server.route("GET", "/ok", json_reply(200, {"reached": True}))
        url = server.url("/ok")
        await engine.register_tool(ToolConfig(name="closed", kind="http", config={"url": url}))
        await engine.register_tool(
            ToolConfig(name="open", kind="http", config={"url": url, "allow_private_network": True})
        )
        await engine.register_tool(
            ToolConfig(name="named", kind="http", config={"url": url, "allowed_hosts": ["127.0.0.1"]})
        )
        other_host = {"url": url, "allowed_hosts": ["internal.example"]}
        await engine.register_tool(ToolConfig(name="wrong_host", kind="http", config=other_host))
        with pytest.raises(EgressRefused):
            await engine.execute_tool("http_closed", {}, principals=[])
        with pytest.raises(EgressRefused):
            await engine.execute_tool("http_wrong_host", {}, principals=[])
        for name in ("http_open", "http_named"):
            out = await engine.execute_tool(name, {}, principals=[])
            assert out["result"] == {"status_code": 200, "data": {"reached": True}}
        assert len(server.requests) == 2


def resolver_of(table: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    """A host resolver (the guard's public hook) answering from a table, standing in for DNS."""

    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError("no such host")
        return table[host]

    return resolve


@pytest.mark.parametrize(
    ("host", "addresses"),
    [
        ("intranet.corp.test", ["10.20.30.40"]),
        ("router.home.test", ["192.168.0.1"]),
        ("rebind.test", ["93.184.216.34", "127.0.0.1"]),  # one private answer is enough to refuse
        ("v6.internal.test", ["fd00::5"]),
        ("mapped.test", ["::ffff:10.0.0.8"]),
        ("meta.test", ["169.254.169.254"]),
        ("cgnat.test", ["100.64.1.1"]),
    ],
)
async def test_names_resolving_to_private_addresses_are_refused(host: str, addresses: list[str]) -> None:
    resolver = resolver_of({host: addresses})
    with pytest.raises(EgressRefused):
        await checked_address(httpx.URL(f"https://{host}/x"), EgressPolicy(), resolver)


async def test_metadata_stays_refused_when_private_networks_are_allowed() -> None:
    allow = EgressPolicy(allow_private_network=True)
    resolver = resolver_of(
        {"meta.test": ["169.254.169.254"], "db.internal": ["10.1.1.1"], "pub.test": ["93.184.216.34"]}
    )
    with pytest.raises(EgressRefused):
        await checked_address(httpx.URL("http://meta.test/"), allow, resolver)
    with pytest.raises(EgressRefused):
        await checked_address(httpx.URL("http://metadata.google.internal/"), allow, resolver)
    assert await checked_address(httpx.URL("http://db.internal/"), allow, resolver) == "10.1.1.1"
    assert await checked_address(httpx.URL("http://pub.test/"), EgressPolicy(), resolver) == "93.184.216.34"


_PRIVATE_V4 = [
    ipaddress.ip_network(n) for n in ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16")
]


def _spellings(address: ipaddress.IPv4Address) -> list[str]:
    """The ways a URL may spell one IPv4 address that the system resolver reads as that address."""
    a, b, c, d = address.packed
    return [
        str(address),
        str(int(address)),
        f"0x{a:x}.0x{b:x}.0x{c:x}.0x{d:x}",
        f"{a}.{(b << 16) | (c << 8) | d}",
        f"[::ffff:{address}]",
        f"[64:ff9b::{a:02x}{b:02x}:{c:02x}{d:02x}]",
    ]


@settings(max_examples=60, deadline=None)
@given(network=st.sampled_from(_PRIVATE_V4), offset=st.integers(min_value=0, max_value=2**16 - 1))
async def test_every_spelling_of_a_private_ipv4_address_is_refused(network: ipaddress.IPv4Network, offset: int) -> None:
    address = network[offset % network.num_addresses]
    for host in _spellings(address):
        try:
            url = httpx.URL(f"http://{host}:8080/")
        except httpx.InvalidURL:
            continue  # refused when the tool is registered
        with pytest.raises(EgressRefused):
            await checked_address(url, EgressPolicy())
