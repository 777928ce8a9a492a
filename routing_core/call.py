"""What a handler receives: the request, the resolved caller and its engine, the validated body."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from context_engine import ContextEngine
from context_engine.principals import TRUSTED
from routing_core.http import CoreRequest


@dataclass
class Caller:
    principals: Any  # tuple of strings, or TRUSTED
    #: what the host's ``auth`` returned (``True``, or a mapping/object reporting ``scopes``/``identity``)
    auth: Any = None

    @property
    def trusted(self) -> bool:
        return self.principals is TRUSTED

    def principals_arg(self) -> Any:
        """The ``principals`` argument of an engine call for this caller."""
        return TRUSTED if self.trusted else list(self.principals)


@dataclass
class Call:
    request: CoreRequest
    #: the engine this request runs on: the mounted one, or its per-tenant redaction view
    engine: ContextEngine
    #: ``None`` on a public (unauthenticated) route
    caller: Caller | None = None
    params: dict[str, str] = field(default_factory=dict)
    #: the JSON body or the multipart form fields, validated against the route's model
    body: BaseModel | None = None
    #: the route's declared query parameters, every value checked and converted
    query: dict[str, list[Any]] = field(default_factory=dict)
    #: the scope an approval is granted in, from the host's ``approval_scope`` (never from the request)
    approval_scope: str | None = None

    def one(self, name: str, default: Any = None) -> Any:
        """The last value of a query parameter (as a repeated one is read), else ``default``."""
        values = self.query.get(name)
        return values[-1] if values else default

    @property
    def authenticated_caller(self) -> Caller:
        """The caller of an authenticated route."""
        assert self.caller is not None, "only public routes run without a caller"
        return self.caller
