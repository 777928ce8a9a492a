"""Built-in detectors and the per-detector normalisation used by ``hash`` rules.

A detector is any callable that takes the text and returns ``(start, end)`` character offsets of
what it found. The built-ins are regular expressions followed, where the format has one, by a
checksum (Luhn for cards, ISO 7064 mod 97 for IBANs) or a validity test (SSN area/group/serial),
because a redaction rule that fires on every long number would make the text useless.

Candidates are scanned with :func:`_scan`, which retries one character later whenever a candidate
fails validation. A plain ``finditer`` would resume after the rejected candidate and could step
over a real value that starts inside it (``1234 4111 1111 1111 1111`` holds a valid card starting
at the fifth character). Every built-in keeps its candidates bounded in length, or skips a whole
word after a rejection, so scanning stays linear in the length of the text even on hostile input.

Digits: ``\\d`` in Python matches every Unicode decimal digit, so a number written with, say,
Arabic-Indic digits is detected too; checksums and hash normalisation fold those digits to their
ASCII values first.

Phone numbers follow two different rules:

* Without a leading ``+``: three groups ``3-3-4`` separated by ``-`` or by ``.`` (the same one in
  both gaps), optionally behind ``1`` plus that same separator; or the ``(415) 555-0123`` form
  (``-`` or ``.`` before the last group, at most one space after the parenthesis), optionally
  behind ``1``/``+1`` and at most one space or dash. ``415 555 0123``, ``415-555.0123`` and a bare
  ``4155550123`` are not phone numbers.
* With a leading ``+``: a digit run of 8 to 15 digits (the E.164 range) that may be split by
  single spaces or dashes, so ``+14155550123`` and ``+1 415 555 0123`` match but the dotted
  ``+1.415.555.0123`` does not, and neither does any dotted number written behind ``+1.``.
  Because the run is greedy, a number that directly follows such a phone number, separated only
  by one space, is taken as part of it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType

#: What every detector looks like: text in, character spans out.
Detector = Callable[[str], Sequence[tuple[int, int]]]

#: ``(start, end)`` a validator accepts for a candidate, or ``None`` to reject it.
_Validator = Callable[[re.Match[str]], tuple[int, int] | None]


def fold_digits(text: str) -> str:
    """Keep only decimal digits, each folded to ASCII (so ``٤١٥`` hashes like ``415``)."""
    return "".join(str(unicodedata.decimal(ch)) for ch in text if ch.isdecimal())


def _scan(
    rx: re.Pattern[str],
    text: str,
    validate: _Validator | None = None,
    coarse: re.Pattern[str] | None = None,
    back: int = 0,
) -> list[tuple[int, int]]:
    """Find non-overlapping validated matches, retrying one character on from a rejected one.

    ``coarse`` is a cheap pattern (it starts with a plain character class, which ``re`` can skip
    to quickly) whose matches bound where ``rx`` can possibly match; ``rx`` then runs only inside
    them, widened ``back`` characters to the left. A coarse region must stop only at a character
    ``rx`` can never consume, so that ``rx``'s lookaheads see the same thing at the region end as
    they would in the whole text. Most passages hold few candidates, so this is where the time goes.
    """
    spans: list[tuple[int, int]] = []
    if coarse is None:
        regions: Iterable[tuple[int, int]] = ((0, len(text)),)
    else:
        regions = ((max(0, m.start() - back), m.end()) for m in coarse.finditer(text))
    for region_start, region_end in regions:
        pos = max(region_start, spans[-1][1] if spans else 0)
        while pos < region_end:
            m = rx.search(text, pos, region_end)
            if m is None:
                break
            span = m.span() if validate is None else validate(m)
            if span is None or span[0] == span[1]:
                pos = m.start() + 1
                continue
            spans.append(span)
            pos = max(span[1], m.start() + 1)
    return spans


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sort spans and merge the overlapping ones, so one detector never reports a region twice."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


# --------------------------------------------------------------------------- email

_EMAIL_LOCAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
_EMAIL_DOMAIN = re.compile(r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,63}(?![A-Za-z0-9_-])")


def detect_email(text: str) -> list[tuple[int, int]]:
    """Addresses of the ordinary ``local@domain.tld`` shape (ASCII).

    Anchored on each ``@``: the local part is the run of allowed characters to its left, the
    domain must match to its right. Text without an ``@`` costs one substring test.
    """
    spans: list[tuple[int, int]] = []
    floor = 0
    at = text.find("@")
    while at != -1:
        start = at
        while start > floor and text[start - 1] in _EMAIL_LOCAL:
            start -= 1
        domain = _EMAIL_DOMAIN.match(text, at + 1) if start < at else None
        if domain is not None:
            spans.append((start, domain.end()))
            floor = domain.end()
            at = text.find("@", floor)
        else:
            at = text.find("@", at + 1)
    return spans


# --------------------------------------------------------------------------- phone

_PHONE = re.compile(
    r"""
    (?<![\d+])
    (?:
        (?:\+?1[ -]?)?\(\d{3}\)[ ]?\d{3}[-.]\d{4}     # (415) 555-0123, optionally behind 1 / +1
      | \+\d(?:[ -]?\d){7,14}                       # + then 8..15 digits, split by spaces/dashes
      | (?<!\d[.-])(?:1-)?\d{3}-\d{3}-\d{4}          # 415-555-0123, 1-415-555-0123
      | (?<!\d[.-])(?:1\.)?\d{3}\.\d{3}\.\d{4}       # 415.555.0123, 1.415.555.0123
    )
    (?!\d)(?![.-]\d)
    """,
    re.VERBOSE,
)
_PHONE_COARSE = re.compile(r"[\d(+][\d() +.-]{8,}")


def detect_phone(text: str) -> list[tuple[int, int]]:
    """North-American style numbers and ``+``-prefixed international ones (see module notes)."""
    return _scan(_PHONE, text, coarse=_PHONE_COARSE)


# --------------------------------------------------------------------------- ssn

_SSN = re.compile(r"(?<!\d)(?<!\d-)\d{3}-\d{2}-\d{4}(?!\d)(?!-\d)")
_SSN_COARSE = re.compile(r"\d[\d-]{10,}")


def _valid_ssn(m: re.Match[str]) -> tuple[int, int] | None:
    digits = fold_digits(m.group())
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    if area in ("000", "666") or area.startswith("9") or group == "00" or serial == "0000":
        return None
    return m.span()


def detect_ssn(text: str) -> list[tuple[int, int]]:
    """US social security numbers written ``AAA-GG-SSSS``, minus the never-issued ranges."""
    return _scan(_SSN, text, _valid_ssn, coarse=_SSN_COARSE)


# --------------------------------------------------------------------------- credit card

_CARD = re.compile(
    r"""
    (?<!\d)
    (?:
        \d{13,19}                                                    # contiguous
      | \d{4}(?P<s>[ -])\d{4}(?P=s)\d{4}(?P=s)\d{4}(?P<tail>(?P=s)\d{3})?  # 4-4-4-4(-3)
      | \d{4}(?P<t>[ -])\d{6}(?P=t)\d{4,5}                           # 4-6-5 (Amex), 4-6-4 (Diners)
    )
    (?!\d)
    """,
    re.VERBOSE,
)
_CARD_COARSE = re.compile(r"\d[\d -]{12,}")


def luhn_ok(digits: str) -> bool:
    """The Luhn mod-10 check every payment card number carries in its last digit."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _valid_card(m: re.Match[str]) -> tuple[int, int] | None:
    digits = fold_digits(m.group())
    if 13 <= len(digits) <= 19 and luhn_ok(digits):
        return m.span()
    if m.group("tail") is not None:
        # The three trailing digits may belong to something else; try the 16-digit card alone.
        if luhn_ok(fold_digits(m.string[m.start() : m.start("tail")])):
            return m.start(), m.start("tail")
    return None


