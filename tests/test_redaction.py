"""Unit tests for the redaction transform: detectors, actions, stages, exemptions, merging."""

from __future__ import annotations

import re
import sys
import time
from collections import namedtuple
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from context_engine.errors import ConfigError
from context_engine.redaction import (
    BUILTIN_DETECTORS,
    HASH_HEX_CHARS,
    RedactionConfigError,
    RedactionPolicy,
    RedactionRule,
    RedactionSpan,
    presidio_detectors,
)
from context_engine.redaction._patterns import normalise_group_syntax
from context_engine.redaction.detectors import (
    detect_api_key,
    detect_credit_card,
    detect_email,
    detect_iban,
    detect_phone,
    detect_ssn,
    fold_digits,
    iban_ok,
    luhn_ok,
)

KEY = b"test-key-one"
OTHER_KEY = b"test-key-two"
ARABIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


def only(rule: RedactionRule, **kw: Any) -> RedactionPolicy:
    return RedactionPolicy(rules=[rule], **kw)


def out(policy: RedactionPolicy, text: str, **kw: Any) -> str:
    return policy.redact(text, stage="output", **kw)


def whole(text: str) -> list[tuple[int, int]]:
    return [(0, len(text))]


# --------------------------------------------------------------------------- email


@pytest.mark.parametrize(
    "value",
    ["alice@example.com", "A.B+tag@sub.example.co.uk", "first_last%x@ex-ample.org", "x1@a.io"],
)
def test_email_accepted(value: str) -> None:
    assert detect_email(value) == whole(value)
    text = f"write to <{value}>, thanks"
    assert detect_email(text) == [(10, 10 + len(value))]


@pytest.mark.parametrize(
    "value", ["alice@", "@example.com", "alice@example", "alice@example.c", "alice at example dot com"]
)
def test_email_rejected(value: str) -> None:
    assert detect_email(value) == []


# --------------------------------------------------------------------------- phone

PHONE_ACCEPTED = [
    "(415) 555-0123",
    "415-555-0123",
    "415.555.0123",
    "1-415-555-0123",
    "+1 (415) 555-0123",
    "+14155550123",
    "+1 415 555 0123",
]
PHONE_REJECTED = ["415 555 0123", "415-555.0123", "4155550123", "+1.415.555.0123"]


@pytest.mark.parametrize("value", PHONE_ACCEPTED)
def test_phone_accepted_forms(value: str) -> None:
    assert detect_phone(value) == whole(value)
    text = f"call {value} today"
    assert detect_phone(text) == [(5, 5 + len(value))]


@pytest.mark.parametrize("value", PHONE_REJECTED)
def test_phone_rejected_forms(value: str) -> None:
    assert detect_phone(value) == []
    assert detect_phone(f"call {value} today") == []


@pytest.mark.parametrize("value", ["415-555-0123", "(415) 555-0123", "+1 415 555 0123"])
def test_phone_matches_non_ascii_digits(value: str) -> None:
    arabic = value.translate(ARABIC)
    assert detect_phone(arabic) == whole(arabic)


def test_phone_not_glued_to_longer_numbers() -> None:
    assert detect_phone("ref 9415-555-0123") == []
    assert detect_phone("ref 415-555-01234") == []
    assert detect_phone("ref 415-555-0123-7") == []


def test_phone_plus_form_bounds() -> None:
    assert detect_phone("+1234567") == []  # seven digits: too short for E.164
    assert detect_phone("+44 20 7946 0958") == whole("+44 20 7946 0958")
    assert detect_phone("+44-20-7946-0958") == whole("+44-20-7946-0958")


# --------------------------------------------------------------------------- ssn


@pytest.mark.parametrize("value", ["123-45-6789", "078-05-1120", "899-99-9999"])
def test_ssn_accepted(value: str) -> None:
    assert detect_ssn(value) == whole(value)
    assert detect_ssn(f"SSN {value}.") == [(4, 4 + len(value))]
    assert detect_ssn(value.translate(ARABIC)) == whole(value)


