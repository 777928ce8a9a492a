"""Output redaction of navigation answers: every text field is redacted, ids never are.

Ids are random and carry no document text, which is why they survive a policy that masks names.
"""

from __future__ import annotations

from typing import Any

from context_engine.redaction.apply import Redactor

#: the fields of navigation answers that hold names, labels or text read from documents
TEXT_FIELDS = frozenset({"name", "target", "source", "via", "evidence", "summary", "label"})


def redact_answer(answer: Any, redactor: Redactor) -> Any:
    """A copy of ``answer`` with every text field passed through ``redactor``."""
    if isinstance(answer, dict):
        return {
            key: (
                redactor.text(value)
                if key in TEXT_FIELDS and isinstance(value, str)
                else redact_answer(value, redactor)
            )
            for key, value in answer.items()
        }
    if isinstance(answer, list):
        return [redact_answer(item, redactor) for item in answer]
    return answer
