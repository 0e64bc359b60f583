"""A real `groupkeeper run` process for end-to-end tests: its own ZooKeeper chroot on the
session's ZooKeeper, a free port, a config file, its JSON log in a file."""

from __future__ import annotations

import gzip
import json
import os
import random
import resource
import socket
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from tools.cli import main
from coordinator.store.zkserver import free_port
from tests.support.in_process import make_chroot



class CoordinatorProcess:
    def __init__(self, zookeeper, tmp_path: Path, env: dict[str, str] | None = None, chroot: str | None = None,
                 open_files: int | None = None, listeners: tuple[str, ...] = (), **config):
        """`chroot`: join the cluster of another CoordinatorProcess (give it its `chroot` and
        an `instance_id` of its own); default: a cluster of its own. `open_files`: the
        process's limit on open file descriptors. `listeners`: more than its PLAINTEXT one
        (on `bootstrap`)."""
        self.open_files = open_files
        self.chroot = chroot or make_chroot(zookeeper.connect_string, "gk-test")
        self.zookeeper = zookeeper.connect_string + self.chroot
        self.port, self.metrics_port = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.tmp_path = tmp_path
        self.starts = 0
        self.log_path = tmp_path / f"groupkeeper-{self.port}.log"
        settings = {"group_initial_rebalance_delay_ms": 0, "group_min_session_timeout_ms": 1000,
                    "shutdown_grace": 2.0, **config}
        config_path = tmp_path / f"groupkeeper-{self.port}.toml"
        scalars = [(k, v) for k, v in settings.items() if not isinstance(v, dict)]
        tables = [(k, v) for k, v in settings.items() if isinstance(v, dict)]  # after the scalars, as TOML wants
        config_path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in scalars) + "".join(
            f"[{k}]\n" + "".join(f"{json.dumps(ik)} = {json.dumps(iv)}\n" for ik, iv in v.items()) for k, v in tables))
        self.command = [sys.executable, "-m", "tools", "run", "--config", str(config_path),
                        "--zookeeper", self.zookeeper,
                        "--listeners", ",".join([f"PLAINTEXT://{self.bootstrap}", *listeners]),
                        "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
                        "--data-dir", str(tmp_path), "--log-format", "json"]
        self.process: subprocess.Popen | None = None
        self.env = {**os.environ, **env} if env else None  # extra variables for the process

    def start(self, timeout: float = 30.0) -> None:
        """Start (or restart) the process; `events()` then reads this run's log only."""
        self.starts += 1
        if self.starts > 1:
            self.log_path = self.tmp_path / f"groupkeeper-{self.port}-{self.starts}.log"
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command, stderr=log, stdout=log, env=self.env,
                                            preexec_fn=self._limit if self.open_files else None)
        self.wait_for_log("group-partitions loaded", timeout)

    def _limit(self) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))

    def events(self) -> list[dict]:
        lines = self.log_path.read_text().splitlines() if self.log_path.exists() else []
        return [json.loads(line) for line in lines if line.startswith("{")]

    def wait_for_log(self, event: str, timeout: float = 30.0, **fields) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for entry in self.events():
                if entry.get("event") == event and all(entry.get(k) == v for k, v in fields.items()):
                    return entry
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"groupkeeper exited ({self.process.returncode}); log:\n"
                                     + self.log_path.read_text()[-3000:])
            time.sleep(0.05)
        raise AssertionError(f"no {event!r} {fields} in the log within {timeout}s")

    def scrape(self, path: str = "/metrics") -> tuple[int, str]:
        """(status, body) of an HTTP GET on the metrics endpoint."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def metric(self, name: str, **labels) -> float | None:
        """The value of the first sample `name` with `labels` on /metrics, or None if none."""
        status, body = self.scrape()
        assert status == 200
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return None

    def cli(self, *args: str) -> str:
        """A `groupkeeper` admin command against this coordinator's ZooKeeper; must succeed."""
        result = CliRunner().invoke(main, [*args, "--zookeeper", self.zookeeper])
        assert result.exit_code == 0, result.output
        return result.output

    def topic(self, name: str, partitions: int) -> None:
        """Create a topic, and wait until this coordinator's Metadata shows it: its registry
        learns of the write a moment later, and a group formed before would rebalance."""
        from tests.support.clients import RawConnection

        self.cli("topics", "create", name, "--partitions", str(partitions))
        connection = RawConnection(self.port)
        try:
            connection.wait_for_topic(name, partitions)
        finally:
            connection.close()

    def signal(self, signum: int) -> None:
        """SIGKILL, SIGSTOP, SIGCONT, ...: a crash, a pause, a resumption."""
        self.process.send_signal(signum)
        if signum == signal.SIGKILL:
            self.process.wait()

    def stop(self) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


def read_events(directory: Path) -> list[dict]:
    """Every event under `directory`, files in the order they were opened."""
    events = []
    for path in sorted(directory.glob("events-*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as lines:
            events += [json.loads(line) for line in lines]
    return events


def cluster(zookeeper, tmp_path: Path, size: int, **config) -> list[CoordinatorProcess]:
    """`size` instances (ids 0, 1, ...) of one cluster, not started yet."""
    first = CoordinatorProcess(zookeeper, tmp_path, instance_id=0, **config)
    return [first] + [CoordinatorProcess(zookeeper, tmp_path, chroot=first.chroot, instance_id=i, **config)
                      for i in range(1, size)]


@contextmanager
def serving(zookeeper, tmp_path: Path, topics: dict[str, int], **config):
    """A started coordinator whose registry has `topics` (name: partitions); it must stop
    cleanly on the way out."""
    process = CoordinatorProcess(zookeeper, tmp_path, **config)
    process.start()
    try:
        for name, partitions in topics.items():
            process.topic(name, partitions)
        yield process
    finally:
        assert process.stop() == 0


def pin_node_ports(process: CoordinatorProcess, nodes: list[int], listeners: int = 1,
                   max_node_id: int | None = None) -> int:
    """Put the gateway ports of broker `nodes` (ids close together) of `process`, not started
    yet, above the kernel's ephemeral range (32768-60999) on ports free now: there no
    outgoing connection on the machine can hold one when the gateway binds it (a listener's
    free port + 1 + node id could be anywhere). Sets gateway_max_node_id too (default: a
    little above `nodes`, so that the scheme ends below port 65536). Returns the offset."""
    low, high = min(nodes), max(nodes)
    size = (high - low + 1) * listeners
    while True:
        first = random.randrange(61_000, 65_000 - size)
        held = []
        try:
            for port in range(first, first + size):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
        break
    offset = first - process.port - low * listeners
    config = process.tmp_path / f"groupkeeper-{process.port}.toml"
    with open(config, "a") as file:  # appended after the scalars: only when the file has no table
        file.write(f"gateway_node_port_offset = {offset}\n"
                   f"gateway_max_node_id = {high + 10 if max_node_id is None else max_node_id}\n")
    return offset
