# Two commands do all setup on a fresh machine with Python 3 and make:
#   make demo   - train from a local S3 server and compare with stock Keras on local disk
#   make test   - lint, run the whole test suite, then `make test-oldest`,
#                 `make test-keras2`, `make test-nightly` and `make test-notf` (what CI runs)
# and:
#   make test-fast   - lint and every test except `slow` ones and the `network` suites that
#                      download from the package index (about a minute on an idle 2-core
#                      machine, two when it is loaded)
#   make test-oldest - the parity, concurrency, generator and sharding tests on the oldest
#                      supported Keras/TensorFlow pair (.ci/constraints-oldest.txt), in
#                      .venv-oldest (created on first use, reused while the pins are unchanged)
#   make test-keras2 - the Keras 2 tests (tests/keras2) on TensorFlow 2.15's Keras 2.15, in
#                      .venv-keras2 (.ci/constraints-keras2.txt; created on first use, in the
#                      background while `make test` runs the main suite), and on tf_keras with
#                      TF_USE_LEGACY_KERAS=1 in .venv
#   make test-nightly - the tests of what depends on Keras's call order (resume, reads per
#                      epoch, sharding) on the dated keras-nightly build .ci/keras-nightly.txt
#                      names, in .venv-nightly (created on first use)
#   make test-notf   - the JAX and PyTorch tests where TensorFlow is not installed (it is an
#                      extra), in .venv-notf (`.[s3,grain,test]`, JAX and PyTorch; created on
#                      first use, in the background while `make test` runs the main suite)
#   make docs        - the documentation site (API reference from the docstrings) into site/
#   make bench       - the full benchmark (about 10 minutes; see bench/run.py)
#   make bench-scale - start-up, requests and memory at 100k and 300k objects (bench/scale.py;
#                      about 20 minutes; --smoke: 5k objects in under a minute);
#                      `make bench-scale ARGS=--full`: the user's journey at full size, 400k
#                      images in lakeFS and 1M objects on S3 (bench/journey.py; about an hour)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Worker processes of the suite (pytest-xdist), a test file each at a time: much of a test's time
# is spent waiting (on servers, subprocesses, retries), so two workers use both cores.
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadfile
# Run on the oldest pair too (the two-JAX-process test skips there, saying why).
OLDEST_TESTS := tests/test_api.py tests/test_parity.py tests/test_concurrency.py \
	tests/test_keras_preprocessing_suite.py tests/test_sharding.py \
	tests/keras_lines tests/test_resume.py tests/test_resume_sigkill.py \
	tests/test_resume_sweep.py tests/test_image_dataset.py \
	tests/test_image_dataset_resume.py

# On Keras's next release (the keras-nightly build .ci/keras-nightly.txt names): the tests of
# what depends on Keras's call order: the batch order rule, resume at every step and epoch
# boundary, reads per epoch and look-ahead, sharding (two JAX processes), dataset resume.
NIGHTLY_TESTS := tests/keras_lines tests/test_resume.py tests/test_resume_sigkill.py \
	tests/test_resume_sweep.py tests/test_fit_reads.py \
	tests/test_sharding.py tests/test_image_dataset_resume.py tests/test_concurrency.py

# Without TensorFlow (an extra), in .venv-notf: on Keras 3's JAX backend, then PyTorch's,
# flow_from_* (API, parity with stock Keras, S3), format="grain", the core without Keras and
# the errors naming the `tensorflow` extra; once, the tests that start each backend themselves
# (fit with BackupAndRestore, predict, evaluate, a SIGKILL and resume).
NOTF_TESTS := tests/test_without_tensorflow.py tests/test_missing_extras.py tests/test_api.py \
	tests/test_parity.py tests/test_s3.py tests/test_image_dataset_grain.py \
	tests/test_keras_free_core.py
NOTF_ONCE_TESTS := tests/test_backends.py tests/test_backend_epochs.py tests/test_resume_sigkill.py

# The Keras 2 selection: parity, fit reads, faults, lakeFS, sharding, input stall and resume,
# all on TensorFlow 2.15; on tf_keras (TF_USE_LEGACY_KERAS=1) a shorter one, for CI's time:
# parity, fit reading once per epoch, the enqueuer's epoch ends, a corrupt and a truncated
# image, presigned lakeFS reads and resume.
KERAS2_TESTS := tests/keras2 tests/keras_lines/test_lines.py tests/keras_lines/test_keras2.py tests/test_backup_record.py \
	tests/keras_lines/test_private_homes.py
KERAS2_LEGACY_TESTS := tests/keras2/test_parity.py tests/keras2/test_image_dataset.py \
	tests/keras2/test_fit.py::test_fit_reads_each_image_once_per_epoch_and_trains_each_epochs_batches \
	tests/keras2/test_fit.py::test_an_enqueuers_epoch_end_and_fits_end_one_epoch_and_its_reads_ahead_are_kept \
	tests/keras2/test_faults.py::test_a_corrupt_image_ends_fit_in_its_epoch_naming_the_url \
	tests/keras2/test_faults.py::test_a_truncated_jpeg_at_its_own_size_is_named \
	tests/keras2/test_faults.py::test_errors_reach_fit_evaluate_and_predict_as_the_guide_says \
	tests/keras2/test_lakefs.py::test_presigned_pinned_reads_equal_stock_and_go_to_the_store \
	tests/keras2/test_resume.py tests/keras2/test_resume_sigkill.py