def detect_credit_card(text: str) -> list[tuple[int, int]]:
    """13-19 digit card numbers, contiguous or in the usual groups, that pass the Luhn check."""
    return _scan(_CARD, text, _valid_card, coarse=_CARD_COARSE)


# --------------------------------------------------------------------------- iban

_IBAN = re.compile(
    r"""
    (?<![A-Za-z0-9])
    (?:
        [A-Za-z]{2}[0-9]{2}[A-Za-z0-9]{11,30}                            # contiguous
      | [A-Za-z]{2}[0-9]{2}(?:[ ][A-Za-z0-9]{4}){2,7}(?:[ ][A-Za-z0-9]{1,4})?  # groups of four
    )
    (?![A-Za-z0-9])
    """,
    re.VERBOSE,
)
# Anchored on the two check digits (rarer than letters) with the country code checked by a
# lookbehind; the region is widened two characters to the left to take that code in.
_IBAN_COARSE = re.compile(r"[0-9]{2}(?<=[A-Za-z]{2}[0-9]{2})[A-Za-z0-9 ]{11,}")


def iban_ok(iban: str) -> bool:
    """ISO 13616 check: move the first four characters to the end, letters to numbers, mod 97 == 1."""
    if not 15 <= len(iban) <= 34 or not iban.isascii() or not iban.isalnum():
        return False
    if not iban[:2].isalpha() or not iban[2:4].isdigit() or not 2 <= int(iban[2:4]) <= 98:
        return False
    rearranged = iban[4:] + iban[:4]
    numeric = "".join(str(int(ch, 36)) for ch in rearranged)
    return int(numeric) % 97 == 1


