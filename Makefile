# One venv for everything; `make test` and `make run` set it up on a fresh machine, with the
# tested versions of constraints.txt (reinstalled when it or pyproject.toml changes).
PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
STAMP = $(VENV)/.installed

.PHONY: setup wheel-check run tour test test-cuda docs bench bench-cpu bench-cpu-runs bench-check bench-lstm bench-networks bench-cuda fuzz fuzz-cpu clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e ".[test,docs]"
	touch $(STAMP)

setup: $(STAMP)

# the main job: every tg.nn op checked against PyTorch and timed (build/report/coverage.*)
run: setup
	$(BIN)/tegrad report

tour: setup
	$(BIN)/python examples/tour.py

test: setup
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/python -m pytest

# the cuda target alone: Triton's interpreter where there is no GPU (tests/conftest.py)
test-cuda: setup
	$(BIN)/python -m pytest tests/test_cuda.py

# on a GPU machine: versions, the cuda tests on the device and the GPU benchmark (build/gpu)
bench-cuda: setup
	PY=$(abspath $(BIN))/python bash benchmarks/gpu_check.sh

# the docs site (docs/, mkdocs.yml) into build/site; any warning fails the build
docs: setup
	$(BIN)/mkdocs build --strict --site-dir build/site

fuzz: setup
	HYPOTHESIS_PROFILE=long $(BIN)/python -m pytest tests/test_fuzz.py tests/test_cpu.py -k "fuzz or random_programs"

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

# the wheel, installed in a new venv outside the repo: tegrad --help and the README's first example
wheel-check:
	PY=$(PY) .ci/wheel_check

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
