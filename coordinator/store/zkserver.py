"""A ZooKeeper server from Debian's packages, run as a child process: standalone, or one
node of an ensemble.

Used four ways: `groupkeeper zookeeper` (in the foreground; with `--ensemble`, one node of
an ensemble, as `deploy/local-cluster` runs three), `groupkeeper run` without
`--zookeeper` (embedded, stopped on exit, like Solr's embedded ZooKeeper) and the test
fixtures (free port, temporary data dir).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # Debian's `zookeeper` package
SLF4J_BINDING = Path("/usr/share/java/slf4j-simple.jar")  # its logging, from libslf4j-java
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
ENSEMBLE_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
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


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the thread that started it ends (Linux's
    PR_SET_PDEATHSIG; only for the foreground command, whose main thread starts it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def data_bytes(connect: str, timeout: float = 1.0) -> int | None:
    """ZooKeeper's own estimate of the bytes of data it holds (`mntr`'s
    zk_approximate_data_size), from the first server of `connect` that answers; every server
    of an ensemble holds the same data. None when none answers `mntr`."""
    for server in connect.split("/", 1)[0].split(","):
        host, _, port = server.rpartition(":")
        try:
            answer = four_letter_word(host.strip("[]"), int(port), b"mntr", timeout)
        except (OSError, ValueError):
            continue
        for line in answer.decode(errors="replace").splitlines():
            key, _, value = line.partition("\t")
            if key == "zk_approximate_data_size" and value.strip().isdigit():
                return int(value)
    return None


def four_letter_word(host: str, port: int, word: bytes, timeout: float = 1.0) -> bytes:
    """Send one of ZooKeeper's four-letter commands ("ruok", "srvr") and return the answer."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word)
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


@dataclass(frozen=True)
class Peer:
    """One node of an ensemble as the others reach it: `host:quorum_port:election_port`."""
    host: str
    quorum_port: int
    election_port: int

    @classmethod
    def parse(cls, text: str) -> Peer:
        host, quorum, election = text.rsplit(":", 2)
        if not host or not quorum.isdigit() or not election.isdigit():
            raise ValueError(f"{text!r} is not HOST:QUORUM_PORT:ELECTION_PORT")
        return cls(host, int(quorum), int(election))


class ZooKeeperServer:
    """One server, standalone or, with `peers` (server ids 1, 2, ... in order) and its own
    `server_id`, a node of an ensemble. `start()` returns once it serves: a standalone
    server answers "imok", a node has joined a quorum (as leader or follower)."""

    def __init__(self, data_dir: str | os.PathLike, port: int, host: str = "127.0.0.1",
                 tick_ms: int = 2000, max_client_connections: int = 1000,
                 peers: list[Peer] | None = None, server_id: int | None = None, heap_mb: int = 512):
        if peers and not (server_id and 1 <= server_id <= len(peers)):
            raise ValueError(f"server id {server_id} is not one of the ensemble's 1-{len(peers)}")
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.tick_ms = tick_ms
        self.max_client_connections = max_client_connections
        self.peers = peers or []
        self.server_id = server_id
        self.heap_mb = heap_mb  # its JVM's heap: ZooKeeper holds all its data in memory
        self.process: subprocess.Popen | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    def _write_config(self) -> Path:
        data = self.data_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.tick_ms}",
            f"dataDir={data}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            f"maxClientCnxns={self.max_client_connections}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr",
        ]
        if self.peers:
            (data / "myid").write_text(f"{self.server_id}\n")
            lines += ["initLimit=10", "syncLimit=5"] + [
                f"server.{n}={peer.host}:{peer.quorum_port}:{peer.election_port}"
                for n, peer in enumerate(self.peers, start=1)]
        config = self.data_dir / "zoo.cfg"
        config.write_text("\n".join(lines + [""]))
        return config

    def command(self) -> list[str]:
        classpath = os.pathsep.join(str(p) for p in (ZOOKEEPER_JAR, SLF4J_BINDING) if p.exists())
        return [_java(), f"-Xmx{self.heap_mb}m", "-Dzookeeper.admin.enableServer=false",
                "-cp", classpath, ENSEMBLE_MAIN_CLASS if self.peers else MAIN_CLASS, str(self._write_config())]

    def start(self, timeout: float = 30.0, foreground: bool = False) -> None:
        """Start the server. In the background (embedded, tests) it has a session of its own:
        signals reach it only through stop() and kill(). In the `foreground` (`groupkeeper
        zookeeper`) it is part of this command: its log goes to this process's stderr, it is
        in this process's group, and it dies with this process, even a SIGKILLed one."""
        try:  # another server there would answer for ours, and ours would fail to bind, unseen
            already = self.serving()
        except OSError:
            already = False
        if already:
            raise ZooKeeperUnavailable(
                f"a ZooKeeper already answers on {self.connect_string} (one left by a killed groupkeeper? "
                "stop it, or choose another port)")
        cmd = self.command()
        log = None if foreground else open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT if log else None,
                                            stdin=subprocess.DEVNULL, start_new_session=not foreground,
                                            preexec_fn=_die_with_parent if foreground else None)
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
                if self.serving():
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ZooKeeperUnavailable(f"ZooKeeper did not answer on {self.connect_string} "
                                           f"within {timeout:.0f}s (log: {self.log_path})")
            time.sleep(0.05)

    def serving(self) -> bool:
        """Standalone: it answers. A node of an ensemble: it is in a quorum."""
        if not self.peers:
            return four_letter_word(self.host, self.port, b"ruok") == b"imok"
        return b"Mode: " in four_letter_word(self.host, self.port, b"srvr")

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
