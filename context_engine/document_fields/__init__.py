"""Structured extraction at ingest (opt-in) and ``query_meta`` over what it stored.

:func:`extract_document_fields` is the step the engine runs after a document is stored;
:func:`query_meta` answers "the invoice date of every invoice" from the stored fields.
"""

from context_engine.document_fields.extract import (
    HINT_TYPES,
    check_hints,
    extract_document_fields,
    extract_stored_document,
    extract_structured_data,
    hinted_schema,
)
from context_engine.document_fields.query import query_meta

__all__ = [
    "HINT_TYPES",
    "check_hints",
    "extract_document_fields",
    "extract_stored_document",
    "extract_structured_data",
    "hinted_schema",
    "query_meta",
]
