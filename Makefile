# Thin targets over the `course` command. `make lab` and `make test` set everything up on a
# fresh machine: the virtual environment is created and installed on first use, and again
# whenever pyproject.toml changes.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
A      ?=
# Test worker processes (pytest-xdist): one per core of the 2-core course machine. Each test
# module runs whole in one worker, so its module fixtures are built once; JOBS=0 runs in-process.
JOBS   ?= 2

.PHONY: install lab test test-fast release grade check bench train eval clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]' 2> $(VENV)/pip-warnings.log \
		|| { cat $(VENV)/pip-warnings.log; exit 1; }
	@# jupyter-events pulls rfc3987-syntax in through jsonschema's format extra. Importing it
	@# builds some twenty Earley parsers, 2-3 s in every process that imports jsonschema: each
	@# kernel, nbgrader step and `course` command. jsonschema checks the other formats without it.
	$(BIN)/python -m pip uninstall --quiet --yes rfc3987-syntax
	$(BIN)/python -c "from course_lib.tokenization import prime_tiktoken_cache as p; p()"
	@touch $(STAMP)

install: $(STAMP)                      ## create/update the environment only

lab: $(STAMP)                          ## start JupyterLab on notebooks/ and print its URL
	$(BIN)/course lab

test: $(STAMP)                         ## the whole test suite
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile

test-fast: $(STAMP)                    ## the tests not marked slow (no kernels, servers, browsers or gradings)
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile -m "not slow"

release: $(STAMP)                      ## rebuild source notebooks and notebooks/ (nbgrader)
	$(BIN)/course release

grade: $(STAMP)                        ## autograde grading/submitted/*/$(A): make grade A=00_orientation
	@test -n "$(A)" || { echo "usage: make grade A=<assignment>, e.g. A=00_orientation"; exit 2; }
	$(BIN)/course grade $(A)

check: $(STAMP)                        ## run a notebook's checks: make check NB=notebooks/00_orientation.ipynb
	@test -n "$(NB)" || { echo "usage: make check NB=notebooks/<name>.ipynb"; exit 2; }
	$(BIN)/course check $(NB)

bench: $(STAMP)                        ## every benchmark, printing ratios measured side by side
	@set -e; for script in benchmarks/bench_*.py; do echo "== $$script"; $(BIN)/python $$script; done

train: $(STAMP)                        ## reproduce the shipped course models from scratch: tinychat, then its draft
	$(BIN)/course train --threads 2
	$(BIN)/course train --config tinychat-draft --threads 2

eval: $(STAMP)                         ## the shipped model's quality on the held-out split
	$(BIN)/course eval

clean:                                 ## remove generated grading folders (keeps the environment)
	rm -rf grading/release grading/submitted grading/autograded grading/feedback grading/grades grading/gradebook.db
