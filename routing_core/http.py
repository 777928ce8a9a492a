"""Framework-neutral request, response and refusal: what every adapter translates to and from."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

JSON_TYPE = "application/json"
#: every method a mount's catch-all accepts (those without a route are answered 405)
ALL_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")


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


class HttpError(Exception):
    """A refusal raised anywhere in a request's life; it becomes the error contract."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}

    def response(self) -> CoreResponse:
        return error(self.status, self.code, self.message, self.headers)


def error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> CoreResponse:
    """The one error shape: ``{"error": {"code", "message"}}``."""
    return CoreResponse(status=status, body={"error": {"code": code, "message": message}}, headers=headers or {})


def malformed_multipart() -> HttpError:
    return HttpError(
        400,
        "invalid_multipart",
        "the multipart body could not be parsed; send a 'file' part and optional name, source_id, acl "
        "and attributes fields",
    )


def too_many_parts() -> HttpError:
    """The framework's cap on the number of multipart parts refused (each adapter answers it alike)."""
    return HttpError(
        400,
        "invalid_request",
        "the multipart body has more parts than this server reads; send a long acl as one part holding a JSON list",
    )


def framework_too_large() -> HttpError:
    """The framework's own body cap (Flask ``MAX_CONTENT_LENGTH``, Django ``DATA_UPLOAD_*``) refused."""
    return HttpError(413, "too_large", "the request body is larger than this server accepts")


def unreadable_body() -> HttpError:
    return HttpError(400, "invalid_request", "the request body could not be read")


def encode(response: CoreResponse) -> tuple[int, bytes, dict[str, str]]:
    """Status, JSON bytes and headers; one encoder, so every mount sends identical bytes.

    A ``str`` body is a page (the OAuth popup), sent as it is under the ``Content-Type`` its
    handler set; read it back with :func:`content_type`.
    """
    if response.body is None:
        return response.status, b"", dict(response.headers)
    if isinstance(response.body, str):
        return response.status, response.body.encode("utf-8"), dict(response.headers)
    body = json.dumps(response.body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return response.status, body.encode("utf-8"), dict(response.headers)


def content_type(headers: dict[str, str]) -> str:
    """Remove and return the response's media type from encoded ``headers`` (JSON unless a handler set one)."""
    for name in [n for n in headers if n.lower() == "content-type"]:
        return headers.pop(name)
    return JSON_TYPE


# ---------------------------------------------------------------------- translation helpers
def header_map(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Lower-cased names; a repeated header joined with ``, `` as HTTP allows."""
    out: dict[str, str] = {}
    for name, value in items:
        key = name.lower()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def multi(items: Iterable[tuple[str, Any]]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for name, value in items:
        out.setdefault(name, []).append(value)
    return out


def last(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """One value per form field: the last, as repeated query parameters are read."""
    return {name: values[-1] for name, values in multi(items).items()}


def content_length(raw: Any) -> int | None:
    try:
        value = int(raw)
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None


def upload_name(raw: str | None) -> str | None:
    """The file name without any client path, as Django hands it over; ``None`` when empty."""
    name = (raw or "").rsplit("/", 1)[-1].rsplit("\\", 1)[-1].replace("\x00", "").strip()
    return None if name in ("", ".", "..") else name


def media_type(content_type: str | None) -> str:
    """``multipart/form-data`` of ``multipart/form-data; boundary=x``; lower-cased, ``""`` when absent."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_json(content_type: str | None) -> bool:
    kind = media_type(content_type)
    return kind == JSON_TYPE or (kind.startswith("application/") and kind.endswith("+json"))


def is_multipart(content_type: str | None) -> bool:
    return media_type(content_type) == "multipart/form-data"
