"""Intake caps answer 413 with the knob, the limit and the actual figure through every adapter."""

from __future__ import annotations

import pytest

from context_engine import TRUSTED, ContextEngine
from tests.conftest import make_config
from tests.test_conformance import CLIENTS, fresh_database, multipart


@pytest.mark.parametrize("adapter", sorted(CLIENTS))
def test_row_cap_is_413_through_every_adapter(adapter: str, pg_base_url: str) -> None:
    rows = "id,value\n" + "".join(f"{i},v{i}\n" for i in range(6))
    body, content_type = multipart({"source_id": "sheets"}, {"file": ("rows.csv", rows.encode(), "text/csv")})
    with fresh_database(pg_base_url) as url:
        engine = ContextEngine(make_config(url, ingest={"max_rows": 5}))
        with CLIENTS[adapter](engine, lambda request: True, lambda request: TRUSTED) as send:
            refused = send("POST", "/context/documents", body, {"Content-Type": content_type})
            stats = send("GET", "/context/stats", None, {})
    assert refused.status == 413
    error = refused.body["error"]
    assert error["code"] == "too_large"
    assert "ingest.max_rows" in error["message"] and "5" in error["message"] and "6" in error["message"]
    assert stats.body["documents"] == 0  # refused, never trimmed: nothing was written
