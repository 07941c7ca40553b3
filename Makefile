# Two commands do all setup on a fresh machine with Python 3 and make:
#   make demo   - train from a local S3 server and compare with stock Keras on local disk
#   make test   - lint and run the whole test suite
# and `make bench` runs the full benchmark (about 10 minutes; see bench/run.py).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 > /dev/null
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m remote_keras.demo

lint: $(STAMP)
	$(BIN)/ruff check remote_keras tests bench
	$(BIN)/ruff format --check remote_keras tests bench

bench: $(STAMP)
	$(BIN)/python bench/run.py

test: lint
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
