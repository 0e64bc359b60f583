# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONFIG ?= config/groupkeeper.toml
PYTEST_ARGS ?=

.PHONY: install system-packages run test bench clean

install: $(STAMP) system-packages

# Re-runs only when the project's dependencies change.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,analytics]'
	touch $(STAMP)

system-packages:
	@deploy/ensure-system-packages.sh

run: install
	$(VENV)/bin/groupkeeper run --config $(CONFIG)

# pytest's "no tests collected" (exit 5) is a failure here, not a success.
test: install
	@$(PY) -m pytest $(PYTEST_ARGS); status=$$?; \
	if [ $$status -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$status

bench: install
	$(VENV)/bin/groupkeeper bench codec

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
