"""Span-level redaction: a pure transform from text (or nested plain data) to text.

ACL decides *whether* a caller may read a document; redaction decides *what inside it* they see.
This package only transforms strings: it loads no model, opens no connection and reads no
environment. The engine decides where it runs (before text is stored, or before it leaves the
process on a read) and passes the caller's principals and the hash key in.

Rules
    A :class:`RedactionRule` finds spans with a built-in detector (``email``, ``phone``, ``ssn``,
    ``credit_card``, ``iban``, ``api_key``; see :mod:`.detectors`), a named custom detector, a
    detector callable, or a regex ``pattern``. A pattern with a group named ``value`` (written
    ``(?P<value>...)`` or ``(?<value>...)``) replaces only that group; a match in which the group
    did not take part replaces nothing.

Actions
    ``mask`` writes ``[RULE_NAME]`` (the rule's name upper-cased); ``remove`` deletes the span;
    ``hash`` writes ``[RULE_NAME:<16 hex>]``, the start of an HMAC-SHA256 of the value under the
    policy's key. The same value and key always give the same token, so hashed values can still
    be joined or counted; a different key gives unrelated tokens, so tenants with different
    keys cannot join theirs. Built-in detectors canonicalise before hashing, so one real value
    written two ways gives one token: ``phone`` keeps its digits (folded to ASCII), and a
    ten-digit number is hashed as ``+1`` followed by it; ``email`` is trimmed and lower-cased;
    ``ssn`` and ``credit_card`` keep their digits; ``iban`` drops whitespace and is upper-cased.
    ``api_key``, custom detectors and patterns hash the exact matched text.

Stages and exemptions
    ``apply_at`` is ``output`` (the default; applied on reads), ``ingest`` (applied before
    storage, so the original never reaches the database) or ``both``. A rule whose ``unless``
    shares a principal with the caller is skipped for that caller; ``principals=None`` means the
    caller is unknown and every rule applies.

Overlapping matches
    Every active rule is run over the *original* text; replacements are never re-scanned. The
    spans of all rules are then merged:

    1. spans that overlap (share at least one character) form one region, transitively, and the
       whole region is replaced, so no character any rule matched survives; spans that only
       touch stay separate regions;
    2. one span in the region wins and decides the replacement: the longest span, then the span
       of the rule listed first in the policy, then the span that starts first;
    3. the winner's action applies to the whole region, and a ``hash`` winner hashes its own
       span's text, so its token equals the token that value gets when it stands alone.

    So when two rules find exactly the same span, the first listed rule names it; when one match
    contains another (an e-mail address containing a custom domain pattern), the enclosing match
    names it.

Calling it
    ``policy.redact(text, stage=..., principals=..., secret_key=...)`` for one string,
    ``policy.redact_obj(value, ...)`` for nested dicts/lists/tuples/sets of strings (keys are left
    as they are), ``policy.is_noop(stage)`` to skip the work entirely, ``policy.find_spans(...)``
    to see what would be replaced. ``policy.bind(key)`` returns a copy that hashes with ``key``;
    a ``secret_key`` passed to a call takes precedence over it. ``policy.check_key(key)`` raises
    :class:`RedactionConfigError` up front if a ``hash`` rule would be left without a key.
    ``RedactionPolicy()`` has no rules and returns its input object untouched.
"""

from __future__ import annotations

from context_engine.redaction.detectors import BUILTIN_DETECTORS, HASH_NORMALISERS, Detector
from context_engine.redaction.errors import RedactionConfigError
from context_engine.redaction.policy import (
    HASH_HEX_CHARS,
    RedactionPolicy,
    RedactionRule,
    RedactionSpan,
    Stage,
)
from context_engine.redaction.presidio import presidio_detectors

__all__ = [
    "BUILTIN_DETECTORS",
    "HASH_HEX_CHARS",
    "HASH_NORMALISERS",
    "Detector",
    "RedactionConfigError",
    "RedactionPolicy",
    "RedactionRule",
    "RedactionSpan",
    "Stage",
    "presidio_detectors",
]
