#!/usr/bin/env python
"""Django's command line for the one-file project: ``python manage.py runserver``."""

from __future__ import annotations

import sys

import project  # noqa: F401 - configures the settings and builds the URLs
from django.core.management import execute_from_command_line

if __name__ == "__main__":
    execute_from_command_line(sys.argv)
