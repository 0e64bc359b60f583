"""A standalone ZooKeeper server from Debian's packages, run as a child process.

Used three ways: `groupkeeper zookeeper` (in the foreground), `groupkeeper run` without
`--zookeeper` (embedded, stopped on exit, like Solr's embedded ZooKeeper) and the test
fixtures (free port, temporary data dir).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # Debian's `zookeeper` package
SLF4J_BINDING = Path("/usr/share/java/slf4j-simple.jar")  # its logging, from libslf4j-java
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
INSTALL_HINT = "install Debian's packages: apt-get install zookeeper default-jre-headless"


class ZooKeeperUnavailable(Exception):
    """Java or ZooKeeper is missing, or the server did not come up."""


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperUnavailable(f"java is not installed; {INSTALL_HINT}")
    if not ZOOKEEPER_JAR.exists():
        raise ZooKeeperUnavailable(f"ZooKeeper is not installed ({ZOOKEEPER_JAR} is missing); {INSTALL_HINT}")
    return java


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def four_letter_word(host: str, port: int, word: bytes, timeout: float = 1.0) -> bytes:
    """Send one of ZooKeeper's four-letter commands ("ruok", "srvr") and return the answer."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word)
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


class ZooKeeperServer:
    """One standalone server; `start()` returns once it answers "imok"."""

    def __init__(self, data_dir: str | os.PathLike, port: int, host: str = "127.0.0.1",
                 tick_ms: int = 2000, max_client_connections: int = 1000):
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.tick_ms = tick_ms
        self.max_client_connections = max_client_connections
        self.process: subprocess.Popen | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    def _write_config(self) -> Path:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        config.write_text("\n".join([
            f"tickTime={self.tick_ms}",
            f"dataDir={self.data_dir / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            f"maxClientCnxns={self.max_client_connections}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr",
            "",
        ]))
        return config

    def command(self) -> list[str]:
        classpath = os.pathsep.join(str(p) for p in (ZOOKEEPER_JAR, SLF4J_BINDING) if p.exists())
        return [_java(), "-Xmx512m", "-Dzookeeper.admin.enableServer=false",
                "-cp", classpath, MAIN_CLASS, str(self._write_config())]

    def start(self, timeout: float = 30.0, foreground: bool = False) -> None:
        """Start the server; with `foreground`, its log goes to this process's stderr."""
        cmd = self.command()
        log = None if foreground else open(self.log_path, "ab")
        try:  # its own session: signals reach it only through stop() and kill()
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT if log else None,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            if log is not None:
                log.close()
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise ZooKeeperUnavailable(
                    f"ZooKeeper exited with status {self.process.returncode} (log: {self.log_path})")
            try:
                if four_letter_word(self.host, self.port, b"ruok") == b"imok":
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ZooKeeperUnavailable(f"ZooKeeper did not answer on {self.connect_string} "
                                           f"within {timeout:.0f}s (log: {self.log_path})")
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout`."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """SIGKILL: a crash, as far as clients and the data directory can tell."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