@pytest.mark.parametrize(
    "value",
    [
        "000-12-3456",
        "666-12-3456",
        "900-12-3456",
        "123-00-6789",
        "123-45-0000",
        "123456789",
        "123-45-678",
        "123-456-789",
        "1123-45-6789",
        "123-45-67890",
        "123 45 6789",
    ],
)
def test_ssn_rejected(value: str) -> None:
    assert detect_ssn(value) == []


# --------------------------------------------------------------------------- credit card


@pytest.mark.parametrize(
    "value",
    [
        "4111111111111111",
        "4111 1111 1111 1111",
        "4111-1111-1111-1111",
        "5555555555554444",
        "378282246310005",
        "3782 822463 10005",
        "30569309025904",
        "4222222222222",
        "6011000990139424",
    ],
)
def test_credit_card_accepted(value: str) -> None:
    assert detect_credit_card(value) == whole(value)
    assert detect_credit_card(f"card: {value}, exp 12/27") == [(6, 6 + len(value))]


@pytest.mark.parametrize(
    "value",
    [
        "4111111111111112",  # Luhn fails
        "4111 1111 1111 1112",
        "4111 1111-1111 1111",  # mixed separators
        "411111111111",  # 12 digits
        "41111111111111111111",  # 20 digits
        "4111  1111 1111 1111",  # double space
    ],
)
def test_credit_card_rejected(value: str) -> None:
    assert detect_credit_card(value) == []


def test_credit_card_found_inside_a_rejected_candidate() -> None:
    # "1234 4111 ..." fails Luhn as a whole; the real card starts five characters in.
    assert detect_credit_card("1234 4111 1111 1111 1111") == [(5, 24)]
    # A trailing three-digit group that breaks the checksum is left out of the card.
    assert detect_credit_card("4111 1111 1111 1111 123") == [(0, 19)]


def test_credit_card_non_ascii_digits() -> None:
    value = "4111 1111 1111 1111".translate(ARABIC)
    assert detect_credit_card(value) == whole(value)


@pytest.mark.parametrize(
    ("digits", "ok"),
    [("79927398713", True), ("79927398710", False), ("4111111111111111", True), ("0", True), ("18", True)],
)
def test_luhn(digits: str, ok: bool) -> None:
    assert luhn_ok(digits) is ok


# --------------------------------------------------------------------------- iban

IBANS = [
    "DE89 3704 0044 0532 0130 00",
    "DE89370400440532013000",
    "GB82 WEST 1234 5698 7654 32",
    "GB82WEST12345698765432",
    "FR14 2004 1010 0505 0001 3M02 606",
    "NL91ABNA0417164300",
    "NO9386011117947",
    "MT84MALT011000012345MTLCAST001S",
    "de89 3704 0044 0532 0130 00",
]


@pytest.mark.parametrize("value", IBANS)
def test_iban_accepted(value: str) -> None:
    assert detect_iban(value) == whole(value)
    assert detect_iban(f"pay to {value}.") == [(7, 7 + len(value))]


def test_iban_does_not_swallow_the_next_word() -> None:
    text = (
        "IBAN GB82 WEST 1234 5698 7654 32 THEN stop; DE89 3704 0044 0532 0130 00 ABCD; "
        "BE68 5390 0754 7034 and BE68 5390 0754 7034 ABCD EFGH"
    )
    assert [text[s:e] for s, e in detect_iban(text)] == [
        "GB82 WEST 1234 5698 7654 32",
        "DE89 3704 0044 0532 0130 00",
        "BE68 5390 0754 7034",
        "BE68 5390 0754 7034",
    ]


@pytest.mark.parametrize(
    "value",
    [
        "DE89 3704 0044 0532 0130 01",  # checksum
        "DE88370400440532013000",  # check digits
        "DE00370400440532013000",  # check digits outside 02..98
        "DE89 3704 0044",  # too short
        "XDE89370400440532013000",  # glued to a word
        "DE89-3704-0044-0532-0130-00",  # dashes are not IBAN grouping
    ],
)
def test_iban_rejected(value: str) -> None:
    assert detect_iban(value) == []


