#!/usr/bin/env python
"""Django's command line for the one-file project: ``python manage.py runserver``."""

from __future__ import annotations

import signal
import sys

import project  # noqa: F401 - configures the settings and builds the URLs
from django.core.management import execute_from_command_line

if __name__ == "__main__":
    # a plain ``kill`` stops runserver the way Ctrl-C does, so the project's exit hook still runs
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    execute_from_command_line(sys.argv)
