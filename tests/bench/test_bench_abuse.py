"""`groupkeeper bench abuse` as an operator runs it, with small parameters: every probe
reports a verdict and its figures, every probe holds (against a coordinator
the bench starts and against one it is pointed at), a misbehaving server is reported as
`broke` with a non-zero exit, and bad arguments are one line. (Figures come from full runs,
in docs/benchmarks.md, not from these tests.)"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tools.bench.abuse import PROBES
from tools.cli import main
from coordinator.store.zkserver import free_port
from tests.support.coordinator_process import CoordinatorProcess
from tests.support.standin_broker import StandInBroker

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--members", "50", "--huge-partitions", "300", "--per-ip-limit", "50", "--connections", "60",
         "--never-reads-seconds", "1.5", "--read-timeout", "1"]


def bench(*args: str, open_files: int | None = None) -> tuple[int, dict]:
    """The command as a process of its own (it raises its open-file limit, starts servers):
    its exit status and JSON output. `open_files`: its hard limit on open files."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    done = subprocess.run([sys.executable, "-m", "tools", "bench", "abuse", "--json", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          preexec_fn=limit if open_files else None)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def by_probe(result: dict) -> dict[str, dict]:
    return {row["probe"]: row for row in result["probes"]}


# probes run by tests of their own (test_bench_abuse_budget.py, test_bench_abuse_storm.py)
TESTED_ALONE = ("zookeeper-budget", "wrong-password-storm")


def test_every_probe_reports_a_verdict_and_figures_against_a_coordinator_it_starts():
    assert set(TESTED_ALONE) <= set(PROBES)
    others = [name for name in PROBES if name not in TESTED_ALONE]
    code, result = bench(*SMALL, "--probes", ",".join(others))
    rows = by_probe(result)
    assert list(rows) == others and result["started_by_bench"]
    for name, row in rows.items():
        assert row["verdict"] in ("held", "broke") and row["figures"] and row["checked"], row
        assert row["bystander"]["requests"] > 0 and row["bystander"]["fetched_back"] == "4/4", row
        assert row["verdict"] == "held", (name, row["problems"])
    assert code == (1 if result["broke"] else 0)
    assert result["broke"] == sum(row["verdict"] == "broke" for row in rows.values())

    assert rows["trickle"]["figures"]["closed_after_s"] <= rows["trickle"]["figures"]["bound_s"]
    flood = rows["connection-flood"]["figures"]
    assert flood["closed_by_server"] + flood["refused_at_connect"] >= 10 and flood["kept"] <= 50
    assert "rss_growth_mib" in rows["never-reads"]["figures"]  # measured in /proc: the bench started it
    assert rows["long-group-id"]["figures"]["JoinGroup"] == "INVALID_GROUP_ID"


@pytest.fixture
def coordinator(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path, request_read_timeout_ms=1000, max_connections_per_ip=20,
                                 max_queued_reply_bytes=1 << 20)
    process.start()
    process.topic("orders", 4)  # what the bench commits to: offsets are stored only for partitions that exist
    try:
        yield process
    finally:
        assert process.stop() == 0


def test_a_running_coordinator_is_probed_and_what_the_bench_wrote_is_deleted(coordinator):
    code, result = bench("--bootstrap", coordinator.bootstrap, "--metrics", f"127.0.0.1:{coordinator.metrics_port}",
                         "--probes", "empty-names,long-group-id,trickle,connection-flood,never-reads",
                         "--read-timeout", "1", "--per-ip-limit", "20", "--connections", "30",
                         "--queued-reply-bytes", str(1 << 20), "--never-reads-seconds", "1")
    rows = by_probe(result)
    assert code == 0 and not result["started_by_bench"], result
    assert all(row["verdict"] == "held" for row in rows.values()), [row["problems"] for row in rows.values()]
    assert "memory" in rows["never-reads"]["figures"]  # read from --metrics, or said to be unmeasured
    assert rows["never-reads"]["figures"]["answer_bytes"] > 16 * 1024  # made-up topics, none existing
    assert set(result["cleanup"]) <= {"NONE", "GROUP_ID_NOT_FOUND"} and result["cleanup"].get("NONE")


def test_a_server_that_lets_a_request_trickle_for_ever_is_reported_broke():
    """The stand-in broker answers ApiVersions and keeps any connection open: the trickle
    probe breaks, and so does the bystander, which it serves no group."""
    standin = StandInBroker({}).start()
    try:
        code, result = bench("--bootstrap", f"127.0.0.1:{standin.port}", "--probes", "trickle",
                             "--read-timeout", "0.5", "--deadline", "2")
    finally:
        standin.stop()
    row, = result["probes"]
    assert code == 1 and result["broke"] == 1 and row["verdict"] == "broke"
    assert row["figures"]["closed_after_s"] is None and row["figures"]["bytes_sent"] >= 2
    assert any("still open" in problem for problem in row["problems"]), row["problems"]
    assert any(problem.startswith("bystander:") for problem in row["problems"]), row["problems"]


def test_a_flood_the_open_file_limit_cannot_hold_is_skipped_not_broken():
    standin = StandInBroker({}).start()
    try:
        code, result = bench("--bootstrap", f"127.0.0.1:{standin.port}", "--probes", "connection-flood",
                             "--connections", "1000", "--deadline", "2", open_files=256)
    finally:
        standin.stop()
    row, = result["probes"]
    assert code == 0 and result["broke"] == 0 and row["verdict"] == "skipped"
    assert "1,064 open files" in row["skipped"] and "hard limit 256" in row["skipped"], row["skipped"]


@pytest.mark.parametrize("args, message", [
    (["--bootstrap", "nowhere"], "Error: --bootstrap: 'nowhere' is not HOST:PORT"),
    (["--bootstrap", "127.0.0.1:9094", "--metrics", "x"], "Error: --metrics: 'x' is not HOST:PORT"),
    (["--metrics", "127.0.0.1:9095"], "Error: --metrics needs --bootstrap"),
    (["--probes", "trickle,nope"], "Error: --probes: unknown nope; known: empty-names,"),
    (["--probes", ","], "Error: --probes: unknown (none given)"),
])
def test_bad_arguments_are_one_line(args, message):
    result = CliRunner().invoke(main, ["bench", "abuse", *args])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith(message), result.output


def test_an_unreachable_bootstrap_is_one_line():
    closed = f"127.0.0.1:{free_port()}"
    done = subprocess.run([sys.executable, "-m", "tools", "bench", "abuse", "--bootstrap", closed],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"Error: cannot reach {closed}: connection refused\n"
