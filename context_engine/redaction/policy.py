"""``RedactionRule`` and ``RedactionPolicy``: what to hide, where, from whom, and how.

The policy is plain configuration (a pydantic model that can sit inside the engine config) plus a
pure transform over strings. Everything the transform needs is resolved once, when the policy is
built: detector names are looked up, patterns are compiled, and unknown names or broken patterns
fail construction with a ``ValidationError`` (a ``ValueError``) instead of failing later on a live
request.

The only thing that may legitimately be missing at construction time is the key for ``hash``
rules, because hosts often load the policy from config and the key from a secret store. It is
supplied with :meth:`RedactionPolicy.bind` or per call (``secret_key=``); a policy that has a
``hash`` rule and still no key when it is applied raises :class:`RedactionConfigError`, whatever
the stage, the caller or the text, so a missing key cannot hide behind a lucky input.
See the package docstring for how overlapping matches are merged.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    SecretBytes,
    SecretStr,
    WithJsonSchema,
    field_validator,
)

from context_engine.redaction._patterns import compile_rule_pattern
from context_engine.redaction.detectors import BUILTIN_DETECTORS, HASH_NORMALISERS, Detector
from context_engine.redaction.errors import RedactionConfigError

Stage = Literal["ingest", "output"]
ApplyAt = Literal["output", "ingest", "both"]
Action = Literal["mask", "hash", "remove"]
SecretKey = bytes | str | SecretStr | SecretBytes

#: Hex characters of the HMAC kept in a ``hash`` token. 64 bits keeps accidental collisions
#: between distinct values negligible for any realistic corpus, which is what makes the token
#: safe to join on; 32 bits would already collide around a hundred thousand distinct values.
HASH_HEX_CHARS = 16

_STAGES: tuple[Stage, ...] = ("ingest", "output")


def _callable_label(fn: Callable[..., Any]) -> str:
    """A readable name for a detector callable, used when a policy is dumped to JSON."""
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}.{name}"


# Callables cannot round-trip through JSON; they dump as their dotted name so that logging or
# schema-generating a config that contains one does not crash.
DetectorCallable = Annotated[
    Detector,
    PlainSerializer(_callable_label, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "description": "a callable detector (Python only)"}),
]


class RedactionSpan(NamedTuple):
    """One region a policy will replace: offsets into the original text and the winning rule."""

    start: int
    end: int
    rule: str
    action: Action


class RedactionRule(BaseModel):
    """One thing to find (a built-in or custom detector, or a regex) and what to do with it."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    #: names the mask token: ``name="emails"`` masks as ``[EMAILS]``
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    #: a built-in detector name, a key of ``custom_detectors``, or a callable
    detector: str | DetectorCallable | None = None
    #: a regex; a group named ``value`` narrows the replaced region to that group
    pattern: str | None = None
    action: Action = "mask"
    apply_at: ApplyAt = "output"
    #: callers holding any of these principals see this rule's matches unredacted
    unless: tuple[str, ...] = ()

    _regex: re.Pattern[str] | None = PrivateAttr(default=None)

    @field_validator("unless", mode="before")
    @classmethod
    def _unless_is_a_collection(cls, value: Any) -> Any:
        # A bare string would otherwise be read as a tuple of one-character principals.
        if isinstance(value, str | bytes):
            raise ValueError("unless takes a list of principals, not a single string")
        return value

    def model_post_init(self, context: Any, /) -> None:
        """Check the rule and keep its compiled pattern, so applying it never recompiles.

        Done here rather than in an ``after`` validator because pydantic runs this hook first;
        a ``ValueError`` raised here still surfaces as a ``ValidationError``.
        """
        if (self.detector is None) == (self.pattern is None):
            raise ValueError(f"rule {self.name!r}: give exactly one of detector= or pattern=")
        if isinstance(self.detector, str) and not self.detector:
            raise ValueError(f"rule {self.name!r}: detector name is empty")
        if self.pattern is not None:
            if not self.pattern:
                raise ValueError(f"rule {self.name!r}: pattern is empty")
            try:
                self._regex = compile_rule_pattern(self.pattern)
            except re.error as exc:
                raise ValueError(f"rule {self.name!r}: invalid pattern: {exc}") from None

    @property
    def token_name(self) -> str:
        """The upper-cased name that appears inside mask and hash tokens."""
        return self.name.upper()

    def covers(self, stage: Stage) -> bool:
        """Whether this rule runs at ``stage``."""
        return self.apply_at == "both" or self.apply_at == stage