#: Registered IBAN length per country. Used only to cut a grouped candidate that ran on into
#: the next word (``BE68 5390 0754 7034 and`` reads as one candidate); acceptance itself rests on
#: the checksum alone, so a country missing here, or a new length, is still detected.
IBAN_LENGTHS: Mapping[str, int] = MappingProxyType(
    {
        "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
        "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
        "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
        "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22,
        "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32,
        "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
        "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24,
        "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24, "SC": 31,
        "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28, "TL": 23,
        "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
    }
)  # fmt: skip


def _compact_iban(value: str) -> str:
    return value.replace(" ", "").upper()


def _valid_iban(m: re.Match[str]) -> tuple[int, int] | None:
    start, end = m.span()
    candidate = m.group()
    compact = _compact_iban(candidate)
    expected = IBAN_LENGTHS.get(compact[:2])
    if expected is not None and len(compact) > expected and " " in candidate:
        # Where the country's IBAN ends: accepted only at a group boundary, and preferred to
        # the longer reading, since a trailing short word passes the checksum 1 time in 97.
        kept = 0
        for cut, ch in enumerate(candidate):
            if ch != " ":
                kept += 1
            if kept == expected:
                following = candidate[cut + 1 : cut + 2]
                if following == " " and iban_ok(_compact_iban(candidate[: cut + 1])):
                    return start, start + cut + 1
                break
    return (start, end) if iban_ok(compact) else None


def detect_iban(text: str) -> list[tuple[int, int]]:
    """International bank account numbers, contiguous or in groups of four, mod-97 checked."""
    return _scan(_IBAN, text, _valid_iban, coarse=_IBAN_COARSE, back=2)


# --------------------------------------------------------------------------- api key

_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")

# Every branch starts with a literal, so ``re`` only stops at plausible first letters; the
# left boundary (not glued to a longer word) is checked in Python for the same reason.
_KEY_PREFIXED = re.compile(
    r"""
        sk-(?:proj-|ant-[a-z0-9]+-)?[A-Za-z0-9_-]{20,}        # OpenAI / Anthropic style
      | sk_(?:live|test)_[A-Za-z0-9]{16,}                     # Stripe secret
      | pk_(?:live|test)_[A-Za-z0-9]{16,}                     # Stripe publishable
      | rk_(?:live|test)_[A-Za-z0-9]{16,}                     # Stripe restricted
      | AKIA[0-9A-Z]{16}(?![0-9A-Z])                          # AWS access key id
      | ASIA[0-9A-Z]{16}(?![0-9A-Z])                          # AWS temporary key id
      | gh[pousr]_[A-Za-z0-9]{36,}                            # GitHub tokens
      | github_pat_[A-Za-z0-9_]{22,}                          # GitHub fine-grained tokens
      | glpat-[A-Za-z0-9_-]{20,}                              # GitLab personal tokens
      | xox[abposr]-[A-Za-z0-9-]{10,}                         # Slack
      | AIza[0-9A-Za-z_-]{35}                                 # Google API key
      | eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}  # JSON Web Token
    """,
    re.VERBOSE,
)
_TOKEN_RUN = re.compile(r"[A-Za-z0-9_-]*")
# ``api_key = "..."`` and friends: found from each ``:``/``=``, by checking the name just before
# it and then reading the value after it; only the value is reported.
_KEY_SEPARATOR = re.compile(r"[:=]")
_KEY_NAME = re.compile(
    r"""(?i)(?<![A-Za-z0-9])(?:api[_-]?key|secret[_-]?key|private[_-]?key|client[_-]?secret"""
    r"""|access[_-]?token|auth[_-]?token|refresh[_-]?token|api[_-]?token)["']?\s*$"""
)
_KEY_NAME_ENDINGS = ("key", "secret", "token")
_KEY_VALUE = re.compile(r"""\s*["']?(?P<value>[A-Za-z0-9_\-./+=]{16,})""")
_KEY_BEARER = re.compile(r"[Bb]earer\s+(?P<value>[A-Za-z0-9._~+/-]{20,}=*)")


