# Two entry points for a fresh machine: `make serve` and `make test`.
# Each creates .venv on first use and installs everything the project needs.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# the build hook (hatch_build.py) puts the local model's weights in context_engine/embeddings/minilm/
	$(PY) -m pip install --quiet -e ".[all,test,bench]"
	touch $(STAMP)

.PHONY: install serve test lint check-install
install: $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/context-engine serve

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Build the wheel, pip-install it (no extras) into a fresh venv, ingest and search on the defaults.
check-install:
	python3 .ci/fresh_install.py
