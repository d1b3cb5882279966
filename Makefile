# Two entry points for a fresh machine: `make demo` and `make test`.
# Both build .venv/ on first use. torch is installed (pinned, CPU build) BEFORE anything that
# depends on it; otherwise pip resolves `torch` to a multi-GB CUDA build.
# The [local] extra (the embedded LLM) builds llama-cpp-python from source: about 11 minutes on
# 2 cores the first time, seconds afterwards (pip's wheel cache). GGML_NATIVE=OFF: a build for
# the build machine's own CPU crashed with SIGILL on a virtual machine here.
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: demo test test-fast install bench-env clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PY) -m pip install -q -e ".[test,local]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tune run

test: $(STAMP)
	$(PY) -m pytest -q

# While working: the suite without the tests marked slow (real training, subprocesses).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

# The benchmarks' peers (bench/engine.py): the [bench] extra, then HEBO without its stale pins.
bench-env: $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) -m pip install -q --no-deps "HEBO>=0.3.6"

clean:
	rm -rf $(VENV) tunepilot.db tunepilot-runs