def _prefixed_keys(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    pos = 0
    while (m := _KEY_PREFIXED.search(text, pos)) is not None:
        start = m.start()
        if start > 0 and text[start - 1] in _TOKEN_CHARS:
            # Glued to a longer word (``task-...``): so is every later start in this word, so
            # skip the word; retrying one character on would make long words quadratic.
            run = _TOKEN_RUN.match(text, start)
            pos = max(run.end() if run else start + 1, start + 1)
            continue
        spans.append(m.span())
        pos = m.end()
    return spans


def _assigned_keys(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    pos = 0
    while (sep := _KEY_SEPARATOR.search(text, pos)) is not None:
        pos = sep.end()
        window = max(0, sep.start() - 40)
        # Cheap test first: every key name ends in one of these words.
        if not text[window : sep.start()].rstrip().rstrip("\"'").lower().endswith(_KEY_NAME_ENDINGS):
            continue
        if _KEY_NAME.search(text, window, sep.start()) is None:
            continue
        value = _KEY_VALUE.match(text, sep.end())
        if value is not None:
            spans.append(value.span("value"))
            pos = value.end()
    return spans


def _bearer_key(m: re.Match[str]) -> tuple[int, int] | None:
    start = m.start()
    if start > 0 and m.string[start - 1].isalnum():
        return None
    return m.span("value")


def detect_api_key(text: str) -> list[tuple[int, int]]:
    """Well-known credential shapes, the value of ``api_key=...``-style assignments, bearer tokens."""
    spans = _prefixed_keys(text) + _assigned_keys(text) + _scan(_KEY_BEARER, text, _bearer_key)
    return _union(spans)


# --------------------------------------------------------------------------- registry


def _normalise_phone(value: str) -> str:
    digits = fold_digits(value)
    # A ten-digit number is a North-American one written without its country code.
    if len(digits) == 10:
        digits = "1" + digits
    return "+" + digits


def _normalise_email(value: str) -> str:
    return value.strip().lower()


def _normalise_iban(value: str) -> str:
    return "".join(value.split()).upper()


#: The detectors a rule can name with ``detector="..."``. Read-only: add your own through
#: ``RedactionPolicy(custom_detectors=...)`` instead of changing this mapping.
BUILTIN_DETECTORS: Mapping[str, Detector] = MappingProxyType(
    {
        "email": detect_email,
        "phone": detect_phone,
        "ssn": detect_ssn,
        "credit_card": detect_credit_card,
        "iban": detect_iban,
        "api_key": detect_api_key,
    }
)

#: How a ``hash`` rule canonicalises a match before keying it, per built-in detector. Detectors
#: missing here (``api_key``, custom ones, ``pattern`` rules) hash the raw match: case and
#: punctuation can be significant in an opaque token, and there is nothing to normalise by.
HASH_NORMALISERS: Mapping[str, Callable[[str], str]] = MappingProxyType(
    {
        "email": _normalise_email,
        "phone": _normalise_phone,
        "ssn": fold_digits,
        "credit_card": fold_digits,
        "iban": _normalise_iban,
    }
)
