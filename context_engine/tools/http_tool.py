"""http tools: one request per call, arguments checked against the tool's schema, egress guarded.

GET and DELETE send the arguments as query parameters; POST, PUT, PATCH and QUERY send them as a
JSON body. ``llmQueryParameters`` is a second JSON Schema whose arguments always go in the query
string, whatever the method; the model is shown one schema, the two merged. No argument may share
a name with a query parameter or header the config fixes
(``fixed_parameter_override``, 400): the operator's values always go as configured. Redirects are
never followed, a plain-http connection goes to the address the egress check approved, and the
response body is read up to a cap.
"""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import httpx

from context_engine.tools.egress import EgressPolicy, Resolver, checked_address, pinned
from context_engine.tools.errors import (
    EgressRefused,
    FixedParameterOverride,
    ToolConfigInvalid,
    ToolExecutionFailed,
    ToolTimeout,
)
from context_engine.tools.kinds import KindContext, ToolKindSpec
from context_engine.tools.schema import checked_schema, validate_arguments

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "QUERY")
_BODY_METHODS = {"POST", "PUT", "PATCH", "QUERY"}
DEFAULT_TIMEOUT = 30.0
MAX_RESPONSE_BYTES = 5 * 1024 * 1024
PURPOSE = "tool_http"
_KEYS = {
    "method", "url", "headers", "query", "parameters", "llmQueryParameters", "timeout", "response_mode",
    "allow_private_network", "allowed_hosts", "max_response_bytes",
}  # fmt: skip


