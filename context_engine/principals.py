"""Who is asking: the principals a read is filtered by.

``TRUSTED`` skips the ACL on purpose; ``[]`` is anonymous (sees only documents with an empty
ACL); a list of strings sees documents whose ACL intersects it. ``None`` is the old spelling of
trusted: it still works but warns, because every accessor degrades to ``None`` and that made
the unauthenticated path the most privileged one.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Final, TypeAlias


class _Trusted:
    """Sentinel for a trusted, internal caller."""

    _instance: _Trusted | None = None

    def __new__(cls) -> _Trusted:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "TRUSTED"

    def __reduce__(self) -> str:
        return "TRUSTED"


TRUSTED: Final = _Trusted()

#: what every ``principals=`` parameter accepts: ``TRUSTED``, a list of strings, or the deprecated ``None``
Principals: TypeAlias = Iterable[str] | _Trusted | None


def resolve(principals: Principals) -> tuple[str, ...] | None:
    """Normalise to ``None`` (trusted: no ACL predicate) or a tuple of principal strings."""
    if isinstance(principals, _Trusted):  # a singleton: the same test as ``is TRUSTED``, and mypy narrows it
        return None
    if principals is None:
        warnings.warn(
            "principals=None means a trusted caller and will be an error in 1.0; "
            "pass TRUSTED to skip the ACL on purpose, or [] for an anonymous caller",
            DeprecationWarning,
            stacklevel=3,
        )
        return None
    if isinstance(principals, str):
        raise TypeError("principals must be a list of strings, not a single string")
    values = tuple(principals)
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"principals must be strings, got {type(value).__name__}")
    return values


def holds_acl(acl: Iterable[str], principals: tuple[str, ...] | None) -> bool:
    """May a caller file a document under ``acl``? Trusted: always; otherwise every entry held."""
    if principals is None:
        return True
    held = set(principals)
    return all(entry in held for entry in acl)
