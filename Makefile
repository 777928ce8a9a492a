# Two entry points for a fresh machine: `make serve` and `make test`.
# Each creates .venv on first use and installs everything the project needs.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# the build hook (hatch_build.py) puts the local model's weights in context_engine/embeddings/minilm/
	$(PY) -m pip install --quiet -e ".[all,test,bench,openvino]"
	touch $(STAMP)

.PHONY: install serve test test-fast test-citus lint typecheck check-install
install: $(STAMP)

PORT ?= 8000
HOST ?= 127.0.0.1

serve: $(STAMP)
	$(VENV)/bin/context-engine serve --host $(HOST) --port $(PORT)

# pytest-xdist: one worker per core, each with its own embedded server; a module's tests stay on one
# worker (its module-scoped fixtures are set up once), and modules are handed out in collection
# order, the longest first (tests/conftest.py, LONG_MODULES). WORKERS=0 runs in one process.
WORKERS ?= auto

# The suite starts about 140 Python processes (workers, example servers, CLI runs, hosts killed
# on purpose); with PYTHONDONTWRITEBYTECODE set each one compiled the package and pytest rewrote
# every test module anew, about 35 s of the run. The test run writes its bytecode caches whatever
# the environment says (they stay in the checkout's __pycache__ directories, which git ignores).
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/pytest -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder

# the edit-test loop: no database, no server or process of a test's own (see tests/conftest.py)
test-fast: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -q -m "not database and not slow"

# The conformance suite, the ACL-leak property test and the planner, BM25 and as-of tests against a
# local Citus cluster (a coordinator and two workers on 127.0.0.1), not part of `make test`. Citus is
# built once from its source tarball (CE_CITUS_TARBALL=path/to/citus-14.0.1.tar.gz) into .cache/.
test-citus: $(STAMP)
	$(PY) benchmarks/citus/suite.py

typecheck: $(STAMP)
	$(VENV)/bin/mypy

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Build the wheel, pip-install it (no extras) into a fresh venv, ingest and search on the defaults.
check-install:
	python3 .ci/fresh_install.py
