"""`deploy/local-cluster`: a 3-node ZooKeeper ensemble and 3 coordinators on loopback. One
ZooKeeper node and the coordinator of a live group are killed (SIGKILL): the group's members
carry on at another coordinator without losing an acknowledged commit; once the script has
brought both back, ownership is even again; `--stop` stops everything."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from tools.cli import main

from tests.support.clients import RoamingMember, committed, converge, find_coordinator

SCRIPT = Path(__file__).parents[2] / "deploy" / "local-cluster"
OFFSETS = [1, 2, 3, 11, 12, 13, 21, 22, 23, 101, 102, 103, 201, 202, 203]


def _free_base() -> int:
    """A base port whose every offset the script uses is free now."""
    for _ in range(100):
        base = random.randrange(20000, 50000, 1000)
        try:
            for offset in OFFSETS:
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", base + offset))
            return base
        except OSError:
            continue
    raise AssertionError("no free port range")


def _script(env: dict, *args: str) -> str:
    done = subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _until_refused(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return
        assert time.monotonic() < deadline, f"something still listens on {port}"
        time.sleep(0.05)


def _pid(directory: Path, name: str) -> int:
    return int((directory / f"{name}.pid").read_text())


def _status(zookeeper: str) -> dict:
    result = CliRunner().invoke(main, ["cluster", "--json", "--zookeeper", zookeeper])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_local_cluster_survives_a_zookeeper_node_and_a_coordinator(tmp_path):
    directory = tmp_path / "local-cluster"
    base = _free_base()
    env = {**os.environ, "LOCAL_CLUSTER_DIR": str(directory), "LOCAL_CLUSTER_PORT": str(base),
           "LOCAL_CLUSTER_SESSION_TIMEOUT": "4", "GROUPKEEPER": str(Path(sys.executable).parent / "groupkeeper")}
    try:
        printed = dict(line.split(":", 1) for line in _script(env).splitlines())
        zookeeper = printed["zookeeper"].strip()
        ports = [int(address.rsplit(":", 1)[1]) for address in printed["bootstrap.servers"].strip().split(",")]
        assert ports == [base + 101, base + 102, base + 103]
        assert sorted(len(i["group_partitions"]) for i in _status(zookeeper)["instances"]) == [16, 17, 17]

        result = CliRunner().invoke(main, ["topics", "create", "t", "--partitions", "4", "--zookeeper", zookeeper])
        assert result.exit_code == 0, result.output
        members = [RoamingMember(ports, "drill", "t", session_timeout_ms=10000) for _ in range(2)]
        acked: dict = {}
        converge(members, {("t", p) for p in range(4)}, acked)

        owner = ports.index(find_coordinator(ports, "drill")) + 1
        os.kill(_pid(directory, "zookeeper1"), signal.SIGKILL)
        os.kill(_pid(directory, f"coordinator{owner}"), signal.SIGKILL)
        _until_refused(base + 1)  # the ZooKeeper server itself is gone, not just its command
        survivors = [p for n, p in enumerate(ports, start=1) if n != owner]
        for m in members:
            m.bootstraps = survivors
        converge(members, {("t", p) for p in range(4)}, acked)  # served again by a survivor
        assert find_coordinator(survivors, "drill") in survivors
        stored = committed(survivors, "drill")
        assert all(stored[tp] >= offset for tp, offset in acked.items())

        _script(env)  # brings the two back
        status = _status(zookeeper)
        assert [i["id"] for i in status["instances"]] == [1, 2, 3] and status["unowned"] == []
        assert sorted(len(i["group_partitions"]) for i in status["instances"]) == [16, 17, 17]
        for m in members:
            m.bootstraps = ports
        converge(members, {("t", p) for p in range(4)}, acked)
    finally:
        pids = [int(p.read_text()) for p in directory.glob("*.pid")]
        stopped = subprocess.run([str(SCRIPT), "--stop"], env=env, capture_output=True, text=True, timeout=180)
        for pid in pids:  # whatever --stop did not stop must not outlive the test
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            raise AssertionError(f"process {pid} was still running after --stop")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    for offset in OFFSETS[:3] + OFFSETS[9:12]:  # nothing listens any more: ZooKeeper nodes, coordinators
        _until_refused(base + offset)