def check_config(config: dict[str, Any]) -> dict[str, Any]:
    """The argument schema of a valid http config; refuses anything it cannot run."""
    unknown = set(config) - _KEYS
    if unknown:
        raise ToolConfigInvalid(f"http tool config has unknown keys: {sorted(unknown)}")
    url = config.get("url")
    if not isinstance(url, str):
        raise ToolConfigInvalid("http tool config needs a url")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        raise ToolConfigInvalid("http tool url is not a valid URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ToolConfigInvalid("http tool url must be an absolute http or https URL")
    if str(config.get("method", "GET")).upper() not in METHODS:
        raise ToolConfigInvalid(f"http tool method must be one of {', '.join(METHODS)}")
    for key in ("headers", "query"):
        value = config.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ToolConfigInvalid(f"http tool {key} must be an object of strings")
    timeout = config.get("timeout", DEFAULT_TIMEOUT)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 600:
        raise ToolConfigInvalid("http tool timeout must be a number of seconds between 0 and 600")
    if config.get("response_mode", "json") not in ("json", "tsv"):
        raise ToolConfigInvalid("http tool response_mode must be 'json' or 'tsv'")
    cap = config.get("max_response_bytes", MAX_RESPONSE_BYTES)
    if not isinstance(cap, int) or isinstance(cap, bool) or not 1 <= cap <= 100 * 1024 * 1024:
        raise ToolConfigInvalid("http tool max_response_bytes must be an integer between 1 and 104857600")
    hosts = config.get("allowed_hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ToolConfigInvalid("http tool allowed_hosts must be a list of host names")
    schema = argument_schema(config)
    properties = schema.get("properties")
    fixed = fixed_names(config)
    for name in properties if isinstance(properties, dict) else ():
        if _normal(str(name)) in fixed:
            raise ToolConfigInvalid(
                f"http tool parameter {name!r} is also a {fixed[_normal(str(name))]} the config fixes; rename one"
            )
    return schema


QUERY_SCHEMA_KEY = "llmQueryParameters"


def argument_schema(config: dict[str, Any]) -> dict[str, Any]:
    """The one schema of the model's arguments: ``parameters``, with ``llmQueryParameters``'s
    properties and required names merged in (a name in both is refused: where would it go?)."""
    schema = checked_schema(config.get("parameters"))
    if config.get(QUERY_SCHEMA_KEY) is None:
        return schema
    query = _query_schema(config)
    body_properties = schema.get("properties") or {}
    query_properties = query.get("properties") or {}
    if not isinstance(body_properties, dict) or not isinstance(query_properties, dict):
        raise ToolConfigInvalid("http tool schemas must give their properties as an object")
    shared = sorted(set(body_properties) & set(query_properties))
    if shared:
        raise ToolConfigInvalid(f"http tool arguments {shared} are in both parameters and {QUERY_SCHEMA_KEY}")
    if schema.get("type", "object") != "object":
        raise ToolConfigInvalid("http tool parameters must describe an object when llmQueryParameters is set")
    required = [*(schema.get("required") or []), *(query.get("required") or [])]
    merged = {**schema, "type": "object", "properties": {**body_properties, **query_properties}}
    if required:
        merged["required"] = required
    return merged


def _query_schema(config: dict[str, Any]) -> dict[str, Any]:
    raw = config.get(QUERY_SCHEMA_KEY)
    if not isinstance(raw, dict):
        raise ToolConfigInvalid(f"http tool {QUERY_SCHEMA_KEY} must be a JSON Schema object")
    query = checked_schema({"type": "object", **raw})
    if query.get("type") != "object":
        raise ToolConfigInvalid(f"http tool {QUERY_SCHEMA_KEY} must describe an object")
    required = query.get("required") or []
    if not isinstance(required, list):
        raise ToolConfigInvalid(f"http tool {QUERY_SCHEMA_KEY} required must be a list")
    return query


def query_argument_names(config: dict[str, Any]) -> set[str]:
    """The argument names that travel in the query string whatever the method."""
    if config.get(QUERY_SCHEMA_KEY) is None:
        return set()
    return set(_query_schema(config).get("properties") or {})


def fixed_names(config: dict[str, Any]) -> dict[str, str]:
    """The names the operator fixed (normalised, see ``_normal``), each with what it is: the url's
    own query parameters, the ``query`` section's and the headers."""
    fixed = {_normal(name): "header" for name in config.get("headers") or {}}
    fixed.update({_normal(name): "query parameter" for name in httpx.URL(config["url"]).params})
    fixed.update({_normal(name): "query parameter" for name in config.get("query") or {}})
    return fixed


def _normal(name: str) -> str:
    """A parameter name as a lenient server may read it: case folded, an ``[...]`` suffix cut,
    and ``.``, ``-`` and spaces read as ``_`` (PHP turns ``api.key`` and ``api key`` into ``api_key``)."""
    return re.sub(r"[.\s-]", "_", name.split("[", 1)[0].strip().lower())


def check_arguments(config: dict[str, Any], arguments: dict[str, Any]) -> None:
    """Refuse a call argument named like a fixed query parameter or header (however a lenient
    server would read the name): it would replace the operator's value (``api_key``,
    ``tenant_id``) in the query string, or compete with it on a server that merges query, body and
    headers."""
    fixed = fixed_names(config)
    for name in arguments:
        where = fixed.get(_normal(str(name)))
        if where is not None:
            raise FixedParameterOverride(str(name), where)


async def call(
    config: dict[str, Any],
    arguments: dict[str, Any],
    *,
    client_factory: Callable[[str], httpx.AsyncClient | None] | None = None,
    resolver: Resolver | None = None,
) -> dict[str, Any]:
    """Send the request and return ``{"status_code", "data"}`` (JSON when the body is JSON)."""
    validate_arguments(argument_schema(config), arguments)
    check_arguments(config, arguments)
    method = str(config.get("method", "GET")).upper()
    url = httpx.URL(config["url"])
    params = dict(config.get("query") or {})
    in_query = query_argument_names(config)
    rest = {k: v for k, v in arguments.items() if k not in in_query}
    body: Any = None
    if method not in _BODY_METHODS:
        params.update({k: _query_value(v) for k, v in rest.items()})
    elif rest or not in_query:  # a body-less call whose every argument is a query parameter sends none
        body = rest
    params.update({k: _query_value(v) for k, v in arguments.items() if k in in_query})
    address = await checked_address(url, EgressPolicy.from_config(config), resolver)
    target, host_header = pinned(url, address)
    headers = {**dict(config.get("headers") or {}), **host_header}
    timeout = float(config.get("timeout", DEFAULT_TIMEOUT))
    cap = int(config.get("max_response_bytes", MAX_RESPONSE_BYTES))
    supplied = client_factory(PURPOSE) if client_factory is not None else None
    # no proxies from the environment: a proxy would connect on our behalf, past the egress check
    client = supplied or httpx.AsyncClient(trust_env=False, verify=_tls_context())
    try:
        request = client.build_request(
            method, target, params=params or None, json=body, headers=headers, timeout=timeout
        )
        try:
            response = await client.send(request, stream=True, follow_redirects=False)
        except httpx.TimeoutException:
            raise ToolTimeout(f"the tool's server did not answer within {timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise ToolExecutionFailed(f"could not reach the tool's server ({type(exc).__name__})") from None
        try:
            if response.is_redirect or 300 <= response.status_code < 400:
                raise EgressRefused("the tool's server answered with a redirect; redirects are never followed")
            raw = await _read_capped(response, cap)
        finally:
            await response.aclose()
    finally:
        if supplied is None:
            await client.aclose()
    return {"status_code": response.status_code, "data": _decode(raw, response.headers.get("content-type", ""))}


def _query_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context for the process: loading the CA bundle is most of a client's cost."""
    import certifi

    return ssl.create_default_context(cafile=certifi.where())


async def _read_capped(response: httpx.Response, cap: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    try:
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > cap:
                raise ToolExecutionFailed(f"the tool's response is larger than {cap} bytes", code="response_too_large")
            parts.append(chunk)
    except httpx.TimeoutException:
        raise ToolTimeout("the tool's server stopped sending its response") from None
    except httpx.HTTPError as exc:
        raise ToolExecutionFailed(f"the tool's response was cut off ({type(exc).__name__})") from None
    return b"".join(parts)


def _decode(raw: bytes, content_type: str) -> Any:
    text = raw.decode("utf-8", errors="replace")
    if "json" in content_type.lower() or text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


async def _call_kind(config: dict[str, Any], arguments: dict[str, Any], context: KindContext) -> dict[str, Any]:
    return await call(config, arguments, client_factory=context.http_client_factory, resolver=context.resolver)


def _outcome(result: Any) -> str:
    """``http_error`` when the server answered 4xx/5xx (the answer is still returned to the caller)."""
    status = result.get("status_code") if isinstance(result, dict) else None
    return "http_error" if isinstance(status, int) and status >= 400 else "success"


KIND = ToolKindSpec(
    name="http",
    call_prefix="http_",
    summary="one HTTP request per call",
    check_config=check_config,
    call=_call_kind,
    check_arguments=check_arguments,
    outcome=_outcome,
)
