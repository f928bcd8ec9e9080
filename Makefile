# One venv for everything; `make test` and `make bench` set it up on a fresh machine.
PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: setup run tour report-readme test docs bench bench-cpu bench-cpu-runs bench-check bench-lstm bench-networks fuzz fuzz-cpu clean

$(BIN)/activate:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test]"

setup: $(BIN)/activate

# the main job: every tg.nn op checked against PyTorch and timed (reports/coverage.*)
run: setup
	$(BIN)/tegrad report

# the same, also replacing the README's embedded coverage table
report-readme: setup
	$(BIN)/tegrad report --readme README.md

tour: setup
	$(BIN)/python examples/tour.py

test: setup
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/python -m pytest

# the docs site (docs/, mkdocs.yml) into build/site; any warning fails the build
docs: setup
	$(BIN)/mkdocs build --strict --site-dir build/site

fuzz: setup
	HYPOTHESIS_PROFILE=long $(BIN)/python -m pytest tests/test_fuzz.py

# 10,000 random programs: the compiled target against the NumPy reference (tests/differential.py)
fuzz-cpu: setup
	$(BIN)/python tests/differential.py --count 10000 --jobs 2

bench: setup
	$(BIN)/python benchmarks/bench_gradients.py

# the compiled target against torch and jax.jit (writes reports/bench_cpu.json)
bench-cpu: setup
	$(BIN)/python benchmarks/bench_cpu.py --markdown

# five runs of it, each a new process, summarized against the targets (reports/bench_cpu_runs)
bench-cpu-runs: setup
	$(BIN)/python benchmarks/bench_repeat.py --repeat 5

bench-check: setup
	$(BIN)/python benchmarks/bench_gradcheck.py --markdown

bench-lstm: setup
	$(BIN)/python benchmarks/bench_lstm.py

bench-networks: setup
	$(BIN)/python benchmarks/bench_networks.py --markdown

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
