# Two commands on a fresh machine: `make demo` and `make test`.
# Both create .venv when missing and install the project (torch's CPU wheel first: a plain `torch`
# requirement would pull a multi-GB CUDA build).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.vecmem-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export ANONYMIZED_TELEMETRY := False

.PHONY: install demo test test-full lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[local,onnx,agently,notebooks,dev]"
	touch $(STAMP)

install: $(STAMP)

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