def test_iban_checksum() -> None:
    assert iban_ok("GB82WEST12345698765432")
    assert not iban_ok("GB83WEST12345698765432")
    assert not iban_ok("GB82WEST1234569876543!")


# --------------------------------------------------------------------------- api key


@pytest.mark.parametrize(
    "value",
    [
        "sk-abcdefghijklmnopqrstuvwx12",
        "sk-proj-abcdefghijklmnopqrstuvwx",
        "sk-ant-api03-abcdefghijklmnopqrstuvwx",
        "sk_live_abcdefghijklmnop1234",
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_" + "a1" * 18,
        "github_pat_" + "A" * 30,
        "glpat-abcdefghijklmnopqrst",
        "xoxb-1234567890-abcdef",
        "AIza" + "B" * 35,
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlX2hlcmU",
    ],
)
def test_api_key_accepted(value: str) -> None:
    assert detect_api_key(value) == whole(value)
    assert detect_api_key(f"token {value} leaked") == [(6, 6 + len(value))]


def test_api_key_assignment_masks_the_value_only() -> None:
    text = 'config: api_key = "Zx81bC0qLm29Pq77Tt" and CLIENT_SECRET: Zx81bC0qLm29Pq77Tt99'
    assert [text[s:e] for s, e in detect_api_key(text)] == ["Zx81bC0qLm29Pq77Tt", "Zx81bC0qLm29Pq77Tt99"]
    bearer = "Authorization: Bearer abcdefghijklmnopqrstuvwxyz.123"
    assert [bearer[s:e] for s, e in detect_api_key(bearer)] == ["abcdefghijklmnopqrstuvwxyz.123"]


@pytest.mark.parametrize(
    "value",
    [
        "task-abcdefghijklmnopqrstuvwxyz",  # "sk-" inside a word
        "api_key = short",  # value too short
        "title: abcdefghijklmnopqrstuvwx",  # not a key name
        "AKIAIOSFODNN7EXAMPLEXX",  # too long for an AWS key id
        "see the secret keys section",
    ],
)
def test_api_key_rejected(value: str) -> None:
    assert detect_api_key(value) == []


def test_builtin_registry_is_complete_and_read_only() -> None:
    assert set(BUILTIN_DETECTORS) == {"email", "phone", "ssn", "credit_card", "iban", "api_key"}
    with pytest.raises(TypeError):
        BUILTIN_DETECTORS["x"] = detect_email  # type: ignore[index]


def test_fold_digits() -> None:
    assert fold_digits("+1 (٤١٥) 555-0123") == "14155550123"


# --------------------------------------------------------------------------- the reference example


def test_reference_example() -> None:
    policy = RedactionPolicy(
        rules=[
            RedactionRule(name="emails", detector="email"),
            RedactionRule(name="order_id", pattern=r"\bORD-\d{6}\b"),
            RedactionRule(name="acct", pattern=r"Account:\s*(?P<value>\d+)"),
        ]
    )
    text = "Mail bob@corp.example about ORD-123456. Account: 99812"
    assert out(policy, text) == "Mail [EMAILS] about [ORDER_ID]. Account: [ACCT]"


# --------------------------------------------------------------------------- value groups


@pytest.mark.parametrize("pattern", [r"Account:\s*(?P<value>\d+)", r"Account:\s*(?<value>\d+)"])
def test_value_group_both_syntaxes(pattern: str) -> None:
    policy = only(RedactionRule(name="acct", pattern=pattern))
    assert out(policy, "Account: 42, Account:7") == "Account: [ACCT], Account:[ACCT]"


def test_value_group_not_participating_masks_nothing() -> None:
    policy = only(RedactionRule(name="acct", pattern=r"Account:\s*(?:(?<value>\d+)|n/a)"))
    text = "Account: n/a"
    assert out(policy, text) is text
    assert out(policy, "Account: n/a, Account: 5") == "Account: n/a, Account: [ACCT]"


