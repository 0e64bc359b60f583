"""A ZooKeeper server from Debian's packages, run as a child process: standalone, or one
node of an ensemble.

Used four ways: `groupkeeper zookeeper` (in the foreground; with `--ensemble`, one node of
an ensemble, as `deploy/local-cluster` runs three), `groupkeeper run` without
`--zookeeper` (embedded, stopped on exit, like Solr's embedded ZooKeeper) and the test
fixtures (free port, temporary data dir).

A server never outlives the process that started it. Started from the main thread, the
kernel kills it when that process dies, even by SIGKILL (Linux's PR_SET_PDEATHSIG). Where
that cannot reach (started from another thread, which the signal would follow instead, or
not on Linux), the PID file in its data dir names it, and the next server started on that
data dir stops it first: only if it is that very process (same pid and start time, a
ZooKeeper of this data dir's configuration) and the process that started it is gone. A
process that merely has the pid now is never touched.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import logs

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # Debian's `zookeeper` package
SLF4J_BINDING = Path("/usr/share/java/slf4j-simple.jar")  # its logging, from libslf4j-java
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
ENSEMBLE_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
INSTALL_HINT = "install Debian's packages: apt-get install zookeeper default-jre-headless"
PID_FILE = "zookeeper.pid"  # in the data dir: the server running there, and who started it
REAP_TIMEOUT = 5.0  # seconds a leftover server gets to exit on SIGTERM, before SIGKILL


class ZooKeeperUnavailable(Exception):
    """Java or ZooKeeper is missing, or the server did not come up."""


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperUnavailable(f"java is not installed; {INSTALL_HINT}")
    if not ZOOKEEPER_JAR.exists():
        raise ZooKeeperUnavailable(f"ZooKeeper is not installed ({ZOOKEEPER_JAR} is missing); {INSTALL_HINT}")
    return java


def _die_with_parent() -> Callable[[], None] | None:
    """What the child runs before exec so that it is SIGKILLed when this process dies (Linux's
    PR_SET_PDEATHSIG); None where that cannot be had. The signal follows the *thread* that
    forks, not the process: only the main thread, which ends with the process, may ask for
    it, or a server started from a worker thread would die with that thread (trio's end
    when idle)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child only calls it
    parent = os.getpid()

    def in_child() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the line above: no signal will come
            os._exit(1)
    return in_child


def _start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks after boot, /proc/PID/stat's 22nd field): with
    the pid, what tells a process from a later one given the same pid. None if there is no
    such process, only its zombie, or no /proc."""
    try:  # after the command name, which is in parentheses and may hold anything
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (OSError, ValueError):
        return None
    return None if len(fields) < 20 or fields[0] == "Z" else fields[19]


def _command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _exits(pidfd: int, timeout: float) -> bool:
    """Whether the process of `pidfd` ends within `timeout` (a pidfd polls readable then)."""
    poll = select.poll()
    poll.register(pidfd, select.POLLIN)
    return bool(poll.poll(timeout * 1000))


_HANDED_OUT: dict[int, None] = {}  # ports free_port gave, oldest first (not given again while here)
MAX_HANDED_OUT = 4_096
_LOWEST_PORT = 10_000  # below: the ports services are commonly configured on


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now, for a server about to be started on it.

    Chosen below the kernel's ephemeral range: a port the kernel hands out itself (bind
    to 0) may be taken, before the server binds it, as the local end of any connection
    opened meanwhile (a client's, a ZooKeeper session's), and the server then fails with
    "Address already in use". Tried at random, and not handed out twice by one process
    while it is among the last MAX_HANDED_OUT; where no such range is left, the kernel's."""
    low, high = _ephemeral_range()
    # below the range; above it only where nothing is left below (tests keep the ports above
    # it for the gateway's node ports: tests/support/coordinator_process.py)
    span = next((s for s in (range(_LOWEST_PORT, low), range(high + 1, 65536)) if len(s) >= 1_000), None)
    rng = random.SystemRandom()
    for _ in range(200 if span is not None else 0):
        port = span[rng.randrange(len(span))]
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        return _hand_out(port)
    while True:
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            return _hand_out(port)