@dataclass(frozen=True, slots=True)
class _Plan:
    """A rule resolved for application. Plain data, so equal policies compare equal."""

    index: int
    rule: RedactionRule
    regex: re.Pattern[str] | None
    detector: Detector | None
    detector_label: str
    normalise: Callable[[str], str] | None
    unless: frozenset[str] = field(default_factory=frozenset)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Non-empty spans this rule matches in ``text``."""
        if self.regex is not None:
            return _pattern_spans(self.regex, text)
        assert self.detector is not None
        return _checked_spans(self.detector_label, self.detector(text), len(text))


@dataclass(frozen=True, slots=True)
class _State:
    """Everything applying a policy needs, resolved once; replaced (never mutated) by ``bind``."""

    by_stage: dict[Stage, tuple[_Plan, ...]]
    key: bytes | None
    requires_key: bool


def _pattern_spans(rx: re.Pattern[str], text: str) -> list[tuple[int, int]]:
    has_value = "value" in rx.groupindex
    out: list[tuple[int, int]] = []
    for m in rx.finditer(text):
        start, end = m.span("value") if has_value else m.span()
        # start == -1: the value group did not take part in this match, so nothing is masked.
        if start >= 0 and end > start:
            out.append((start, end))
    return out


def _checked_spans(label: str, raw: Any, length: int) -> list[tuple[int, int]]:
    """Validate a detector's output; a bad span is an error, never silently skipped text."""
    if raw is None:
        raise RedactionConfigError(f"detector {label!r} returned None instead of a list of spans")
    out: list[tuple[int, int]] = []
    for item in raw:
        try:
            start, end = item
        except (TypeError, ValueError):
            raise RedactionConfigError(f"detector {label!r} returned a span that is not a pair") from None
        if not isinstance(start, int) or not isinstance(end, int):
            raise RedactionConfigError(f"detector {label!r} returned non-integer offsets")
        if not 0 <= start <= end <= length:
            raise RedactionConfigError(
                f"detector {label!r} returned span ({start}, {end}) outside a text of length {length}"
            )
        if end > start:
            out.append((start, end))
    return out


def _coerce_key(key: SecretKey | None) -> bytes | None:
    if key is None:
        return None
    if isinstance(key, SecretStr | SecretBytes):
        key = key.get_secret_value()
    if isinstance(key, str):
        key = key.encode("utf-8")
    if not isinstance(key, bytes | bytearray | memoryview):
        raise TypeError(f"secret_key must be bytes or str, not {type(key).__name__}")
    key = bytes(key)
    if not key:
        raise RedactionConfigError("secret_key is empty; hash rules need a non-empty key")
    return key


def _principal_set(principals: Sequence[str] | None) -> frozenset[str] | None:
    if principals is None:
        return None
    if isinstance(principals, str | bytes):
        # Iterating a string would exempt a caller on single characters.
        raise TypeError("principals must be a sequence of strings, not a single string")
    return frozenset(principals)