.PHONY: install demo sandbox test test-fast test-oldest test-keras2 test-nightly test-notf lint docs bench bench-scale clean \
	azurite

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 > /dev/null
	touch $(STAMP)

install: $(STAMP)

# Azurite (the Azure Storage emulator the Azure tests start) from the npm registry, into
# .venv/azurite; without npm the Azure tests skip locally, saying how to install it.
AZURITE_VERSION := 3.35.0# 3.35 runs on Node.js 18+ (Debian's); later ones ask for Node.js 22
AZURITE := $(VENV)/azurite/node_modules/.bin/azurite-blob
$(AZURITE): | $(STAMP)
	@if command -v npm > /dev/null; then \
	  npm install --prefix $(VENV)/azurite --no-audit --no-fund --loglevel=error \
	    azurite@$(AZURITE_VERSION); \
	else echo "npm not found: the Azure tests will skip (install Node.js and npm)"; fi

azurite: $(AZURITE)

demo: $(STAMP)
	$(BIN)/python -m remote_keras.demo

# The S3 server and lakeFS stand-in with the docs' sample data, until Ctrl-C; prints the
# environment variables that point the examples at them.
sandbox: $(STAMP)
	$(BIN)/python -m remote_keras.testing.sandbox

lint: $(STAMP)
	$(BIN)/ruff check remote_keras tests bench docs/hooks.py
	$(BIN)/ruff format --check remote_keras tests bench docs/hooks.py
	$(BIN)/mypy
	$(BIN)/lint-imports

docs: $(STAMP)
	$(BIN)/mkdocs build --strict -d site

bench: $(STAMP)
	$(BIN)/python bench/run.py

bench-scale: $(STAMP)
	$(BIN)/python bench/scale.py $(ARGS)

# `make lint` in the background (LINT_START), its output shown and its status returned once
# the tests have passed (LINT_WAIT, at most 15 minutes).
LINT_START = @rm -f .lint.rc; ($(MAKE) --no-print-directory lint > .lint.log 2>&1; echo $$? > .lint.rc) &
LINT_WAIT = @for _ in $$(seq 900); do [ -s .lint.rc ] && break; sleep 1; done; \
	cat .lint.log; exit "$$(cat .lint.rc 2>/dev/null || echo 1)"

# The oldest-pair, Keras 2, nightly and no-TensorFlow venvs are created (or checked), and the
# lint runs, in the background while the main suite runs; the lint's output is shown, and its failure fails
# the target, once the suite has passed.
test: $(STAMP) azurite
	@PYTHON=$(PYTHON) bash .ci/test-oldest --prepare > .venv-oldest.prepare.log 2>&1 &
	@PYTHON=$(PYTHON) bash .ci/test-keras2 --prepare > .venv-keras2.prepare.log 2>&1 &
	@PYTHON=$(PYTHON) bash .ci/test-nightly --prepare > .venv-nightly.prepare.log 2>&1 &
	@PYTHON=$(PYTHON) bash .ci/test-notf --prepare > .venv-notf.prepare.log 2>&1 &
	$(LINT_START)
	RK_REQUIRE_TORCH=$${CI:-} $(BIN)/python -m pytest $(XDIST)
	$(LINT_WAIT)
	$(MAKE) --no-print-directory test-oldest
	$(MAKE) --no-print-directory test-keras2
	$(MAKE) --no-print-directory test-nightly
	$(MAKE) --no-print-directory test-notf

test-fast: $(STAMP)
	$(LINT_START)
	$(BIN)/python -m pytest $(XDIST) -m "not slow and not network"
	$(LINT_WAIT)

test-oldest:
	PYTHON=$(PYTHON) bash .ci/test-oldest $(XDIST) $(OLDEST_TESTS)

test-nightly:
	PYTHON=$(PYTHON) bash .ci/test-nightly $(XDIST) $(NIGHTLY_TESTS)

test-notf:
	PYTHON=$(PYTHON) NOTF_ONCE_TESTS="$(NOTF_ONCE_TESTS)" bash .ci/test-notf $(XDIST) $(NOTF_TESTS)

test-keras2: $(STAMP)
	PYTHON=$(PYTHON) KERAS2_LEGACY_ARGS="$(XDIST) $(KERAS2_LEGACY_TESTS)" bash .ci/test-keras2 $(XDIST) $(KERAS2_TESTS)

clean:
	rm -rf .lint.log .lint.rc $(VENV) .venv-oldest .venv-oldest.lock .venv-oldest.prepare.log .venv-keras2 .venv-keras2.lock .venv-keras2.prepare.log .venv-notf .venv-notf.lock .venv-notf.prepare.log .pytest_cache .ruff_cache .mypy_cache site