def _hand_out(port: int) -> int:
    if len(_HANDED_OUT) >= MAX_HANDED_OUT:
        del _HANDED_OUT[next(iter(_HANDED_OUT))]
    _HANDED_OUT[port] = None
    return port


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range of ports for the local ends of connections (Linux's default where
    it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(part) for part in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


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


def terminate(process: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` (nothing if not running)."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class ZooKeeperServer:
    """One server, standalone or, with `peers` (server ids 1, 2, ... in order) and its own
    `server_id`, a node of an ensemble. `start()` returns once it serves (`serving`): a
    standalone server has loaded its data, a node has joined a quorum (as leader or follower)."""

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

    @property
    def pid_file(self) -> Path:
        return self.data_dir / PID_FILE

    @property
    def config_path(self) -> Path:
        """Absolute: it names this data dir on the server's command line whatever the working
        directory, which is how a leftover server of this data dir is recognised."""
        return self.data_dir.absolute() / "zoo.cfg"

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
        self.config_path.write_text("\n".join(lines + [""]))
        return self.config_path

    def command(self) -> list[str]:
        classpath = os.pathsep.join(str(p) for p in (ZOOKEEPER_JAR, SLF4J_BINDING) if p.exists())
        return [_java(), f"-Xmx{self.heap_mb}m", "-Dzookeeper.admin.enableServer=false",
                "-cp", classpath, ENSEMBLE_MAIN_CLASS if self.peers else MAIN_CLASS, str(self._write_config())]

    def start(self, timeout: float = 30.0, foreground: bool = False) -> None:
        """Start the server and return once it serves: `spawn()`, then `wait_ready()`."""
        self.spawn(foreground)
        self.wait_ready(timeout)

    def spawn(self, foreground: bool = False) -> None:
        """Start the server process, after stopping a leftover of this data dir's (see the
        module's docstring). In the background (embedded, tests) it has a session of its
        own: signals reach it only through stop() and kill(). In the `foreground`
        (`groupkeeper zookeeper`) it is part of this command: its log goes to this process's
        stderr and it is in this process's group. Either way it dies with this process, even
        a SIGKILLed one, if this is the main thread (trio's, in `groupkeeper run`)."""
        self._reap_leftover()
        try:  # another server there would answer for ours, and ours would fail to bind, unseen
            already = self.answers()
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
                                            preexec_fn=_die_with_parent())
        finally:
            if log is not None:
                log.close()
        self._record()

    def _record(self) -> None:
        """Write the PID file: the server (pid, start time) and the process that started it,
        whose end makes the server a leftover. Replaced whole, never seen half written."""
        pid, me = self.process.pid, os.getpid()
        record = {"pid": pid, "started": _start_time(pid), "owner": me, "owner_started": _start_time(me)}
        partial = self.pid_file.with_name(PID_FILE + ".new")
        partial.write_text(json.dumps(record) + "\n")
        partial.replace(self.pid_file)

    def _forget(self, pid: int) -> None:
        """Remove the PID file if it names `pid` (a server this object stopped), not another."""
        try:
            if json.loads(self.pid_file.read_text()).get("pid") == pid:
                self.pid_file.unlink()
        except (OSError, ValueError, AttributeError):
            pass

    def _reap_leftover(self) -> None:
        """Stop the server the PID file names if it is a leftover of this data dir: that very
        process (the pid's start time is the file's; signalled through a pidfd opened before
        the check, which reaches the process it was opened on or none, so a pid reused
        meanwhile cannot redirect it), running this data dir's configuration, its starter
        gone. Its starter alive (another instance on this data dir): refused. Anything else
        the file names is left alone, and the stale file removed."""
        try:
            record = json.loads(self.pid_file.read_text())
            pid, started = int(record["pid"]), str(record["started"])
            owner, owner_started = int(record["owner"]), str(record["owner_started"])
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self.pid_file.unlink(missing_ok=True)  # unreadable: it names nothing we could trust
            return
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # no such process (or no pidfds: nothing checked, nothing killed)
            self.pid_file.unlink(missing_ok=True)
            return
        try:
            command = _command_line(pid)
            if (_start_time(pid) != started or str(self.config_path) not in command
                    or not {MAIN_CLASS, ENSEMBLE_MAIN_CLASS} & set(command)):
                self.pid_file.unlink(missing_ok=True)  # someone else's process has the pid now
                return
            if _start_time(owner) == owner_started:
                raise ZooKeeperUnavailable(
                    f"{self.data_dir} is in use by ZooKeeper (pid {pid}) of a running process (pid {owner}): "
                    "give each instance a data_dir of its own")
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
            if not _exits(pidfd, REAP_TIMEOUT):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                _exits(pidfd, REAP_TIMEOUT)
            logs.get("groupkeeper.zookeeper").warning(
                "leftover zookeeper stopped", pid=pid, data_dir=str(self.data_dir),
                reason="the process that started it is gone")
            self.pid_file.unlink(missing_ok=True)
        except ProcessLookupError:  # ended on its own meanwhile
            self.pid_file.unlink(missing_ok=True)
        except PermissionError:  # ours by every sign, yet another user's: not for us to stop
            raise ZooKeeperUnavailable(f"a leftover ZooKeeper (pid {pid}) holds {self.data_dir}, and this user "
                                       "may not stop it") from None
        finally:
            os.close(pidfd)

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

    def answers(self) -> bool:
        """Whether a ZooKeeper answers on this port at all, serving or still starting."""
        return four_letter_word(self.host, self.port, b"ruok") == b"imok"

    def serving(self) -> bool:
        """Whether it serves clients: only then does "srvr" tell its mode (standalone, leader,
        follower). Not "ruok": a server answers "imok" as soon as it listens, before it has
        loaded its data (about 0.1 s here), and a session asked for meanwhile waits for that;
        a kazoo client with a 10 s timeout fails if the start is slower."""
        return b"Mode: " in four_letter_word(self.host, self.port, b"srvr")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout`."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        try:
            terminate(proc, timeout)
        finally:
            self._forget(proc.pid)

    def kill(self) -> None:
        """SIGKILL: a crash, as far as clients and the data directory can tell."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc is not None:
            self._forget(proc.pid)

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
