"""`groupkeeper bench abuse --probes wrong-password-storm` against a running coordinator, as
an operator runs it: told where its SASL listener is and as whom to log in (environment
variables), the storm runs beside correct logins and holds; not told, it is skipped with
what to set. (Against a coordinator the bench starts, tests/bench/test_bench_abuse.py runs it.)"""

from __future__ import annotations

import pytest

from coordinator.store.zkserver import free_port
from tests.support.coordinator_process import CoordinatorProcess
from tests.bench.test_bench_abuse import bench, by_probe

PASSWORD = "storm-secret"


@pytest.fixture
def sasl_coordinator(zookeeper, tmp_path):
    port = free_port()
    process = CoordinatorProcess(zookeeper, tmp_path, listeners=(f"SASL_PLAINTEXT://127.0.0.1:{port}",),
                                 sasl_enabled_mechanisms=["SCRAM-SHA-512"])
    secret = tmp_path / "storm.password"
    secret.write_text(PASSWORD + "\n")
    process.cli("users", "add", "storm", "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret))
    process.start()
    try:
        yield process, port, secret
    finally:
        assert process.stop() == 0


def test_the_storm_probes_a_deployments_sasl_listener_when_told_where(sasl_coordinator, monkeypatch):
    process, port, secret = sasl_coordinator
    code, result = bench("--bootstrap", process.bootstrap, "--probes", "wrong-password-storm")
    [row] = result["probes"]
    assert code == 0 and row["verdict"] == "skipped" and "GROUPKEEPER_ABUSE_SASL" in row["skipped"]
    monkeypatch.setenv("GROUPKEEPER_ABUSE_SASL", f"SASL_PLAINTEXT://127.0.0.1:{port}")
    monkeypatch.setenv("GROUPKEEPER_ABUSE_SASL_USER", "storm")
    monkeypatch.setenv("GROUPKEEPER_ABUSE_SASL_PASSWORD_FILE", str(secret))
    code, result = bench("--bootstrap", process.bootstrap, "--probes", "wrong-password-storm")
    row = by_probe(result)["wrong-password-storm"]
    assert code == 0 and row["verdict"] == "held", row["problems"]
    figures = row["figures"]
    assert figures["listener"] == f"SASL_PLAINTEXT://127.0.0.1:{port}" and figures["correct_logins"] > 0
    assert "ok" not in figures["guesses"] and figures["guesses"]["refused"] + figures["guesses"].get("unanswered", 0) > 0
    failed = [e for e in process.events() if e.get("event") == "authentication failed" and e.get("user") == "storm"]
    assert failed  # the guesses reached the server, as the same user