def test_value_group_empty_match_masks_nothing() -> None:
    policy = only(RedactionRule(name="v", pattern=r"id=(?P<value>\d*)"))
    assert out(policy, "id= and id=7") == "id= and id=[V]"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (r"(?<value>\d+)", r"(?P<value>\d+)"),
        (r"(?<a>x)\k<a>", r"(?P<a>x)(?P=a)"),
        (r"(?<=Account: )\d+", r"(?<=Account: )\d+"),
        (r"(?<!x)y", r"(?<!x)y"),
        (r"\(?<value>", r"\(?<value>"),
        (r"[(?<value>]x", r"[(?<value>]x"),
        (r"[]](?<v>a)", r"[]](?P<v>a)"),
        (r"(?P<value>\d)", r"(?P<value>\d)"),
    ],
)
def test_named_group_normalisation(given: str, expected: str) -> None:
    assert normalise_group_syntax(given) == expected


def test_lookbehind_pattern_still_works() -> None:
    policy = only(RedactionRule(name="acct", pattern=r"(?<=Account: )\d+"))
    assert out(policy, "Account: 42") == "Account: [ACCT]"


# --------------------------------------------------------------------------- actions


def test_remove_deletes_the_span() -> None:
    policy = only(RedactionRule(name="e", detector="email", action="remove"))
    assert out(policy, "a a@b.co b") == "a  b"


def test_mask_token_is_upper_cased_name() -> None:
    policy = only(RedactionRule(name="work-Email.v2", detector="email"))
    assert out(policy, "x@y.org") == "[WORK-EMAIL.V2]"


HASH_TOKEN = re.compile(rf"\[([A-Z_]+):([0-9a-f]{{{HASH_HEX_CHARS}}})\]")


def hashed(detector: str, text: str, key: bytes = KEY, name: str | None = None) -> str:
    policy = only(RedactionRule(name=name or detector, detector=detector, action="hash"))
    return policy.redact(text, stage="output", secret_key=key)


def test_hash_token_format_and_stability() -> None:
    token = hashed("email", "bob@corp.example")
    assert HASH_TOKEN.fullmatch(token)
    assert token.startswith("[EMAIL:")
    assert hashed("email", "bob@corp.example") == token
    assert hashed("email", "bob@corp.example", key=OTHER_KEY) != token
    assert hashed("email", "eve@corp.example") != token


def test_hash_token_joins_across_rules_with_the_same_detector() -> None:
    a = hashed("email", "bob@corp.example", name="author")
    b = hashed("email", "bob@corp.example", name="owner")
    assert a.split(":")[1] == b.split(":")[1]


@pytest.mark.parametrize(
    ("detector", "forms"),
    [
        ("phone", PHONE_ACCEPTED),
        ("phone", ["415-555-0123", "415-555-0123".translate(ARABIC)]),
        ("email", ["Bob@Corp.Example", "bob@corp.example", "BOB@CORP.EXAMPLE"]),
        ("ssn", ["123-45-6789", "123-45-6789".translate(ARABIC)]),
        ("credit_card", ["4111 1111 1111 1111", "4111-1111-1111-1111", "4111111111111111"]),
        ("iban", ["DE89 3704 0044 0532 0130 00", "de89370400440532013000"]),
    ],
)
def test_hash_normalises_per_detector(detector: str, forms: list[str]) -> None:
    tokens = {hashed(detector, form) for form in forms}
    assert len(tokens) == 1, tokens
    assert HASH_TOKEN.fullmatch(tokens.pop())


def test_hash_of_pattern_and_api_key_is_raw() -> None:
    policy = only(RedactionRule(name="code", pattern=r"\b[A-Za-z]{3}-\d{3}\b", action="hash")).bind(KEY)
    assert out(policy, "abc-123") != out(policy, "ABC-123")
    assert hashed("api_key", "sk-abcdefghijklmnopqrstuvwx12") != hashed(
        "api_key", "sk-ABCDEFGHIJKLMNOPQRSTUVWX12"
    )


