# Two commands on a fresh machine: `make serve` and `make test`.
# `serve` and `migrate` install the runtime only (the engine and the client with its CLI);
# `test`, `lint` and `bench` add the development extras (pytest, mypy, boto3, selenium, ...).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.runtime
DEV := $(VENV)/.dev

.PHONY: serve test test-fast lint bench migrate clean

$(RUNTIME): pyproject.toml clients/python/pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e './clients/python[cli]' -e .
	touch $(RUNTIME)

$(DEV): $(RUNTIME)
	$(BIN)/pip install --quiet -e './clients/python[cli]' -e '.[dev]'
	touch $(DEV)

serve: $(RUNTIME)
	$(BIN)/foliot serve

migrate: $(RUNTIME)
	$(BIN)/foliot migrate

test: $(DEV)
	$(BIN)/pytest -q -n 4

test-fast: $(DEV)
	$(BIN)/pytest -q -n 4 -m "not e2e"

lint: $(DEV)
	$(BIN)/ruff check foliot tests bench examples clients/python
	$(BIN)/ruff format --check foliot clients/python
	$(BIN)/mypy foliot clients/python/foliot_client
	$(BIN)/lint-imports --no-cache

# Quick versions of every benchmark (bench/README.md); figures only, nothing asserted.
# wrk is installed when missing (root); without it the scripts use their Python client.
bench: $(DEV)
	command -v wrk >/dev/null || apt-get install -y wrk >/dev/null 2>&1 || echo "no wrk: Python client"
	-$(BIN)/python bench/start_rate.py --quick
	-$(BIN)/python bench/signal_latency.py --quick
	-$(BIN)/python bench/timer_storm.py --quick
	-$(BIN)/python bench/actor_memory.py --quick
	-$(BIN)/python bench/million.py --quick
	-$(BIN)/python bench/console_queries.py --quick
	-$(BIN)/python bench/swf_queries.py --quick
	-$(BIN)/python bench/map_fanout.py --quick
	-$(BIN)/python bench/swf_throughput.py --quick
	-$(BIN)/python bench/restart.py --quick
	-$(BIN)/python bench/dbos_peer.py --quick
	-$(BIN)/python bench/idle_pollers.py --pollers 200 --idle 3
	-$(BIN)/python bench/cluster.py --quick
	-$(BIN)/python bench/noisy_neighbour.py --quick

clean:
	rm -rf $(VENV) .foliot .pytest_cache .mypy_cache .ruff_cache
