"""The embedded server runs with its own settings: spent write-ahead log is deleted, not kept for reuse."""

from __future__ import annotations

from pathlib import Path

import psycopg

from context_engine.storage import embedded
from tests.waiting import until


def _setting(url: str, name: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
    assert row is not None
    return str(row[0])


def test_the_running_server_has_the_settings(pg_base_url: str) -> None:
    # the reload that applies them is asynchronous
    until(lambda: _setting(pg_base_url, "wal_recycle") == "off", "the reload applying the settings")
    for name, value in embedded.SERVER_SETTINGS.items():
        assert _setting(pg_base_url, name) == value


def test_a_checkpoint_deletes_the_segments_it_no_longer_needs(pg_base_url: str) -> None:
    """Six segments' worth of switches, then checkpoints: PostgreSQL's defaults would keep up to
    80 MB (five segments) of them renamed for reuse; the embedded server keeps what recovery needs."""
    with psycopg.connect(pg_base_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS wal_probe (n int)")
        for n in range(6):
            conn.execute("INSERT INTO wal_probe VALUES (%s)", (n,))
            conn.execute("SELECT pg_switch_wal()")
        conn.execute("CHECKPOINT")
        conn.execute("CHECKPOINT")
        row = conn.execute("SELECT count(*) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'").fetchone()
        conn.execute("DROP TABLE wal_probe")
    assert row is not None and row[0] <= 3


def test_settings_are_written_once_and_included_once(tmp_path: Path) -> None:
    conf = tmp_path / "postgresql.conf"
    conf.write_text("shared_buffers = 128MB")  # no trailing newline: the include still gets a line of its own
    assert embedded.apply_settings(tmp_path) is True
    assert embedded.apply_settings(tmp_path) is False
    lines = conf.read_text().splitlines()
    assert lines == ["shared_buffers = 128MB", f"include_if_exists = '{embedded.SETTINGS_FILE}'"]
    written = (tmp_path / embedded.SETTINGS_FILE).read_text()
    assert written == "".join(f"{k} = '{v}'\n" for k, v in embedded.SERVER_SETTINGS.items())
