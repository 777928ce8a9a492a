"""``python -m context_engine.cli``: the console script without installing it."""

import sys

from context_engine.cli import main

sys.exit(main())
