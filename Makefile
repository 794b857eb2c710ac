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

.PHONY: chromium pdf test-browser
.PHONY: help venv lint format test test-units test-chapters test-seeds test-numeric-paths book clean sync-notebooks bench duplicates

help:
	@echo "make test   - set up .venv, lint, run unit tests and execute every chapter with nbval"
	@echo "make test-seeds - execute every chapter under each seed of SEEDS (default: 1 2)"
	@echo "make test-numeric-paths - after make test: every chapter under MKL's other code paths"
	@echo "make lint   - ruff check + format check of src, tests, bench and the chapters' code"
	@echo "make format - apply ruff's fixes and formatting (chapters through jupytext)"
	@echo "make duplicates - repeated code in src/ and in the chapters' code (the duplicates command)"
	@echo "make book   - set up .venv, execute every chapter and build the HTML book (-W)"
	@echo "make sync-notebooks - regenerate the Colab .ipynb of every chapter from its .md"
	@echo "make bench  - run the benchmark scripts in bench/"
	@echo "make pdf    - after make book: the book as one PDF, with and without solutions"
	@echo "make test-browser - after make book: open every page in Chromium and check it"

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "$(TORCH_CPU)"
	$(PY) -m pip install --quiet -e ".[book,test]"
	@touch $@

venv: $(VENV)/.installed

# the chapters' code is linted through jupytext (a temporary .py per chapter, chapters untouched)
CHAPTERS = $(shell find book -name '*.md' -not -path '*/_*' | xargs grep -l '^kernelspec:')
RUFF_PATHS = src tests bench tools conftest.py
SEEDS ?= 1 2

lint: venv
	$(VENV)/bin/ruff check $(RUFF_PATHS)
	$(VENV)/bin/ruff format --check $(RUFF_PATHS)
	$(PY) tools/lint_chapters.py $(CHAPTERS)

format: venv
	$(VENV)/bin/ruff check --fix --quiet $(RUFF_PATHS) || true
	$(VENV)/bin/ruff format --quiet $(RUFF_PATHS)
	$(PY) tools/lint_chapters.py --fix $(CHAPTERS)
	$(MAKE) sync-notebooks

# repeated code: the package, then the chapters' code exported line for line (tools/chapter_code.py)
duplicates:
	@command -v duplicates >/dev/null || { echo "the duplicates command is not installed"; exit 0; }; \
	  printf "src: "; duplicates --repo src --most 40; \
	  $(PYTHON) tools/chapter_code.py --duplicates --most 40

test: venv lint
	rm -rf _build/ledger
	$(PY) -m pytest -n $(JOBS) --dist loadfile -m "not ledger" --nbval-lax --durations=15
	$(PY) -m pytest -m ledger --nbval-lax

test-units: venv
	$(PY) -m pytest -n $(JOBS) tests

# every chapter under other seeds: each claim must hold for any seed (records kept apart)
test-seeds: venv
	@for s in $(SEEDS); do \
	  echo "== chapters under ATTNBOOK_SEED=$$s"; \
	  rm -rf _build/ledger-seed-$$s; \
	  ATTNBOOK_SEED=$$s ATTNBOOK_LEDGER_DIR="$(CURDIR)/_build/ledger-seed-$$s" \
	    $(PY) -m pytest -n $(JOBS) --dist loadfile -m "not ledger" --nbval-lax book || exit 1; \
	done

# every chapter under MKL's other numeric paths (MKL_CBWR=COMPATIBLE; MKL_ENABLE_INSTRUCTIONS=AVX2
# where the CPU has AVX-512), each with its own ledger (_build/ledger-path-<name>): every claim
# must pass and move by at most a tenth of its slack from make test's ledger (_build/ledger;
# the default path is executed again when that ledger is missing or stale)
PATH_CHAPTERS ?=
test-numeric-paths: venv
	$(PY) tools/numeric_paths.py --jobs $(JOBS) --baseline _build/ledger $(PATH_CHAPTERS)

test-chapters: venv
	$(PY) -m pytest -n $(JOBS) --dist loadfile --nbval-lax book

$(MATHJAX_DIR)/tex-chtml.js:
	$(PY) tools/build_tools.py fetch-mathjax --version $(MATHJAX_VERSION) --dest $(MATHJAX_DIR)

book: venv $(MATHJAX_DIR)/tex-chtml.js
	rm -rf _build/ledger
	$(VENV)/bin/jupyter-book build . -W --keep-going
	$(PY) tools/build_tools.py check-html _build/html
	@echo "The book is at $(CURDIR)/_build/html/index.html"

# the Colab notebooks (book/<part>/<chapter>.ipynb), generated from the MyST chapters
sync-notebooks: venv
	$(PY) -m tools.colab sync

# the student notebooks (notebooks/student/<part>/<chapter>.ipynb): the Colab notebooks with the
# solutions removed and each coding exercise a stub ending in its checker (sync-notebooks
# writes them too; this target rewrites them from the current Colab notebooks)
.PHONY: student
student: venv
	$(PY) -m tools.colab student

# every Colab notebook run as Colab would: a fresh venv, the notebook's own install cell
# (ATTNBOOK_INSTALL=git+file://<this checkout>@HEAD), the data excerpts from a loopback server
.PHONY: test-colab data-excerpt
test-colab: venv
	$(PY) -m tools.colab_test --jobs $(JOBS)

# the data excerpts a publisher uploads to the release (from ATTNBOOK_DATA_DIR or ../shared/data)
EXCERPT_DIR ?= _build/data-excerpt
data-excerpt: venv
	$(PY) -m tools.colab excerpts $(EXCERPT_DIR)

# devinterp is the reference SGLD of the copy-head benchmark; only its optimiser is used, so
# its heavy dependencies (transformers, datasets, ...) are skipped with --no-deps
bench: venv
	@$(PY) -c "import devinterp" 2>/dev/null || $(PY) -m pip install --quiet --no-deps "devinterp==2.0.1"
	@for f in bench/*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf _build .pytest_cache

# ---- printable book and browser test (run after `make book`; README: "A printable book") ----
# Both drive the system Chromium through Playwright (Playwright's own browser download is not
# needed); `make chromium` installs the Debian package when it is absent.
CHROMIUM ?= /usr/bin/chromium
HTML_DIR ?= _build/html

chromium:
	@test -x $(CHROMIUM) || { \
	  echo "installing the system Chromium (apt-get install chromium)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium; }

$(VENV)/.installed-browser: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[browser]"
	@touch $@

$(HTML_DIR)/search.html:
	@echo "no built book in $(HTML_DIR): run make book first"; exit 1

# the whole book (solutions shown) and the student edition (solutions removed)
pdf: chromium $(VENV)/.installed-browser $(HTML_DIR)/search.html
	$(PY) tools/book_pdf.py $(HTML_DIR) --chromium $(CHROMIUM) --out _build/pdf/attnbook.pdf
	$(PY) tools/book_pdf.py $(HTML_DIR) --chromium $(CHROMIUM) --no-solutions --out _build/pdf/attnbook-student.pdf

# every page of the built book in Chromium: console, requests, math, images, dropdowns, search;
# screenshots and report.json under _build/screens
test-browser: chromium $(VENV)/.installed-browser $(HTML_DIR)/search.html
	$(PY) tools/browser_check.py $(HTML_DIR) --chromium $(CHROMIUM) --screens _build/screens
