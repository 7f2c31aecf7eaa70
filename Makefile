# Two commands on a fresh machine: `make serve` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: serve test test-fast lint bench migrate clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

serve: $(STAMP)
	$(BIN)/foliot serve

migrate: $(STAMP)
	$(BIN)/foliot migrate

test: $(STAMP)
	$(BIN)/pytest -q

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not e2e"

lint: $(STAMP)
	$(BIN)/ruff check foliot tests bench examples
	$(BIN)/ruff format --check foliot
	$(BIN)/mypy foliot

bench: $(STAMP)
	$(BIN)/python bench/parked_runs.py --runs 2000
	$(BIN)/python bench/idle_pollers.py --pollers 200

clean:
	rm -rf $(VENV) .foliot .pytest_cache .mypy_cache .ruff_cache
