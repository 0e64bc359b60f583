# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONFIG ?= config/groupkeeper.toml
PYTEST_ARGS ?=

KAFKA_LIBS := var/kafka/libs
KAFKA_STAMP := $(KAFKA_LIBS)/.installed
KAFKA ?=

.PHONY: install system-packages kafka run test conformance bench clean

install: $(STAMP) system-packages kafka go-clients

# Re-runs only when the project's dependencies change.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,analytics]'
	touch $(STAMP)

system-packages:
	@deploy/ensure-system-packages.sh

# Apache Kafka 4.4's jars (the broker, its tools, Streams, the Java client) from Maven
# Central, copied once into $(KAFKA_LIBS); the tests and `make run KAFKA=1` run offline.
kafka: $(KAFKA_STAMP)

$(KAFKA_STAMP): deploy/kafka/pom.xml | system-packages
	rm -rf $(KAFKA_LIBS)
	mvn -q -B -f deploy/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory=$(CURDIR)/$(KAFKA_LIBS)
	touch $(KAFKA_STAMP)

# The Go clients' program of the tests (tests/kafka/go: franz-go and IBM sarama), built once
# into $(GO_DIR)/bin/goclients with its modules and build cache under $(GO_DIR): the tests
# fetch nothing. They need Go 1.26; the machine's Go is used, or, where there is none, Debian's
# golang-go (ensure-system-packages.sh), which on bookworm is 1.19 (bookworm-backports is not
# configured on a fresh machine), too old for them and for Go's own toolchain switching (1.21+):
# deploy/go-clients.sh then has it download Go $(GO_TOOLCHAIN) from the Go module proxy as the
# module golang.org/toolchain, checksummed like any module, the one registry that serves it.
GO_DIR := var/go
GO_STAMP := $(GO_DIR)/.installed
GO_TOOLCHAIN ?= go1.26.8

.PHONY: go-clients
go-clients: $(GO_STAMP)

$(GO_STAMP): deploy/go-clients.sh tests/kafka/go/go.mod tests/kafka/go/go.sum $(wildcard tests/kafka/go/*.go) | system-packages
	GO_TOOLCHAIN=$(GO_TOOLCHAIN) deploy/go-clients.sh
	touch $(GO_STAMP)

# The real thing on one machine: a broker (Tansu, in memory) behind groupkeeper as its gateway,
# with an embedded ZooKeeper: clients bootstrap from 127.0.0.1:9092 as from a local Kafka.
# `make run KAFKA=1`: a one-node Apache Kafka 4.4 (KRaft, on 127.0.0.1:19092) instead of Tansu.
run: install
ifeq ($(KAFKA),)
	$(VENV)/bin/groupkeeper run --config $(CONFIG) --listeners PLAINTEXT://127.0.0.1:9092 \
		--embedded-broker 127.0.0.1:19092
else
	$(PY) deploy/kafka/kraft.py run --nodes 1 --port 19092 -- \
		$(VENV)/bin/groupkeeper run --config $(CONFIG) --listeners PLAINTEXT://127.0.0.1:9092 \
		--gateway 127.0.0.1:19092
endif

# pytest's "no tests collected" (exit 5) is a failure here, not a success. The slowest tests
# are listed at the end: `make test` must stay under 20 minutes on a 2-core machine. tests/pure
# (no I/O, no ports, no clock) runs in two processes (pytest-xdist): 4.4 min of the suite's 19
# in one, 1.9 in two; the rest, which starts real parts and waits on them, in one.
# PYTEST_ARGS: one pytest run of what they name instead.
test: install
ifeq ($(PYTEST_ARGS),)
	@$(PY) -m pytest -q -n 2 tests/pure; pure=$$?; \
	$(PY) -m pytest --durations=15 --ignore=tests/pure; rest=$$?; \
	for status in $$pure $$rest; do \
		if [ $$status -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
		if [ $$status -ne 0 ]; then exit $$status; fi; \
	done
else
	@$(PY) -m pytest --durations=15 $(PYTEST_ARGS); status=$$?; \
	if [ $$status -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$status
endif

# The client x broker matrix (tests/conformance: every client and protocol through the
# gateway in front of Kafka 4.4 and Tansu; writes docs/conformance.md from the results), and
# the Kafka modules (tests/kafka, all marked `conformance`: the clients, Kafka's tools, the Go
# clients, a cluster changing under the gateway, share groups, a coordinator's failover,
# exactly-once), and the Tansu modules marked `conformance` (clients in turn: static members'
# restarts).
conformance: install
	@GROUPKEEPER_CONFORMANCE=1 $(PY) -m pytest --durations=15 -m conformance tests/conformance tests/kafka \
		tests/tansu $(PYTEST_ARGS); status=$$?; \
	if [ $$status -eq 5 ]; then echo "make conformance: pytest collected no tests" >&2; exit 1; fi; \
	exit $$status

bench: install
	$(VENV)/bin/groupkeeper bench codec

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