class RedactionPolicy(BaseModel):
    """An ordered list of rules plus any named custom detectors they refer to.

    ``RedactionPolicy()`` has no rules and is a guaranteed no-op: ``redact`` hands back the very
    object it was given.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    rules: tuple[RedactionRule, ...] = ()
    #: extra detectors rules can name; a name may not shadow a built-in one
    custom_detectors: dict[str, DetectorCallable] = Field(default_factory=dict)

    _state: _State = PrivateAttr(default_factory=lambda: _State({}, None, False))

    def model_post_init(self, context: Any, /) -> None:
        """Resolve every rule once and split them by stage, so applying is only matching.

        Unknown detector names fail here, at construction, not on the first request.
        """
        for name in self.custom_detectors:
            if not name:
                raise ValueError("custom_detectors: a detector name is empty")
            if name in BUILTIN_DETECTORS:
                raise ValueError(
                    f"custom_detectors: {name!r} is a built-in detector name; register yours under another"
                )
        known = sorted([*BUILTIN_DETECTORS, *self.custom_detectors])
        for rule in self.rules:
            if isinstance(rule.detector, str) and rule.detector not in known:
                raise ValueError(
                    f"rule {rule.name!r}: unknown detector {rule.detector!r}; known: {', '.join(known)}"
                )
        plans = [self._plan(i, rule) for i, rule in enumerate(self.rules)]
        by_stage = {stage: tuple(p for p in plans if p.rule.covers(stage)) for stage in _STAGES}
        self._state = _State(by_stage, None, any(rule.action == "hash" for rule in self.rules))

    def _resolved(self) -> _State:
        """The policy as resolved once (plans by stage, the bound key); read from the private slot directly.

        Not ``self._state``: pydantic's attribute hook for private names costs more
        than a whole no-op redact call should.
        """
        private = self.__pydantic_private__
        assert private is not None
        return private["_state"]

    def _plan(self, index: int, rule: RedactionRule) -> _Plan:
        regex = rule._regex
        detector: Detector | None = None
        normalise: Callable[[str], str] | None = None
        label = "pattern"
        if isinstance(rule.detector, str):
            label = rule.detector
            if rule.detector in BUILTIN_DETECTORS:
                detector = BUILTIN_DETECTORS[rule.detector]
                normalise = HASH_NORMALISERS.get(rule.detector)
            else:
                detector = self.custom_detectors[rule.detector]
        elif rule.detector is not None:
            detector = rule.detector
            label = _callable_label(detector)
        return _Plan(index, rule, regex, detector, label, normalise, frozenset(rule.unless))

    # ------------------------------------------------------------------ keys

    @property
    def requires_key(self) -> bool:
        """Whether any rule hashes, so a key must be bound or passed before the policy is applied."""
        return self._resolved().requires_key

    @property
    def has_bound_key(self) -> bool:
        """Whether :meth:`bind` has attached a key (the key itself is never exposed)."""
        return self._resolved().key is not None

    def bind(self, secret_key: SecretKey) -> RedactionPolicy:
        """A copy of this policy that hashes with ``secret_key`` unless a call passes its own."""
        key = _coerce_key(secret_key)
        if key is None:
            raise RedactionConfigError("bind() needs a key; pass bytes or a non-empty string")
        bound = self.model_copy()
        bound._state = replace(self._resolved(), key=key)
        return bound

    def check_key(self, secret_key: SecretKey | None = None) -> None:
        """Raise now, rather than on the first request, if a ``hash`` rule would have no key."""
        self._effective_key(secret_key)

    def _effective_key(self, secret_key: SecretKey | None) -> bytes | None:
        state = self._resolved()
        key = _coerce_key(secret_key) if secret_key is not None else state.key
        if key is None and state.requires_key:
            names = ", ".join(repr(r.name) for r in self.rules if r.action == "hash")
            raise RedactionConfigError(
                f"redaction rule(s) {names} use action='hash' but no key was given: "
                "bind one with policy.bind(key) or pass secret_key= to the call"
            )
        return key

    # ------------------------------------------------------------------ applying

    def _active(self, stage: Stage, principals: Sequence[str] | None) -> tuple[_Plan, ...]:
        if stage not in _STAGES:
            raise ValueError(f"stage must be 'ingest' or 'output', not {stage!r}")
        plans = self._resolved().by_stage.get(stage, ())
        held = _principal_set(principals)
        if not held or not plans:
            return plans
        return tuple(p for p in plans if not (p.unless and p.unless & held))

    def is_noop(self, stage: Stage, *, principals: Sequence[str] | None = None) -> bool:
        """True when no rule would run at ``stage`` (for these principals), so callers can skip work."""
        return not self._active(stage, principals)

    def find_spans(
        self, text: str, *, stage: Stage, principals: Sequence[str] | None = None
    ) -> list[RedactionSpan]:
        """The merged regions ``redact`` would replace, with the rule that wins each one."""
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type(text).__name__}")
        return [
            RedactionSpan(start, end, plan.rule.name, plan.rule.action)
            for start, end, plan, _ in _merged(text, self._active(stage, principals))
        ]

    def redact(
        self,
        text: str,
        *,
        stage: Stage,
        principals: Sequence[str] | None = None,
        secret_key: SecretKey | None = None,
    ) -> str:
        """Apply the rules that cover ``stage`` and do not exempt ``principals``.

        ``principals=None`` means nothing is known about the caller, so no rule is skipped.
        When nothing is replaced the input object itself is returned.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type(text).__name__}")
        key = self._effective_key(secret_key)
        plans = self._active(stage, principals)
        if not plans:
            return text
        return _apply(text, plans, key)

    def redact_obj(
        self,
        obj: Any,
        *,
        stage: Stage,
        principals: Sequence[str] | None = None,
        secret_key: SecretKey | None = None,
    ) -> Any:
        """Redact every string inside nested dicts, lists, tuples and sets; dict keys are kept.

        Containers come back as new plain ``dict``/``list``/``tuple``/``set``/``frozenset``
        objects (named tuples keep their type); anything else is returned as is, so dump models
        and dataclasses to plain data first. A container that contains itself is refused. With
        no active rule the input object itself is returned.
        """
        key = self._effective_key(secret_key)
        plans = self._active(stage, principals)
        if not plans:
            return obj
        return _walk(obj, lambda s: _apply(s, plans, key), set())


