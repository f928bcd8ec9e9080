# One venv for everything; `make test` and `make bench` set it up on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: setup run test bench bench-check bench-lstm lint fuzz clean

$(BIN)/activate:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test]"

setup: $(BIN)/activate

run: setup
	$(BIN)/python examples/tour.py

test: setup
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/python -m pytest

fuzz: setup
	HYPOTHESIS_PROFILE=long $(BIN)/python -m pytest tests/test_fuzz.py

bench: setup
	$(BIN)/python benchmarks/bench_gradients.py

bench-check: setup
	$(BIN)/python benchmarks/bench_gradcheck.py --markdown

bench-lstm: setup
	$(BIN)/python benchmarks/bench_lstm.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
