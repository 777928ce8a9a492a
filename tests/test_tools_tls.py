"""An https tool keeps its host name after the egress check, so the certificate is verified for the
name it was registered with: a local TLS server whose certificate names ``localhost`` only,
reached through the host's client that trusts the test's own CA. Calls by name succeed; the same
server by its address fails verification, even after a call by name left a pooled connection."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from context_engine import ContextEngine
from context_engine.hooks import Hooks
from context_engine.tools import ToolConfig, ToolExecutionFailed
from tests.conftest import make_config
from tests.tools_support import SECRET_KEY


def _issue(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate it signs for the DNS name ``localhost`` (no IP address)."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tools test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    assert ipaddress.ip_address("127.0.0.1") not in cert.extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value.get_values_for_type(x509.IPAddress)
    paths = tmp / "ca.pem", tmp / "server.pem", tmp / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        _Handler.seen.append({"host": self.headers.get("Host", ""), "path": self.path})
        body = json.dumps({"secure": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    ca, cert, key = _issue(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    _Handler.seen = []
    try:
        yield server.server_address[1], ca
    finally:
        server.shutdown()
        server.server_close()


async def test_an_https_call_verifies_the_named_host(database_url: str, tls_server: tuple[int, Path]) -> None:
    port, ca = tls_server
    client = httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(ca)))
    config = make_config(database_url, secret_key=SECRET_KEY)
    try:
        async with ContextEngine(config, http_client_factory=lambda purpose: client, hooks=Hooks()) as eng:
            by_name = {"url": f"https://localhost:{port}/secure", "allowed_hosts": ["localhost"]}
            await eng.register_tool(ToolConfig(name="by_name", kind="http", config=by_name))
            out = await eng.execute_tool("http_by_name", {}, principals=[])
            assert out["result"] == {"status_code": 200, "data": {"secure": True}}
            assert _Handler.seen == [{"host": f"localhost:{port}", "path": "/secure"}]
            # the same server by its address: the certificate does not name 127.0.0.1, so TLS refuses
            by_ip = {"url": f"https://127.0.0.1:{port}/secure", "allowed_hosts": ["127.0.0.1"]}
            await eng.register_tool(ToolConfig(name="by_ip", kind="http", config=by_ip))
            with pytest.raises(ToolExecutionFailed) as caught:
                await eng.execute_tool("http_by_ip", {}, principals=[])
            assert caught.value.code == "tool_failed" and len(_Handler.seen) == 1
    finally:
        await client.aclose()
