"""The route table bound to one engine and the host's callables.

Authentication and principal resolution are the host's, passed in as callables (sync or async)
that receive the framework's native request; nothing here has a default that could open a mount
by accident. The request lifecycle that uses them is ``routing_core.lifecycle``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from context_engine import ContextEngine
from context_engine.limits import MAX_JSON_BODY_BYTES
from routing_core.access import SlidingWindowLimiter
from routing_core.http import HttpError
from routing_core.routes import ROUTES, Route

AuthCallable = Callable[[Any], Any]
PrincipalsCallable = Callable[[Any], Any]

#: default cap on a JSON body (uploads are capped by ``ingest.max_file_bytes`` instead)
DEFAULT_MAX_JSON_BYTES = MAX_JSON_BODY_BYTES


class AuthError(Exception):
    """Raise from an ``auth`` callable to refuse a request with 401 and this message."""


class MountOptions(TypedDict, total=False):
    """The optional settings every adapter's factory passes through to :class:`Router`."""

    #: cap on a JSON request body in bytes
    max_json_bytes: int
    #: a ``RedactionPolicy`` for every request, or a callable taking the native request
    redaction: Any
    #: the key of that policy, or a callable taking the native request
    redaction_secret_key: Any
    #: the scope a tool approval is granted in (``POST /tools/execute``): a string, or a callable
    #: taking the native request; never read from the request itself
    approval_scope: Any


class Router:
    """One engine, the host's ``auth`` and ``principals``, and the route table."""

    def __init__(
        self,
        engine: ContextEngine,
        *,
        auth: AuthCallable,
        principals: PrincipalsCallable,
        max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
        redaction: Any = None,
        redaction_secret_key: Any = None,
        approval_scope: Any = None,
    ):
        if not callable(auth):
            raise TypeError(
                "auth is required: a callable taking the request (return False or raise AuthError to refuse)"
            )
        if not callable(principals):
            raise TypeError("principals is required: a callable taking the request and returning a list or TRUSTED")
        self.engine = engine
        self.auth = auth
        self.principals = principals
        self.max_json_bytes = max_json_bytes
        #: host-set per-tenant redaction: a RedactionPolicy (and key), or callables taking the request
        self.redaction = redaction
        self.redaction_secret_key = redaction_secret_key
        self.approval_scope = approval_scope
        self.routes = ROUTES
        self.limiter = SlidingWindowLimiter()  # per-caller window of the rate-limited routes

    @property
    def upload_limit_bytes(self) -> int | None:
        return upload_limit_bytes(self.engine)

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        """The route and its path parameters; 405 (with ``Allow``) or 404 when there is none.

        A trailing slash does not count.
        """
        stripped = path.rstrip("/") or "/"
        allowed: list[str] = []
        for route in self.routes:
            found = route.pattern.match(stripped)
            if found is None:
                continue
            if route.method == method.upper():
                return route, found.groupdict()
            allowed.append(route.method)
        if allowed:
            raise HttpError(
                405, "method_not_allowed", f"{method} is not allowed on {path}", {"Allow": ", ".join(allowed)}
            )
        raise HttpError(404, "route_not_found", f"no route for {method} {path}")


def upload_limit_bytes(engine: ContextEngine) -> int | None:
    """The byte cap for a host's own upload middleware (``ingest.max_file_bytes``)."""
    return engine.config.ingest.max_file_bytes