def test_hash_without_key_is_refused() -> None:
    policy = only(RedactionRule(name="p", detector="phone", action="hash", unless=["admin"]))
    assert policy.requires_key and not policy.has_bound_key
    for kwargs in ({}, {"principals": ["admin"]}):
        with pytest.raises(RedactionConfigError, match="no key"):
            policy.redact("nothing to see", stage="output", **kwargs)
    with pytest.raises(RedactionConfigError):
        policy.redact_obj({"a": "b"}, stage="output")
    with pytest.raises(RedactionConfigError):
        policy.check_key()
    with pytest.raises(ValueError) as err:
        policy.redact("x", stage="ingest")
    assert isinstance(err.value, ConfigError)
    assert err.value.code == "redaction_config_error"


def test_bind_and_per_call_keys() -> None:
    policy = only(RedactionRule(name="p", detector="phone", action="hash"))
    bound = policy.bind(KEY)
    assert bound is not policy and bound.has_bound_key and not policy.has_bound_key
    bound.check_key()
    text = "call 415-555-0123"
    assert out(bound, text) == out(policy, text, secret_key=KEY)
    assert out(bound, text, secret_key=OTHER_KEY) == out(policy, text, secret_key=OTHER_KEY)
    assert out(bound, text) != out(bound, text, secret_key=OTHER_KEY)
    assert out(policy, text, secret_key="test-key-one") == out(bound, text)
    assert out(policy, text, secret_key=SecretStr("test-key-one")) == out(bound, text)
    assert "test-key" not in repr(bound)
    with pytest.raises(RedactionConfigError):
        policy.bind(b"")
    with pytest.raises(RedactionConfigError):
        out(policy, text, secret_key="")


def test_policy_without_hash_rules_needs_no_key() -> None:
    policy = only(RedactionRule(name="e", detector="email"))
    assert not policy.requires_key
    policy.check_key()
    assert out(policy, "x@y.org") == "[E]"


# --------------------------------------------------------------------------- overlap merging


def spans_of(*found: tuple[int, int]) -> Any:
    return lambda text: list(found)


def test_identical_spans_first_listed_rule_names_them() -> None:
    rules = [RedactionRule(name="first", detector="email"), RedactionRule(name="second", detector="email")]
    assert out(RedactionPolicy(rules=rules), "x@y.org") == "[FIRST]"
    assert out(RedactionPolicy(rules=rules[::-1]), "x@y.org") == "[SECOND]"


def test_enclosing_match_wins_over_listed_order() -> None:
    policy = RedactionPolicy(
        rules=[
            RedactionRule(name="domain", pattern=r"corp\.example"),
            RedactionRule(name="email", detector="email"),
        ]
    )
    assert out(policy, "to bob@corp.example now") == "to [EMAIL] now"


def test_partial_overlap_replaces_the_union_with_the_longest() -> None:
    text = "0123456789"
    policy = RedactionPolicy(
        rules=[
            RedactionRule(name="a", detector=spans_of((2, 5))),
            RedactionRule(name="b", detector=spans_of((4, 9))),
        ]
    )
    assert out(policy, text) == "01[B]9"
    assert policy.find_spans(text, stage="output") == [RedactionSpan(2, 9, "b", "mask")]


def test_equal_length_partial_overlap_goes_to_the_first_rule() -> None:
    policy = RedactionPolicy(
        rules=[
            RedactionRule(name="b", detector=spans_of((4, 7))),
            RedactionRule(name="a", detector=spans_of((2, 5))),
        ]
    )
    assert out(policy, "0123456789") == "01[B]789"


def test_overlaps_chain_transitively_and_touching_spans_stay_apart() -> None:
    policy = RedactionPolicy(
        rules=[
            RedactionRule(name="a", detector=spans_of((0, 3), (8, 10))),
            RedactionRule(name="b", detector=spans_of((2, 5))),
            RedactionRule(name="c", detector=spans_of((4, 8))),
        ]
    )
    # (0,3)~(2,5)~(4,8) chain into 0..8; (8,10) only touches it.
    assert out(policy, "0123456789") == "[C][A]"


