# Two commands on a fresh machine with only python3:  `make demo`  and  `make test`.
# Both create .venv (with a Python >= 3.12 found by scripts/find_python.sh) and install
# ppl_bsvm with its dependencies; a stamp file makes later runs skip the install. pip
# byte-compiles what it installs one file after another (22 of the install's 34 s on a 2-core
# machine); compileall does the same on every core afterwards (13 s), and a failure there only
# leaves a module to be compiled when it is first imported. The packages' own test suites and
# pip, which nothing here imports, are left out: 6,074 of 9,158 files, 22 s instead of 29 s on
# the slower 2-core machine of December 2026.

VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
PYTEST_ARGS ?= -n 2 --dist worksteal

.PHONY: demo test notebooks browser-check venv clean help

help:
	@echo "make demo   - install into .venv and run the flagship comparison (writes reports/demo/)"
	@echo "make test   - install into .venv and run the test suite"
	@echo "make notebooks     - execute every notebook in notebooks/ and store its outputs"
	@echo "make browser-check - make notebooks, then render them to HTML and screenshot them"
	@echo "                     with headless Chromium (build/browser_check/)"
	@echo "make clean  - remove .venv"

venv: $(STAMP)

$(STAMP): pyproject.toml scripts/find_python.sh
	@set -e; \
	if [ ! -x $(PY) ]; then \
	    base=$$(sh scripts/find_python.sh); \
	    echo "creating $(VENV) with $$base"; \
	    "$$base" -m venv $(VENV); \
	fi; \
	$(PY) -m pip install --quiet --upgrade pip; \
	$(PY) -m pip install --quiet --no-compile -e ".[test]"; \
	$(PY) -m compileall -q -j 0 -x '/tests?/|/site-packages/pip/' \
	    "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null || true; \
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m benchmarks.demo

# The suite starts about 30 new Python processes (the README's, the notebooks' kernels, the
# cache and program-store probes, dask's and joblib's workers); each compiled ppl_bsvm's
# modules again where PYTHONDONTWRITEBYTECODE is set (0.3 s a process), so they are
# byte-compiled here first (under a second; 0.2 s when nothing changed; where the checkout
# cannot be written, the modules are compiled as they are imported, as before).
test: $(STAMP)
	@$(PY) -m compileall -q -j 0 -x '/test_[^/]*\.py$$' ppl_bsvm benchmarks scripts tests \
	    > /dev/null 2>&1 || true
	$(PY) -m pytest $(PYTEST_ARGS)

# Executes each notebook at its full size in a fresh kernel of this venv and writes it back
# with its outputs (seeds fixed, so a second run stores the same numbers).
notebooks: $(STAMP)
	$(PY) -m scripts.notebooks

# What a reader will see: the stored notebooks as HTML, photographed by headless Chromium.
browser-check: notebooks
	$(PY) -c "import nbconvert" 2>/dev/null || $(PY) -m pip install --quiet -e ".[notebooks]"
	$(PY) -m scripts.browser_check

clean:
	rm -rf $(VENV)
