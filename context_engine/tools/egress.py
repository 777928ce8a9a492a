"""Where an outbound tool call may connect: the SSRF guard.

A host is resolved once and every address it resolves to must be allowed. A plain-http request is
then sent to the checked address itself, so a name cannot resolve to a public address for the
check and to a private one for the connection; an https request keeps the name and relies on
certificate verification, which a server at a rebound address cannot pass. Numeric spellings (``127.1``,
``0x7f.0.0.1``, ``2130706433``), IPv4-mapped, NAT64 and 6to4 IPv6 forms are judged by the IPv4
address they carry. Cloud metadata endpoints are refused even when private networks are allowed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import httpx

from context_engine.tools.errors import EgressRefused, ToolExecutionFailed

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: resolves ``(host, port)`` to address strings; the default asks the system resolver
Resolver = Callable[[str, int], Awaitable[list[str]]]

METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.internal",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "169.254.169.253", "100.100.100.200", "fd00:ec2::254")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True)
class EgressPolicy:
    """What a tool's config allows beyond public addresses.

    ``allow_private_network`` admits loopback, private, link-local and unique-local addresses for
    any host; ``allowed_hosts`` admits them only for the named hosts. Neither admits a metadata
    endpoint.
    """

    allow_private_network: bool = False
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def from_config(cls, config: dict[str, object]) -> EgressPolicy:
        hosts = config.get("allowed_hosts") or []
        names = hosts if isinstance(hosts, list | tuple) else []
        return cls(
            allow_private_network=config.get("allow_private_network") is True,
            allowed_hosts=frozenset(normalise_host(str(h)) for h in names),
        )


async def system_resolver(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def normalise_host(host: str) -> str:
    """Lower-cased, without IPv6 brackets, a trailing dot or an IPv6 zone."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host.split("%", 1)[0].rstrip(".")


def embedded_ipv4(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 form carries (mapped, NAT64, 6to4), else the address itself."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip.sixtofour is not None:
            return ip.sixtofour
    return ip


def refusal(ip: IPAddress, host: str, policy: EgressPolicy) -> str | None:
    """Why ``ip`` (reached as ``host``) is refused, or None when it is allowed."""
    inner = embedded_ipv4(ip)
    if ip in METADATA_ADDRESSES or inner in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if inner.is_multicast or ip.is_multicast:
        return "a multicast address"
    if inner.is_global and ip.is_global:
        return None
    if policy.allow_private_network or host in policy.allowed_hosts:
        return None
    return "a private, loopback or link-local address"


async def checked_address(url: httpx.URL, policy: EgressPolicy, resolver: Resolver | None = None) -> str:
    """The address to connect to for ``url``, after every address of its host passed the policy."""
    if url.scheme not in ("http", "https"):
        raise EgressRefused("tool URLs must use http or https")
    host = normalise_host(url.host or "")
    if not host:
        raise EgressRefused("the tool URL has no host")
    if host in METADATA_HOSTS or host.endswith(".metadata.google.internal"):
        raise EgressRefused("the tool URL names a cloud metadata host, which is never reachable from a tool")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        addresses = await (resolver or system_resolver)(host, port)
    except (OSError, UnicodeError):
        raise ToolExecutionFailed("the tool's host name could not be resolved", code="host_unresolvable") from None
    parsed = _parse(addresses)
    if not parsed:
        raise ToolExecutionFailed("the tool's host name could not be resolved", code="host_unresolvable")
    for ip in parsed:
        reason = refusal(ip, host, policy)
        if reason is not None:
            raise EgressRefused(
                f"the tool URL resolves to {reason}; set allow_private_network or allowed_hosts in the tool's "
                "config to reach a private service on purpose"
                if "private" in reason
                else f"the tool URL resolves to {reason}, which is never reachable from a tool"
            )
    return str(parsed[0])


def _parse(addresses: Iterable[str]) -> list[IPAddress]:
    found: list[IPAddress] = []
    for address in addresses:
        try:
            found.append(ipaddress.ip_address(address.split("%", 1)[0]))
        except ValueError:
            continue
    return found


def pinned(url: httpx.URL, address: str) -> tuple[httpx.URL, dict[str, str]]:
    """Where to send a request for ``url`` once ``address`` passed the check.

    Plain http is aimed at the checked address itself (with the original Host header), so a second
    DNS answer cannot move the connection. https keeps the host name: the certificate must then be
    valid for that name, which a server at a rebound address cannot present, and pooled TLS
    connections stay keyed by the name they were verified for.
    """
    if url.scheme == "https":
        return url, {}
    return url.copy_with(host=address), {"Host": url.netloc.decode("ascii")}
