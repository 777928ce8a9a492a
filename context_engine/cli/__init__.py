"""``context-engine``: serve, migrate, ingest and inspect from the command line.

The top of the package: a command may import the engine and, for ``serve``, an adapter; nothing
below imports this package. :func:`main` is the console script; each subcommand is a module here.
"""

from context_engine.cli.commands import main

__all__ = ["main"]
