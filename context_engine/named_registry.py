"""A table of records registered once by name, whose built-ins register themselves on first use.

The knowledge tool's actions and the stored tools' kinds are each such a table: the built-in
records live in a module that registers them when imported, and that module is imported on the
first lookup, so no lookup ever sees the table without them. A host or a test adds its own records
after them, in registration order.
"""

from __future__ import annotations

import importlib
from typing import Generic, TypeVar

T = TypeVar("T")


class NamedRegistry(Generic[T]):
    """Records by name, in registration order; ``builtins`` names the module that registers the
    built-in ones."""

    def __init__(self, builtins: str):
        self.builtins = builtins
        #: what is registered so far, without importing the built-ins (for checks made while they register)
        self.entries: dict[str, T] = {}

    def loaded(self) -> dict[str, T]:
        """Every record, the built-ins first (their module imported on the first call)."""
        importlib.import_module(self.builtins)
        return self.entries

    def check_free(self, name: str, entry: T, what: str) -> dict[str, T]:
        """Refuse a second record under a registered name (registering the same one again is
        allowed); returns every record, for further checks against them."""
        known = self.loaded()
        if name in known and known[name] is not entry:
            raise ValueError(f"{what} named {name!r} is already registered")
        return known

    def add(self, name: str, entry: T) -> T:
        self.entries[name] = entry
        return entry

    def remove(self, name: str) -> None:
        self.entries.pop(name, None)
