"""systemd's readiness protocol: coordinator.systemd.notify on its own, then a real
`groupkeeper run` with $NOTIFY_SOCKET pointing at a datagram socket of the test standing in
for systemd's: READY=1 only once the instance serves every group, STOPPING=1 on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import tempfile
import threading
import time

import pytest

from coordinator import systemd
from coordinator.cluster.placement import DEFAULT_GROUP_PARTITIONS, partition_for
from protocol import ErrorCode
from protocol.schemas import DESCRIBE_GROUPS
from tests.support.clients import RawConnection
from tests.support.coordinator_process import CoordinatorProcess


@pytest.fixture
def notify_socket():
    """A bound datagram socket and its path; a short directory of its own, since a Unix
    socket path must fit in 108 bytes and pytest's tmp_path may not."""
    with tempfile.TemporaryDirectory(prefix="gk-notify-") as directory:
        path = os.path.join(directory, "notify")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(path)
            yield sock, path


def receive(sock: socket.socket, timeout: float = 5.0) -> str:
    sock.settimeout(timeout)
    return sock.recv(4096).decode()


def test_nothing_is_sent_without_notify_socket(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert systemd.notify("READY=1") is False


def test_fields_go_as_one_datagram(monkeypatch, notify_socket):
    sock, path = notify_socket
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    assert systemd.notify("READY=1", "STATUS=serving") is True
    assert receive(sock) == "READY=1\nSTATUS=serving"


def test_abstract_socket(monkeypatch):
    name = f"groupkeeper-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert systemd.notify("STOPPING=1") is True
        assert receive(sock) == "STOPPING=1"


def test_a_socket_nobody_listens_on_is_not_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "gone"))
    assert systemd.notify("READY=1") is False
    monkeypatch.setenv("NOTIFY_SOCKET", "vsock:2:1234")
    assert systemd.notify("READY=1") is False


def one_group_per_partition() -> list[str]:
    names: dict[int, str] = {}
    for i in range(100_000):
        names.setdefault(partition_for(f"probe-{i}", DEFAULT_GROUP_PARTITIONS), f"probe-{i}")
        if len(names) == DEFAULT_GROUP_PARTITIONS:
            return list(names.values())
    raise AssertionError("group names do not cover every group-partition")


class Systemd:
    """What systemd would see: every datagram in order, and, the moment READY=1 arrives,
    what a client gets from the coordinator (probed at once, from this thread)."""

    def __init__(self, sock: socket.socket, port: int, timeout: float = 60.0):
        self.sock, self.port = sock, port
        self.messages: list[str] = []
        self.at_ready: dict[str, object] = {}
        self.deadline = time.monotonic() + timeout
        self.thread = threading.Thread(target=self._until_ready, daemon=True)
        self.thread.start()

    def _until_ready(self) -> None:
        self.sock.settimeout(0.1)
        while time.monotonic() < self.deadline:
            try:
                message = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            self.messages.append(message)
            if "READY=1" in message.split("\n"):
                self._probe()
                return

    def _probe(self) -> None:
        try:
            connection = RawConnection(self.port)
        except OSError as exc:
            self.at_ready["connect"] = exc
            return
        try:
            self.at_ready["connect"] = "accepted"
            groups = one_group_per_partition()
            answer = connection.call(DESCRIBE_GROUPS, 0, {"groups": groups})
            self.at_ready["errors"] = {ErrorCode(g.error_code).name for g in answer.groups}
        finally:
            connection.close()

    def wait_ready(self) -> None:
        self.thread.join(max(0.0, self.deadline - time.monotonic()))
        assert not self.thread.is_alive(), f"no READY=1 within the deadline; received {self.messages}"

    def next_message(self, timeout: float) -> str:
        message = receive(self.sock, timeout)
        self.messages.append(message)
        return message


def test_ready_once_serving_and_stopping_on_sigterm(zookeeper, tmp_path, notify_socket):
    sock, path = notify_socket
    process = CoordinatorProcess(zookeeper, tmp_path, env={"NOTIFY_SOCKET": path})
    watcher = Systemd(sock, process.port)
    try:
        process.start()  # returns at "group-partitions loaded" in the log
        watcher.wait_ready()
        # READY=1 is the first thing systemd hears, and only when clients are served: the
        # listener accepts and not one group-partition is still loading
        assert len(watcher.messages) == 1
        fields = watcher.messages[0].split("\n")
        assert fields[0] == "READY=1"
        assert fields[1].startswith(f"STATUS=serving on PLAINTEXT://{process.bootstrap}"), fields
        assert watcher.at_ready["connect"] == "accepted", watcher.at_ready
        assert watcher.at_ready["errors"] == {"NONE"}, watcher.at_ready

        process.process.send_signal(signal.SIGTERM)
        stopping = watcher.next_message(timeout=10).split("\n")
        assert stopping == ["STOPPING=1", "STATUS=stopping (SIGTERM)"]
        assert process.process.wait(timeout=30) == 0
        # nothing after STOPPING=1 (in particular no late READY=1)
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            sock.recv(4096)
    finally:
        process.stop()