def _merged(text: str, plans: Iterable[_Plan]) -> list[tuple[int, int, _Plan, tuple[int, int]]]:
    """Overlap-merge every rule's spans: ``(region start, region end, winner, winner's span)``."""
    hits: list[tuple[int, int, _Plan]] = []
    for plan in plans:
        hits.extend((start, end, plan) for start, end in plan.spans(text))
    if not hits:
        return []
    hits.sort(key=lambda h: (h[0], -h[1], h[2].index))
    regions: list[tuple[int, int, _Plan, tuple[int, int]]] = []
    i = 0
    while i < len(hits):
        start, end, _ = hits[i]
        best = hits[i]
        j = i + 1
        # Spans that overlap the growing region join it; spans that merely touch it do not.
        while j < len(hits) and hits[j][0] < end:
            end = max(end, hits[j][1])
            if _beats(hits[j], best):
                best = hits[j]
            j += 1
        regions.append((start, end, best[2], (best[0], best[1])))
        i = j
    return regions


def _beats(a: tuple[int, int, _Plan], b: tuple[int, int, _Plan]) -> bool:
    """Winner order: the longest span, then the rule listed first, then the earliest start."""
    return (a[0] - a[1], a[2].index, a[0]) < (b[0] - b[1], b[2].index, b[0])


def _apply(text: str, plans: Sequence[_Plan], key: bytes | None) -> str:
    regions = _merged(text, plans)
    if not regions:
        return text
    out: list[str] = []
    cursor = 0
    for start, end, plan, (win_start, win_end) in regions:
        out.append(text[cursor:start])
        out.append(_replacement(plan, text[win_start:win_end], key))
        cursor = end
    out.append(text[cursor:])
    return "".join(out)


def _replacement(plan: _Plan, value: str, key: bytes | None) -> str:
    action = plan.rule.action
    if action == "remove":
        return ""
    if action == "mask":
        return f"[{plan.rule.token_name}]"
    if key is None:  # _effective_key has already refused this; keep the invariant local too
        raise RedactionConfigError(f"rule {plan.rule.name!r} hashes but no key is available")
    canonical = plan.normalise(value) if plan.normalise is not None else value
    digest = hmac.new(key, canonical.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return f"[{plan.rule.token_name}:{digest[:HASH_HEX_CHARS]}]"


def _walk(obj: Any, fn: Callable[[str], str], path: set[int]) -> Any:
    if isinstance(obj, str):
        return fn(obj)
    if not isinstance(obj, dict | list | tuple | set | frozenset):
        return obj
    marker = id(obj)
    if marker in path:
        raise ValueError("redact_obj: the value contains itself; cannot redact a cyclic structure")
    path.add(marker)
    try:
        if isinstance(obj, dict):
            return {k: _walk(v, fn, path) for k, v in obj.items()}
        items = [_walk(v, fn, path) for v in obj]
        if isinstance(obj, list):
            return items
        if isinstance(obj, tuple):
            return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
        return frozenset(items) if isinstance(obj, frozenset) else set(items)
    finally:
        path.discard(marker)
