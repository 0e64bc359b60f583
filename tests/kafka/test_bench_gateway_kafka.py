"""`groupkeeper bench gateway --broker kafka --instances 2 --tls --serving-wait epoll --second-relay`, tiny:
the bench with Apache Kafka 4.4 behind every mode (one KRaft node of its own, not the
package's cluster: its listeners are the bench's), warmed up, a consumer group and a
/metrics scrape beside the latency phase; two gateway instances, HAProxy with two threads,
and produce and fetch by two client processes, each through an instance of its own; the
clients of HAProxy and of the gateways over TLS, which they terminate; the gateways'
serving loops waiting in their own epoll; the control, two HAProxies in a row (the first
terminating TLS, Kafka advertising it on a listener of its own). What is checked: every record produced was read
back in each mode (each process's share by its own consumer), each figure is there, and
nothing the bench started outlives it. Never a timed assertion."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.test_bench_gateway import processes_naming, run_bench
from tools.bench.gateway import MODES, SECOND_RELAY, haproxy_binary

pytestmark = [pytest.mark.conformance,  # `make conformance` (tests/conftest.py)
              pytest.mark.skipif(haproxy_binary() is None, reason="HAProxy is installed by `make install`")]
RECORDS = 500


def test_every_record_is_read_back_through_every_path_to_kafka(tmp_path):
    result = run_bench(tmp_path, "--broker", "kafka", "--records", str(RECORDS), "--rounds", "1", "--rate", "200",
                       "--seconds", "0.5", "--beside", "--instances", "2", "--tls", "--serving-wait", "epoll",
                       "--second-relay", timeout=600)
    assert result["broker"] == "kafka" and result["complete"]
    assert result["settings"]["tls"] and result["settings"]["serving_wait"] == "epoll"
    assert result["instances"] == 2 and result["relay"]["threads"] == 2
    assert len(result["modes"]["gateway"]["bootstrap"].split(",")) == 2  # an address per instance
    assert set(result["modes"]) == {*MODES, SECOND_RELAY}
    for mode in result["modes"]:
        figures = result["modes"][mode]
        assert "error" not in figures, figures.get("error")
        assert figures["produce"]["records"] == RECORDS and figures["produce"]["failed"] == 0
        assert [figures["rounds"][0][phase]["processes"] for phase in ("produce", "fetch")] == [2, 2]
        assert figures["fetch"]["read"] == RECORDS and figures["fetch"]["complete"]
        assert (figures["fetch"]["duplicates"], figures["fetch"]["stray"]) == (0, 0)
        assert figures["latency"]["delivered"] == figures["latency"]["records"] == 100
        beside = figures["latency"]["beside"]
        assert beside["commit_errors"] == 0 and beside["commits"] > 0, beside
        for phase in ("produce", "fetch", "latency"):
            cpu = figures[phase]["cpu_s"]
            assert cpu["broker"] > 0 and cpu["client"] >= 0
            # the scheduler's nanoseconds, not ticks: a relay that carried the phase shows its CPU
            assert (cpu["relay"] is None) == (mode == "direct") and (mode == "direct" or cpu["relay"] > 0)
    assert all(t["value"] is not None for t in result["targets"])
    token = Path(result["work_dir"]).name
    assert not Path(result["work_dir"]).exists()
    log = result["kafka_log"]  # in memory on a machine with room for it: gone with the run too
    assert token in log["directory"] and not Path(log["directory"]).exists()
    assert processes_naming(token) == []  # Kafka, ZooKeeper, HAProxy and both groupkeepers stopped
