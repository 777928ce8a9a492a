"""What a caller hands in (``ToolConfig``) and gets back (tool entries, pages, approval records)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from context_engine.tools import kinds
from context_engine.tools.errors import ToolConfigInvalid

#: a registered tool kind's name (``http``, ``db``, ``mcp``, ``function`` or one a host registered)
ToolKind = str
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


def _kind_enum(schema: dict[str, Any]) -> None:
    """The ``kind`` field's JSON Schema lists the kinds registered when the schema is built."""
    schema["enum"] = list(kinds.listed())


class ToolConfig(BaseModel):
    """A tool to register. ``config`` holds its endpoint and credentials and is encrypted at rest.

    ``acl`` lists the principals who may see and call it (empty: every caller);
    ``requires_approval`` gates every call behind a single-use human approval.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: ToolKind = Field(default="http", json_schema_extra=_kind_enum)
    description: str = ""
    config: dict[str, Any] = Field(default_factory=dict)
    acl: list[str] = Field(default_factory=list)
    requires_approval: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("name must start with a letter and hold only letters, digits and '_' (at most 64)")
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value not in kinds.listed():
            raise ValueError(f"kind must be one of {', '.join(kinds.listed())}")
        return value

    @field_validator("acl")
    @classmethod
    def _acl(cls, value: list[str]) -> list[str]:
        if not all(isinstance(a, str) and a.strip() for a in value):
            raise ValueError("acl must be a list of non-empty strings")
        return sorted(set(value))

    @property
    def call_name(self) -> str:
        return call_name(self.kind, self.name)


def tool_config(value: Any) -> ToolConfig:
    """``value`` as a ``ToolConfig`` (it may be one, or its fields as a dict); a precise refusal otherwise.

    The refusal names the field and the rule, never the value (a config holds credentials).
    """
    if isinstance(value, ToolConfig):
        return value
    if not isinstance(value, dict):
        raise ToolConfigInvalid("a tool is a ToolConfig or an object of its fields")
    try:
        return ToolConfig.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise ToolConfigInvalid(f"invalid tool: {where}: {first['msg']}") from None


def call_name(kind: str, name: str) -> str:
    """The call name is the kind's prefix and the tool's name: ``http_get_weather``, ``fn_add``."""
    return kinds.call_prefix(kind) + name


class ToolPage(list[dict[str, Any]]):
    """One page of tools: a plain list, plus ``next_cursor`` when more matches remain."""

    def __init__(self, items: list[dict[str, Any]], next_cursor: str | None = None):
        super().__init__(items)
        self.next_cursor = next_cursor


@dataclass(frozen=True)
class ApprovalRecord:
    """One gated request and where it stands."""

    approval_id: str
    tool_id: str | None
    call_name: str
    approval_scope: str
    status: Literal["pending", "approved", "denied", "consumed", "expired"]
    approver: str | None
    expires_at: datetime
    created_at: datetime
    resolved_at: datetime | None
    #: the arguments of the request, as redacted for the caller who opened it
    arguments: Any = None
    #: the opener's principals (``None``: a trusted caller)
    principals: list[str] | None = None