def test_overlap_winner_action_applies_and_hash_is_of_its_own_span() -> None:
    text = "mail bob@corp.example"
    policy = RedactionPolicy(
        rules=[
            RedactionRule(name="dom", pattern=r"@corp", action="remove"),
            RedactionRule(name="email", detector="email", action="hash"),
        ]
    )
    alone = hashed("email", "bob@corp.example")
    assert policy.redact(text, stage="output", secret_key=KEY) == "mail " + alone


def test_replacements_are_not_rescanned() -> None:
    policy = RedactionPolicy(
        rules=[RedactionRule(name="e", detector="email"), RedactionRule(name="brackets", pattern=r"\[E\]")]
    )
    assert out(policy, "x@y.org") == "[E]"


# --------------------------------------------------------------------------- unless, stages, no-op


def test_unless_exempts_intersecting_principals() -> None:
    policy = RedactionPolicy(
        rules=[
            RedactionRule(name="e", detector="email", unless=["group:hr", "user:ana"]),
            RedactionRule(name="p", detector="phone"),
        ]
    )
    text = "x@y.org 415-555-0123"
    assert out(policy, text, principals=["group:hr"]) == "x@y.org [P]"
    assert out(policy, text, principals=["user:bob", "user:ana"]) == "x@y.org [P]"
    assert out(policy, text, principals=["group:eng"]) == "[E] [P]"
    assert out(policy, text, principals=[]) == "[E] [P]"
    assert out(policy, text, principals=None) == "[E] [P]"
    assert out(policy, text, principals=("group:hr",)) == "x@y.org [P]"
    with pytest.raises(TypeError):
        out(policy, text, principals="group:hr")  # type: ignore[arg-type]


def test_fully_exempt_caller_gets_the_input_back() -> None:
    policy = only(RedactionRule(name="e", detector="email", unless=["admin"]))
    text = "x@y.org"
    assert out(policy, text, principals=["admin"]) is text
    assert policy.is_noop("output", principals=["admin"])
    assert not policy.is_noop("output", principals=["guest"])


@pytest.mark.parametrize(
    ("apply_at", "at_ingest", "at_output"),
    [("output", False, True), ("ingest", True, False), ("both", True, True)],
)
def test_apply_at_stages(apply_at: str, at_ingest: bool, at_output: bool) -> None:
    policy = only(RedactionRule(name="e", detector="email", apply_at=apply_at))  # type: ignore[arg-type]
    text = "x@y.org"
    for stage, expected in (("ingest", at_ingest), ("output", at_output)):
        redacted = policy.redact(text, stage=stage)  # type: ignore[arg-type]
        assert (redacted == "[E]") is expected
        assert policy.is_noop(stage) is (not expected)  # type: ignore[arg-type]


def test_default_apply_at_is_output() -> None:
    assert RedactionRule(name="e", detector="email").apply_at == "output"


def test_bad_stage_is_refused() -> None:
    with pytest.raises(ValueError, match="stage"):
        RedactionPolicy().redact("x", stage="both")  # type: ignore[arg-type]


def test_default_policy_is_identity() -> None:
    policy = RedactionPolicy()
    text = "bob@corp.example 415-555-0123 4111 1111 1111 1111 \u00e9\U0001f600"
    for stage in ("ingest", "output"):
        assert policy.is_noop(stage)  # type: ignore[arg-type]
        result = policy.redact(text, stage=stage)  # type: ignore[arg-type]
        assert result is text
        assert result.encode("utf-8") == text.encode("utf-8")
    data = {"a": [text]}
    assert policy.redact_obj(data, stage="output") is data
    assert not policy.requires_key
    policy.check_key()


def test_no_match_returns_the_same_object() -> None:
    policy = only(RedactionRule(name="e", detector="email"))
    text = "nothing here"
    assert out(policy, text) is text


def test_redact_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        RedactionPolicy().redact(b"bytes", stage="output")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- redact_obj

Point = namedtuple("Point", ["label", "n"])


