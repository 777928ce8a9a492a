"""Progress for the command line: a bar redrawn in place on a terminal, one plain line per event elsewhere.

A redrawn bar written to a log file or a pipe is one endless line of carriage returns, so the
output stream decides: a terminal gets the bar, anything else gets lines it can read later.
"""

from __future__ import annotations

import shutil
from typing import TextIO

from context_engine.hooks import ProgressEvent


class ProgressDisplay:
    """Shows how far a run of ``total`` files is, and how far the current file is inside itself."""

    def __init__(self, stream: TextIO, total: int, *, interactive: bool | None = None):
        self.stream = stream
        self.total = total
        self.interactive = stream.isatty() if interactive is None else interactive
        self.index = 0
        self.label = ""
        self._drawn = False
        self._last_line = ""

    def start_file(self, index: int, label: str) -> None:
        """File ``index`` (0-based) of the run begins."""
        self.index, self.label = index, label
        self._show(0.0, "")

    def on_progress(self, event: ProgressEvent) -> None:
        """The engine's ``on_progress`` hook: extraction, chunking and each embedded batch of the file."""
        detail = event.detail
        if event.stage == "embed" and event.state in ("progress", "done"):
            done, total = int(detail.get("done", 0)), int(detail.get("total", 0))
            self._show(done / total if total else 1.0, f"embedded {done}/{total} chunks")
        elif event.stage == "chunk" and event.state == "done":
            self._show(0.0, f"{detail.get('chunks', 0)} chunks")
        elif event.stage == "extract" and event.state == "started":
            self._show(0.0, "reading")

    def finish_file(self, status: str) -> None:
        """The current file ended with ``status`` (completed, skipped, failed)."""
        self._show(1.0, status)

    def stage(self, label: str, done: int, total: int) -> None:
        """A run counted in steps rather than files (``eval``'s stages); plain output every tenth."""
        if self.interactive:
            fraction = done / total if total else 1.0
            self._write_bar(fraction, f"{label} {done}/{total}")
        elif done == total or done % max(1, total // 10) == 0:
            self.stream.write(f"{label}: {done}/{total}\n")
            self.stream.flush()

    def close(self) -> None:
        """End the bar's line (a terminal's cursor is left at its end)."""
        if self.interactive and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
        self._drawn = False

    def _show(self, within: float, what: str) -> None:
        position = f"{min(self.index + 1, self.total)}/{self.total} files"
        text = f"{self.label}: {what}" if what else self.label
        if not self.interactive:
            line = f"[{position}] {text}\n"
            # the start of a file is told by its first event; batches finishing together repeat a count
            if what and line != self._last_line:
                self.stream.write(line)
                self.stream.flush()
                self._last_line = line
            return
        self._write_bar((self.index + within) / self.total if self.total else 1.0, f"{position} {text}")

    def _write_bar(self, fraction: float, text: str) -> None:
        width = 30
        filled = int(width * min(max(fraction, 0.0), 1.0))
        line = f"[{'#' * filled}{'.' * (width - filled)}] {text}"
        columns = shutil.get_terminal_size((100, 20)).columns
        self.stream.write("\r" + line[: columns - 1].ljust(columns - 1))
        self.stream.flush()
        self._drawn = True
