# Two commands on a fresh machine with only python3:  `make demo`  and  `make test`.
# Both create .venv (with a Python >= 3.12 found by scripts/find_python.sh) and install
# ppl_bsvm with its dependencies; a stamp file makes later runs skip the install.

VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
PYTEST_ARGS ?= -n 2 --dist worksteal

.PHONY: demo test venv clean help

help:
	@echo "make demo   - install into .venv and run the flagship comparison (writes reports/demo/)"
	@echo "make test   - install into .venv and run the test suite"
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
	$(PY) -m pip install --quiet -e ".[test]"; \
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m benchmarks.demo

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV)
