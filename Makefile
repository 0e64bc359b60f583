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

# The real thing on one machine: a broker (Tansu, in memory) behind groupkeeper as its gateway,
# with an embedded ZooKeeper: clients bootstrap from 127.0.0.1:9092 as from a local Kafka.
run: install
	$(VENV)/bin/groupkeeper run --config $(CONFIG) --listeners PLAINTEXT://127.0.0.1:9092 \
		--embedded-broker 127.0.0.1:19092

# pytest's "no tests collected" (exit 5) is a failure here, not a success.
test: install
	@$(PY) -m pytest $(PYTEST_ARGS); status=$$?; \
	if [ $$status -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$status

bench: install
	$(VENV)/bin/groupkeeper bench codec

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
