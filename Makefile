# Two commands on a fresh machine: `make demo` and `make test`.
# Both create .venv when missing and install the project (torch's CPU wheel first: a plain `torch`
# requirement would pull a multi-GB CUDA build).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.vecmem-installed
# Two Agently API lines are tested: the venv holds 4.1.4.1 (Workspace line); the RecordStore line (4.1.4.10)
# lives in a --target directory that tests/test_agently_next_line.py puts first on a child pytest's PYTHONPATH.
AGENTLY_PIN  := 4.1.4.1
AGENTLY_NEXT_VERSION := 4.1.4.10
AGENTLY_NEXT := $(VENV)/agently-$(AGENTLY_NEXT_VERSION)
NEXT_STAMP   := $(AGENTLY_NEXT)/.vecmem-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export ANONYMIZED_TELEMETRY := False

.PHONY: install agently-next chromium demo test test-full lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[local,onnx,multilingual,agently,notebooks,dev]" "agently==$(AGENTLY_PIN)"
	touch $(STAMP)

# --no-deps: the rest of 4.1.4.10's dependencies are already in the venv.
$(NEXT_STAMP): | $(PY)
	rm -rf $(AGENTLY_NEXT)
	$(PY) -m pip install -q --no-deps --target $(AGENTLY_NEXT) "agently==$(AGENTLY_NEXT_VERSION)" \
		"agently-stage>=0.3.8,<0.4" "markdown-it-py>=3" "mdurl>=0.1"
	touch $(NEXT_STAMP)

agently-next: $(NEXT_STAMP)

install: $(STAMP) $(NEXT_STAMP) chromium

# The memory browser's tests drive Debian's chromium through Playwright (never `playwright install`).
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium)

demo: install
	$(VENV)/bin/agently-vecmem demo

test: install
	$(PY) -m pytest -q -p no:cacheprovider --nbmake tests notebooks

# The full reliability run (more generated cases and trials than `make test`).
test-full: install
	VECMEM_FULL=1 $(PY) -m pytest -q -p no:cacheprovider tests

lint: install
	$(VENV)/bin/ruff check agently_vecmem tests benchmarks examples

bench: install
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .vecmem build dist *.egg-info
