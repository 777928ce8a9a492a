"""Where the engine applies a policy: the effective key, and a per-call output redactor."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

from pydantic import SecretStr

from context_engine.redaction.errors import RedactionConfigError
from context_engine.redaction.policy import RedactionPolicy

SecretKey = str | bytes | SecretStr


def effective_key(
    policy: RedactionPolicy,
    explicit: SecretKey | None,
    redaction_secret_key: SecretStr | None,
    secret_key: SecretStr | None,
) -> SecretKey | None:
    """The hash key: given > ``redaction_secret_key`` > ``secret_key`` (with a warning) > refused.

    Falling back to ``secret_key`` makes hash tokens join across every tenant sharing it, so it
    warns; a ``hash`` rule with no key at all is refused here, when the engine or view is built.
    """
    if explicit is not None:
        return explicit
    if redaction_secret_key is not None:
        return redaction_secret_key
    if not policy.requires_key or policy.has_bound_key:
        return None
    if secret_key is not None:
        warnings.warn(
            "redaction hash rules are using secret_key because redaction_secret_key is not set; "
            "hash tokens will join across every tenant that shares this key",
            UserWarning,
            stacklevel=3,
        )
        return secret_key
    raise RedactionConfigError(
        "a redaction policy with a 'hash' rule needs a key: pass secret_key=, or set redaction_secret_key "
        "(or secret_key) in the config"
    )


def _plain(key: SecretKey | None) -> str | bytes | None:
    return key.get_secret_value() if isinstance(key, SecretStr) else key


@dataclass(frozen=True)
class Redactor:
    """One call's output redaction: a policy, its key and the caller (for ``unless``)."""

    policy: RedactionPolicy
    key: SecretKey | None
    principals: Sequence[str] | None

    @property
    def noop(self) -> bool:
        return self.policy.is_noop("output", principals=self.principals)

    @overload
    def text(self, value: str) -> str: ...
    @overload
    def text(self, value: None) -> None: ...
    def text(self, value: str | None) -> str | None:
        if value is None or self.noop:
            return value
        return self.policy.redact(value, stage="output", principals=self.principals, secret_key=_plain(self.key))

    def obj(self, value: Any) -> Any:
        if value is None or self.noop:
            return value
        return self.policy.redact_obj(value, stage="output", principals=self.principals, secret_key=_plain(self.key))


@dataclass(frozen=True)
class IngestScrubber:
    """Ingest-stage rules, applied before anything is stored or embedded."""

    policy: RedactionPolicy
    key: SecretKey | None

    @property
    def noop(self) -> bool:
        return self.policy.is_noop("ingest")

    def text(self, value: str) -> str:
        if self.noop:
            return value
        return self.policy.redact(value, stage="ingest", secret_key=_plain(self.key))

    def obj(self, value: Any) -> Any:
        if self.noop:
            return value
        return self.policy.redact_obj(value, stage="ingest", secret_key=_plain(self.key))
