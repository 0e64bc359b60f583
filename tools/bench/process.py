"""A `groupkeeper run` process of a benchmark that starts its own coordinators."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

from kazoo.client import KazooClient

from coordinator.store.zkserver import terminate


class NotStarted(Exception):
    """The process exited, or did not load its group-partitions in time: its last log line."""


class RunProcess:
    def __init__(self, args: list[str]):
        self.command = [sys.executable, "-m", "tools", "run", *args, "--log-format", "json"]
        self.process: subprocess.Popen | None = None

    def start(self, log: Path, timeout: float = 120.0, preexec_fn=None) -> None:
        """Start it, its output to `log`, and return once it serves (its group-partitions
        loaded)."""
        with open(log, "wb") as out:
            self.process = subprocess.Popen(self.command, stdout=out, stderr=out, preexec_fn=preexec_fn)
        deadline = time.monotonic() + timeout
        while b'"group-partitions loaded"' not in log.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise NotStarted((log.read_text(errors="replace").strip().splitlines() or ["(nothing logged)"])[-1])
            time.sleep(0.05)

    def stop(self, timeout: float) -> None:
        """SIGTERM, as an operator stops it; killed if it has not exited within `timeout`."""
        stop(self.process, timeout)


stop = terminate  # SIGTERM, then SIGKILL after the timeout (the runtime's, for its embedded ZooKeeper)


def raise_open_files(wanted: int) -> None:
    """Lift this process's soft limit on open files towards `wanted` (as far as the hard
    limit allows); the processes a bench starts inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard),
                                                    hard))


def chroot(connect: str, path: str) -> str:
    """A ZooKeeper connect string for a chroot of its own at `path`, which is created."""
    client = KazooClient(hosts=connect)
    client.start(timeout=10)
    try:
        client.ensure_path(path)
    finally:
        client.stop()
        client.close()
    return connect + path