def test_redact_obj_walks_nested_values_and_keeps_keys() -> None:
    policy = only(RedactionRule(name="e", detector="email"))
    data = {
        "x@y.org": "from x@y.org",
        "hits": [{"text": "a@b.io", "score": 0.5}, ("c@d.io", 3, None)],
        "tags": {"e@f.io"},
        "frozen": frozenset({"g@h.io"}),
        "point": Point("i@j.io", 1),
        "raw": b"k@l.io",
    }
    result = policy.redact_obj(data, stage="output")
    assert result == {
        "x@y.org": "from [E]",
        "hits": [{"text": "[E]", "score": 0.5}, ("[E]", 3, None)],
        "tags": {"[E]"},
        "frozen": frozenset({"[E]"}),
        "point": Point("[E]", 1),
        "raw": b"k@l.io",
    }
    assert isinstance(result["point"], Point)
    assert data["hits"][0]["text"] == "a@b.io"  # the input is not mutated
    assert policy.redact_obj("a@b.io", stage="output") == "[E]"
    assert policy.redact_obj(7, stage="output") == 7


def test_redact_obj_refuses_cycles_but_allows_shared_values() -> None:
    policy = only(RedactionRule(name="e", detector="email"))
    shared = ["a@b.io"]
    assert policy.redact_obj({"x": shared, "y": shared}, stage="output") == {"x": ["[E]"], "y": ["[E]"]}
    loop: list[Any] = ["a@b.io"]
    loop.append(loop)
    with pytest.raises(ValueError, match="cyclic"):
        policy.redact_obj(loop, stage="output")


# --------------------------------------------------------------------------- custom detectors


def test_custom_detectors_by_name_and_directly() -> None:
    def vowels(text: str) -> list[tuple[int, int]]:
        return [(m.start(), m.end()) for m in re.finditer(r"[aeiou]+", text)]

    by_name = RedactionPolicy(
        rules=[RedactionRule(name="v", detector="vowels")], custom_detectors={"vowels": vowels}
    )
    direct = only(RedactionRule(name="v", detector=vowels))
    assert out(by_name, "rain") == out(direct, "rain") == "r[V]n"


@pytest.mark.parametrize(
    ("found", "message"),
    [
        (None, "None"),
        ([(0, 99)], "outside"),
        ([(3, 1)], "outside"),
        ([(0,)], "pair"),
        ([(0.0, 1.0)], "integer"),
    ],
)
def test_broken_custom_detector_is_an_error(found: Any, message: str) -> None:
    policy = only(RedactionRule(name="bad", detector=lambda text: found))
    with pytest.raises(RedactionConfigError, match=message):
        out(policy, "some text")


def test_custom_detector_zero_width_spans_are_ignored() -> None:
    policy = only(RedactionRule(name="z", detector=spans_of((1, 1))))
    text = "abc"
    assert out(policy, text) is text


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": "x"},
        {"name": "x", "detector": "email", "pattern": "a"},
        {"name": "x", "pattern": "("},
        {"name": "x", "pattern": ""},
        {"name": "x", "detector": ""},
        {"name": "", "detector": "email"},
        {"name": "two words", "detector": "email"},
        {"name": "x", "detector": "email", "action": "blur"},
        {"name": "x", "detector": "email", "apply_at": "read"},
        {"name": "x", "detector": "email", "unless": "admin"},
        {"name": "x", "detector": "email", "unles": ["admin"]},
    ],
)
def test_rule_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        RedactionRule(**kwargs)


def test_policy_validation() -> None:
    with pytest.raises(ValidationError, match="unknown detector"):
        RedactionPolicy(rules=[RedactionRule(name="x", detector="passport")])
    with pytest.raises(ValidationError, match="built-in"):
        RedactionPolicy(custom_detectors={"email": detect_email})
    with pytest.raises(ValidationError, match="Extra inputs"):
        RedactionPolicy(rule=[])  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        RedactionPolicy(custom_detectors={"x": "not callable"})  # type: ignore[dict-item]


