"""`groupkeeper bench abuse --probes zookeeper-budget`: issue 31's pressure on ZooKeeper's
memory (10,000 partitions x 104 characters of metadata to up to 129 groups) against a
coordinator the bench starts (default budget: its client refused after about 15 groups) and
one it is pointed at (a budget of its own); ZooKeeper takes writes after, the room comes back
when the groups are deleted, the bystander is served throughout."""

from __future__ import annotations

import pytest

from tests.support.coordinator_process import CoordinatorProcess
from tests.bench.test_bench_abuse import bench


def test_the_budget_probe_against_a_coordinator_the_bench_starts():
    code, result = bench("--probes", "zookeeper-budget")
    row, = result["probes"]
    figures = row["figures"]
    assert code == 0 and row["verdict"] == "held", row["problems"]
    assert 10 <= figures["acknowledged"] <= 20 and figures["refused"] == 5, figures  # half of 64 MiB, then 5 in a row
    assert figures["answers"] == {"NONE": figures["acknowledged"], "INVALID_COMMIT_OFFSET_SIZE": 5}
    assert figures["moved_after"] == "{NONE:10000}" and figures["refused_then_taken"] == "{NONE:10000}"
    assert figures["deleted"] == {"NONE": figures["acknowledged"]}
    assert row["bystander"]["fetched_back"] == "4/4"


@pytest.fixture
def coordinator(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path, zookeeper_data_budget_bytes=16 << 20)
    # what the bench commits to (offsets are stored only for partitions that exist), read at start-up
    process.cli("topics", "create", "orders", "--partitions", "10000")
    process.start()
    try:
        yield process
    finally:
        assert process.stop() == 0


def test_the_budget_probe_against_a_running_coordinator(coordinator):
    code, result = bench("--bootstrap", coordinator.bootstrap, "--metrics", f"127.0.0.1:{coordinator.metrics_port}",
                         "--probes", "zookeeper-budget")
    row, = result["probes"]
    figures = row["figures"]
    assert code == 0 and row["verdict"] == "held", row["problems"]
    assert 2 <= figures["acknowledged"] <= 5 and figures["refused"] == 5, figures  # 8 MiB a client
    assert set(result["cleanup"]) <= {"NONE", "GROUP_ID_NOT_FOUND"}
