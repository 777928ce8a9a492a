#!/usr/bin/env python
"""Django's command line for the one-file project: ``python manage.py runserver``.

Stop the server with Ctrl-C, or ``kill`` it when started with ``--noreload``: either way it closes
the engine (and stops the embedded PostgreSQL) before it exits. A ``kill`` of the autoreloader's
watcher process makes Django kill its server outright, which then cannot close anything; the
embedded PostgreSQL's reaper stops the server within a second or two of its last holder's end.
"""

from __future__ import annotations

import os
import signal
import sys

import project  # noqa: F401 - configures the settings and builds the URLs
from django.core.management import execute_from_command_line
from django.utils.autoreload import DJANGO_AUTORELOAD_ENV


def is_reload_watcher(argv: list[str]) -> bool:
    """True in runserver's outer process, which only watches files and restarts the real server."""
    return "runserver" in argv and "--noreload" not in argv and os.environ.get(DJANGO_AUTORELOAD_ENV) != "true"


if __name__ == "__main__":
    if is_reload_watcher(sys.argv):
        # Ctrl-C reaches the watcher and its server alike; the watcher would kill the server a quarter
        # second later, before it has closed the engine. So it ignores Ctrl-C and exits when the server does.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:
        # The server: Ctrl-C (ignored by a watcher that started it, so re-enabled) and a plain ``kill``
        # both end it through Python, so the project's exit hook closes the engine.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    execute_from_command_line(sys.argv)
