# attnbook — two commands: `make test` and `make book` (see README.md).
# Both create .venv on first use and install everything the project needs into it.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# CPU torch wheel used when torch is absent (an unpinned torch would pull a multi-GB CUDA build)
TORCH_CPU ?= torch==2.13.0
MATHJAX_VERSION ?= 3.2.2
MATHJAX_DIR := book/_mathjax/mathjax
# nbval workers: one per core, chapters are single-threaded
JOBS ?= 2
export OMP_NUM_THREADS ?= 1
export PYDEVD_DISABLE_FILE_VALIDATION = 1

.PHONY: help venv test test-units test-chapters book clean sync-notebooks bench

help:
	@echo "make test   - set up .venv, run unit tests and execute every chapter with nbval"
	@echo "make book   - set up .venv, execute every chapter and build the HTML book (-W)"
	@echo "make sync-notebooks - regenerate the Colab .ipynb of every chapter from its .md"
	@echo "make bench  - run the benchmark scripts in bench/"

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "$(TORCH_CPU)"
	$(PY) -m pip install --quiet -e ".[book,test]"
	@touch $@

venv: $(VENV)/.installed

test: venv
	rm -rf _build/ledger
	$(PY) -m pytest -n $(JOBS) --dist loadfile -m "not ledger" --nbval-lax
	$(PY) -m pytest -m ledger --nbval-lax

test-units: venv
	$(PY) -m pytest -n $(JOBS) tests

test-chapters: venv
	$(PY) -m pytest -n $(JOBS) --dist loadfile --nbval-lax book

$(MATHJAX_DIR)/tex-chtml.js:
	$(PY) -m attnbook.build_tools fetch-mathjax --version $(MATHJAX_VERSION) --dest $(MATHJAX_DIR)

book: venv $(MATHJAX_DIR)/tex-chtml.js
	rm -rf _build/ledger
	$(VENV)/bin/jupyter-book build . -W --keep-going
	$(PY) -m attnbook.build_tools check-html _build/html
	@echo "The book is at $(CURDIR)/_build/html/index.html"

sync-notebooks: venv
	$(PY) -m attnbook.build_tools sync-notebooks

# devinterp is the reference SGLD of the copy-head benchmark; only its optimiser is used, so
# its heavy dependencies (transformers, datasets, ...) are skipped with --no-deps
bench: venv
	@$(PY) -c "import devinterp" 2>/dev/null || $(PY) -m pip install --quiet --no-deps "devinterp==2.0.1"
	@for f in bench/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf _build .pytest_cache
