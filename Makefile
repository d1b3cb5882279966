# Two entry points for a fresh machine: `make demo` and `make test`.
# Both build .venv/ on first use. torch is installed (pinned, CPU build) BEFORE anything that
# depends on it; otherwise pip resolves `torch` to a multi-GB CUDA build.
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: demo test install clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tune run

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) tunepilot.db