def test_policy_sits_inside_a_pydantic_config() -> None:
    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid", validate_assignment=True)
        redaction: RedactionPolicy = RedactionPolicy()

    config = Config(redaction={"rules": [{"name": "emails", "detector": "email", "apply_at": "both"}]})
    assert config.redaction.redact("x@y.org", stage="ingest") == "[EMAILS]"
    assert Config().redaction.is_noop("output")
    bound = config.redaction.bind(KEY)
    assert Config(redaction=bound).redaction.has_bound_key
    assert config.model_copy(deep=True).redaction == config.redaction
    with pytest.raises(ValidationError):
        Config(redaction={"rules": [{"name": "x", "detectr": "email"}]})
    with_callable = Config(redaction=RedactionPolicy(rules=[RedactionRule(name="c", detector=detect_email)]))
    assert "detect_email" in with_callable.model_dump_json()
    assert Config.model_json_schema()["title"] == "Config"


def test_equal_policies_compare_equal() -> None:
    def make() -> RedactionPolicy:
        rules = [RedactionRule(name="a", pattern=r"\d+"), RedactionRule(name="e", detector="email")]
        return RedactionPolicy(rules=rules)

    assert make() == make()
    assert make() != make().bind(KEY)


# --------------------------------------------------------------------------- presidio


def test_presidio_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # a None entry in sys.modules makes the import fail as it does where the extra is not installed,
    # so the message is checked whether or not presidio happens to be installed here
    monkeypatch.setitem(sys.modules, "presidio_analyzer", None)
    with pytest.raises(ImportError, match=re.escape('pip install "pg-context-engine[presidio]"')):
        presidio_detectors(["PERSON"])


class FakeAnalyzer:
    """Stands in for presidio's AnalyzerEngine: finds capitalised words as PERSON, 'Paris' as LOCATION."""

    def __init__(self) -> None:
        self.calls = 0

    def analyze(self, *, text: str, entities: list[str], language: str, score_threshold: float) -> list[Any]:
        self.calls += 1
        found = []
        for m in re.finditer(r"\b[A-Z][a-z]+\b", text):
            kind = "LOCATION" if m.group() == "Paris" else "PERSON"
            score = 0.2 if m.group() == "Maybe" else 0.9
            found.append(SimpleNamespace(entity_type=kind, start=m.start(), end=m.end(), score=score))
        return found


def test_presidio_detectors_with_a_supplied_analyzer() -> None:
    analyzer = FakeAnalyzer()
    policy = RedactionPolicy(
        rules=[
            RedactionRule(name="person", detector="PERSON"),
            RedactionRule(name="place", detector="LOCATION"),
        ],
        custom_detectors=presidio_detectors(["PERSON", "LOCATION"], analyzer=analyzer),
    )
    assert out(policy, "Ana met Bruno in Paris. Maybe") == "[PERSON] met [PERSON] in [PLACE]. Maybe"
    assert analyzer.calls == 1  # one analysis shared by both entity rules
    with pytest.raises(ValueError):
        presidio_detectors([], analyzer=analyzer)
    with pytest.raises(ValueError):
        presidio_detectors("PERSON", analyzer=analyzer)


# --------------------------------------------------------------------------- pathological input


@pytest.mark.parametrize(
    "text",
    [
        "=" * 20_000,
        "x" + "api_key=a" * 2_000,
        "x" + "sk-" * 7_000,
        "a" * 20_000 + "@" * 20_000,
        "1234 " * 4_000,
        "DE89 " * 4_000,
        "AA11" + "A" * 20_000,
        "1-" * 10_000,
        "aBearer " + "Bearer " * 3_000,
    ],
    ids=[
        "equals",
        "assignments",
        "glued-sk",
        "at-signs",
        "digit-groups",
        "iban-groups",
        "alnum",
        "dashes",
        "bearer",
    ],
)
def test_detectors_stay_linear_on_pathological_input(text: str) -> None:
    # Quadratic scanning of 20k characters takes minutes; linear scanning takes milliseconds.
    policy = RedactionPolicy(rules=[RedactionRule(name=n, detector=n) for n in BUILTIN_DETECTORS])
    started = time.perf_counter()
    policy.redact(text, stage="output")
    assert time.perf_counter() - started < 5.0
