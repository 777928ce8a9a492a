"""The errors tool calls raise on purpose, each with the status and code the routes answer with."""

from __future__ import annotations

from context_engine.errors import (
    ConfigError,
    ContextEngineError,
    FixedMessageError,
    Forbidden,
    InvalidRequest,
    NotFound,
)


class ToolNotFound(NotFound):
    """No such tool, or one the caller may not see: the two read the same on purpose."""

    code = "tool_not_found"

    def __init__(self, call_name: str):
        super().__init__(f"tool {call_name!r} not found")


class AmbiguousToolError(ContextEngineError):
    """Several visible tools share the call name and no ``tool_id`` said which one is meant."""

    code = "ambiguous_tool"
    status = 409


class ToolArgumentsInvalid(InvalidRequest):
    """The arguments do not satisfy the tool's JSON Schema (or the function's signature)."""

    code = "invalid_arguments"


class ToolConfigInvalid(InvalidRequest):
    """A registration that cannot work (unknown kind, bad URL, malformed schema)."""

    code = "invalid_tool_config"


class SecretKeyRequired(ConfigError):
    """Tool configs are encrypted under ``secret_key``; without one nothing is stored or read."""

    code = "secret_key_required"


class EgressRefused(Forbidden):
    """An outbound address the egress policy does not allow (private, loopback, metadata, redirect)."""

    code = "egress_refused"


class ToolExecutionFailed(ContextEngineError):
    """The tool ran and failed; the message is stripped of row data and masked."""

    code = "tool_failed"
    status = 502


class ToolTimeout(ToolExecutionFailed):
    code = "tool_timeout"
    status = 504


class ApprovalNotFound(FixedMessageError, NotFound):
    code = "approval_not_found"
    fixed_message = "approval not found"


class ApprovalExpired(ContextEngineError):
    code = "approval_expired"
    status = 409


class ApprovalAlreadyResolved(ContextEngineError):
    code = "approval_already_resolved"
    status = 409


def missing_extra(extra: str, package: str) -> ConfigError:
    """The refusal for a feature whose optional dependency is not installed."""
    return ConfigError(
        f"this needs the {package!r} package: install pg-context-engine[{extra}]", code="missing_dependency"
    )


class ToolRoleRefused(ContextEngineError):
    """A db tool's role can do more than read: refused at registration (400) and before every
    statement (502, the tool's configuration is what failed, not the caller's request)."""

    code = "tool_role_refused"
    status = 400

    def __init__(self, message: str, *, at_call: bool = False):
        super().__init__(message)
        if at_call:
            self.status = 502


class FixedParameterOverride(ToolArgumentsInvalid):
    """A call argument names a query parameter or header the tool's config fixes."""

    code = "fixed_parameter_override"

    def __init__(self, parameter: str, where: str):
        super().__init__(
            f"argument {parameter!r} names a {where} the tool's config fixes; it cannot be overridden",
            details={"parameter": parameter},
        )
