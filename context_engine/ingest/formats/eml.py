"""E-mail (``.eml``, RFC 5322), read with the stdlib ``email`` package and ``policy.default``.

The first unit is the header block (From, To, Cc, Subject, Date); the body follows, preferring
``text/plain`` and falling back to the HTML part read by the HTML extractor. Every attachment is
extracted recursively through the same registry, its units labelled
``section="attachment: <filename>"``. An attachment that cannot be read is recorded in
``meta["attachments"]`` with its error and does not fail the message; a ``max_rows`` refusal in
an attachment is not swallowed, because a cap never trims.
"""

from __future__ import annotations

import email
from email import policy
from email.message import EmailMessage
from typing import Any

from context_engine.errors import IngestTooLarge
from context_engine.ingest.extracted import Extracted, ExtractionFailed, Unit
from context_engine.ingest.formats import detect
from context_engine.ingest.formats._base import Source, extractor, no_text
from context_engine.ingest.formats.dispatch import extract_source
from context_engine.ingest.formats.text import paragraphs

_HEADERS = ("From", "To", "Cc", "Subject", "Date")


def _body_units(message: EmailMessage, subject: str | None, depth: int) -> list[Unit]:
    body = message.get_body(preferencelist=("plain", "html"))
    if body is None:
        return []
    try:
        content = body.get_content()
    except (LookupError, ValueError):  # an unknown charset: fall back to our own decoding
        payload = body.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    if not isinstance(content, str) or not content.strip():
        return []
    if body.get_content_subtype() == "html":
        try:
            html = extract_source(
                Source(data=content.encode("utf-8"), name="body.html", depth=depth + 1), mime=detect.HTML
            )
        except ExtractionFailed:
            return []
        return [Unit(text=unit.text, section=subject, kind=unit.kind, meta={"part": "body"})
                for unit in html.units]
    text = content.replace("\r\n", "\n")
    return [Unit(text=block, section=subject, meta={"part": "body"}) for block in paragraphs(text)]


def _attachment_bytes(part: EmailMessage) -> bytes:
    content = part.get_content()
    if isinstance(content, bytes):
        return content
    if isinstance(content, str):
        return content.encode("utf-8")
    if isinstance(content, EmailMessage):
        return bytes(content)
    return bytes(part.get_payload(decode=True) or b"")


@extractor(detect.EML)
def extract_eml(source: Source) -> Extracted:
    """Headers, body, then each attachment through :func:`extract` (failures noted, not fatal)."""
    message = email.message_from_bytes(source.read(), policy=policy.default)
    assert isinstance(message, EmailMessage)
    headers = {name: str(message[name]) for name in _HEADERS if message[name] is not None}
    subject = " ".join(headers["Subject"].split()) if headers.get("Subject") else None
    if not headers:
        raise ExtractionFailed(f"{source.label} is not an e-mail message (no From/To/Subject/Date headers)")

    units = [Unit(text="\n".join(f"{name}: {value}" for name, value in headers.items()), section=subject,
                  meta={"part": "headers"})]
    units.extend(_body_units(message, subject, source.depth))

    attachments: list[dict[str, Any]] = []
    for number, part in enumerate(message.iter_attachments(), start=1):
        filename = part.get_filename() or f"attachment-{number}"
        record: dict[str, Any] = {"filename": filename, "content_type": part.get_content_type()}
        attachments.append(record)
        try:
            payload = _attachment_bytes(part)
            inner = extract_source(
                Source(data=payload, name=filename, max_rows=source.max_rows, depth=source.depth + 1,
                       vision=source.vision),
                mime=part.get_content_type(),
            )
            section = f"attachment: {filename}"
            for unit in inner.units:
                units.append(Unit(text=unit.text, section=section, page=unit.page, kind=unit.kind,
                                  atomic=unit.atomic, meta={**unit.meta, "attachment": filename,
                                                            "attachment_section": unit.section}))
            record.update({"status": "extracted", "mime": inner.mime})
        except IngestTooLarge:
            raise
        except Exception as exc:  # one unreadable attachment never fails the message
            record.update({"status": "failed", "error": str(exc) or type(exc).__name__})
    meta: dict[str, Any] = {"headers": headers, "attachments": attachments}
    if len(units) == 1 and not attachments and not subject:
        raise no_text(source)
    return Extracted(mime=detect.EML, units=units, meta=meta)
