# hpcprof: the two commands of the README, plus helpers.
#   make demo   install into .venv, run the demo job (local executor, a rank per GPU it finds, or
#               2 CPU ranks on gloo), analyse it and print where the report is
#   make test   install into .venv (and, as root, the Debian packages of the SLURM tests), run the suite
#               (scripts/run-tests.sh: 2 workers, then the timing tests alone; TEST_WORKERS, PYTEST_ARGS)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUNS_DIR ?= runs
PYTEST_ARGS ?=

.PHONY: install demo test clean-runs

$(VENV)/.installed: pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(PY) -m hpcprof.submit --job jobs/demo-local.toml --runs-dir $(RUNS_DIR) --analyze

test: install
	scripts/install-debian-deps.sh
	scripts/run-tests.sh $(PY) $(PYTEST_ARGS)

clean-runs:
	rm -rf $(RUNS_DIR)

-include mk/slurm.mk
