"""`groupkeeper bench gateway`, tiny: every record passes every path, never a timed assertion.

The bench starts three Tansu brokers, HAProxy, a ZooKeeper and `groupkeeper run --gateway`;
at a few hundred records a round (a consumer group and a /metrics scrape beside the latency
phase), what is checked is that every record produced was read back in each mode (the
broker directly, through HAProxy, through two HAProxies in a row with `--second-relay`,
through the gateway), that each figure is there, and that
nothing it started outlives it, Ctrl-C included. The figures are
printed for the log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.bench import gateway
from tools.bench.gateway import MODES, SECOND_RELAY, Settings, haproxy_binary, table

RECORDS, ROUNDS = 300, 2

pytestmark = pytest.mark.skipif(haproxy_binary() is None, reason="HAProxy is installed by `make install`")


def processes_naming(token: str) -> list[str]:
    """Command lines of the running processes that contain `token`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if token in line:
            found.append(f"{entry.name}: {line[:300]}")
    return found


def run_bench(tmp_path: Path, *args: str, timeout: float = 300) -> dict:
    """`groupkeeper bench gateway --json ARGS` with its temporary files under `tmp_path`: its
    results (a few figures printed for the log), once it has exited 0."""
    done = subprocess.run([sys.executable, "-m", "tools", "bench", "gateway", "--json", *args],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    print(json.dumps({m: {p: {k: v for k, v in result["modes"][m][p].items() if k in ("mb_per_s", "p50_ms", "cpu_s")}
                          for p in ("produce", "fetch", "latency")} for m in result["modes"]}, indent=1))
    return result


def test_every_record_produced_is_read_back_on_every_path(tmp_path):
    result = run_bench(tmp_path, "--records", str(RECORDS), "--rounds", str(ROUNDS), "--rate", "200", "--seconds",
                       "0.5", "--beside", "--profile", str(tmp_path / "profile"), "--second-relay")
    assert result["complete"]
    assert set(result["modes"]) == {*MODES, SECOND_RELAY}
    for mode in result["modes"]:
        figures = result["modes"][mode]
        assert "error" not in figures, figures.get("error")
        assert len(figures["rounds"]) == ROUNDS
        produced, fetched, timed = figures["produce"], figures["fetch"], figures["latency"]
        assert produced["records"] == RECORDS * ROUNDS and produced["failed"] == 0
        assert fetched["read"] == RECORDS * ROUNDS and fetched["complete"]
        assert (fetched["duplicates"], fetched["stray"], fetched["errors"]) == (0, 0, 0)
        assert timed["delivered"] == timed["records"] == 100 * ROUNDS and timed["failed"] == 0
        assert produced["mb_per_s"] > 0 and fetched["mb_per_s"] > 0
        assert 0 < timed["p50_ms"] <= timed["p99_ms"] <= timed["max_ms"]
        for phase in (produced, fetched, timed):
            assert phase["cpu_s"]["broker"] is not None and phase["cpu_s"]["client"] is not None
            assert (phase["cpu_s"]["relay"] is None) == (mode == "direct")
    for mode in result["modes"]:  # beside the latency phase: a consumer group of each path, the gateway's /metrics
        beside = result["modes"][mode]["latency"]["beside"]
        assert beside["commit_errors"] == 0 and beside["scrape_errors"] == 0, beside
        assert (beside["scrapes"] >= ROUNDS) == (mode == "gateway"), beside  # one at least per round, at once
        # the consumer's own statistics came while the phase ran (its Fetch requests a second)
        assert beside["fetch_seconds"] > 0, beside
    assert result["modes"]["gateway"]["bootstrap"] == f"127.0.0.1:{result['gateway']['port']}"
    gateway = result["gateway"]
    assert gateway["node_port"] == gateway["port"] + gateway["node_port_offset"] + gateway["node_id"]
    targets = result["targets"]
    assert [t["what"].split(",")[0].split(" at ")[0] for t in targets] == [
        "produce MB/s", "fetch MB/s", "produce p50", "produce p99", "produce p99.9", "CPU per MB produced",
        "CPU per MB fetched"]
    # a few hundred records may cost the relay less than a clock tick: its CPU ratio is then unknown
    assert all(t["value"] is not None for t in targets[:5])
    # the control's column: its own path, and what its hop moved each latency figure by
    assert result["modes"][SECOND_RELAY]["bootstrap"] not in (result["modes"]["relay"]["bootstrap"],
                                                               result["modes"]["gateway"]["bootstrap"])
    assert all(t["second_relay_minus_relay"] is not None for t in targets[2:5])
    assert "RELAY x2" in table(result)
    assert len(result["modes"]["gateway"]["latency"]["rounds_p50_ms"]) == ROUNDS
    # py-spy's samples, if it may attach here (ptrace): the phases are there either way
    assert set(result["modes"]["gateway"]["profile"]) == {"produce", "fetch", "latency"}
    token = Path(result["work_dir"]).name
    assert not Path(result["work_dir"]).exists()
    assert processes_naming(token) == []  # every broker, HAProxy, ZooKeeper and groupkeeper stopped


def test_ctrl_c_stops_everything_it_started(tmp_path):
    bench = subprocess.Popen([sys.executable, "-m", "tools", "bench", "gateway", "--records", "100000",
                              "--rounds", "50"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 120
        token = None
        while token is None or not [p for p in processes_naming(token) if "--gateway" in p]:
            assert bench.poll() is None, bench.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the bench never started its gateway"
            token = next((d.name for d in tmp_path.iterdir() if d.name.startswith("groupkeeper-bench-gateway-")),
                         None)
            time.sleep(0.1)
        started = processes_naming(token)
        time.sleep(1.0)  # starting or measuring: either way, interrupted
        bench.send_signal(signal.SIGINT)
        bench.communicate(timeout=60)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    assert bench.returncode != 0
    assert len(started) == 6, started  # three brokers, ZooKeeper, HAProxy, groupkeeper
    deadline = time.monotonic() + 10
    while left := processes_naming(token):
        assert time.monotonic() < deadline, left
        time.sleep(0.1)
    assert not (tmp_path / token).exists()


@pytest.mark.parametrize("records, room, in_memory", [
    (1000, 2 << 30, True),  # the warm-up's 300,000 records decide: 3 x 337 MB + 512 MiB fits in 2 GiB
    (1000, 1 << 30, False),
    (3_000_000, 8 << 30, False),  # 3 x 3.4 GB does not fit in 8 GiB
    (3_000_000, 12 << 30, True),
    (1000, 0, False),  # /dev/shm or /proc/meminfo unreadable
])
def test_kafka_log_in_memory_only_where_it_fits(monkeypatch, tmp_path, records, room, in_memory):
    monkeypatch.setattr(gateway, "_memory_room", lambda: room)
    work = tmp_path / "groupkeeper-bench-gateway-x1"
    directory, memory = gateway._kafka_directory(work, Settings(records=records))
    assert memory is in_memory
    assert directory == (gateway.SHM / "groupkeeper-bench-gateway-x1-kafka" if in_memory else work / "kafka")
