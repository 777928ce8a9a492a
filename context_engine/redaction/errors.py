"""The one error redaction raises on purpose."""

from __future__ import annotations

from context_engine.errors import ConfigError


class RedactionConfigError(ConfigError, ValueError):
    """A policy that cannot be applied as configured (a ``hash`` rule without a key, a broken detector).

    It is a ``ValueError`` so plain callers can catch it without knowing our hierarchy, and a
    ``ConfigError`` so the engine reports it with the same stable code as other setup mistakes.
    The message never contains the text being redacted.
    """

    code = "redaction_config_error"
