"""Framework-neutral request and response: what every adapter translates to and from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any


@dataclass
class Upload:
    """One uploaded file as the framework handed it over (spooled to disk by the framework)."""

    filename: str
    content_type: str | None
    file: IO[bytes]
    size: int | None = None


@dataclass
class CoreRequest:
    method: str
    #: path below the mount point, starting with ``/`` (``/documents/abc``)
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, list[str]] = field(default_factory=dict)
    #: raw JSON body (``None`` for a multipart request)
    body: bytes | None = None
    form: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, Upload] = field(default_factory=dict)
    #: the framework's own request object, handed to the host's ``auth`` and ``principals``
    native: Any = None

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        for key, value in self.headers.items():
            if key.lower() == lowered:
                return value
        return None


@dataclass
class CoreResponse:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> CoreResponse:
    """The one error shape: ``{"error": {"code", "message"}}``."""
    return CoreResponse(status=status, body={"error": {"code": code, "message": message}}, headers=headers or {})
