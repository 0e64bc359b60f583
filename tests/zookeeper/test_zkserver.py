"""The ZooKeeper server from Debian's packages: started, used, crashed and restarted."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from kazoo.client import KazooClient

from coordinator.store.zkserver import ZooKeeperServer, ZooKeeperUnavailable, four_letter_word
from coordinator.store.zkserver import free_port


def test_the_fixture_server_answers_and_stores(zookeeper):
    assert four_letter_word(zookeeper.host, zookeeper.port, b"ruok") == b"imok"
    client = KazooClient(hosts=zookeeper.connect_string)
    client.start(timeout=10)
    try:
        client.ensure_path("/zkserver-test")
        client.set("/zkserver-test", b"hello")
        assert client.get("/zkserver-test")[0] == b"hello"
    finally:
        client.stop()
        client.close()


def test_start_returns_once_the_server_serves(tmp_path):
    """Not at its first "imok", which comes before it has loaded its data (a session asked for
    then waits for the load, however long it takes; kazoo gives up after 10 s)."""
    server = ZooKeeperServer(tmp_path, free_port(), tick_ms=200)
    server.start()
    try:
        assert b"Mode: standalone" in four_letter_word(server.host, server.port, b"srvr")
    finally:
        server.stop()


def test_data_survives_a_crash_and_restart(tmp_path):
    server = ZooKeeperServer(tmp_path, free_port(), tick_ms=200)
    server.start()
    try:
        with _client(server) as client:
            client.create("/durable", b"committed")
        server.kill()
        server.start()
        # a new session: the old one may expire while the server restarts (4 s at this tick)
        with _client(server) as client:
            assert client.get("/durable")[0] == b"committed"
    finally:
        server.stop()


@contextlib.contextmanager
def _client(server: ZooKeeperServer):
    client = KazooClient(hosts=server.connect_string)
    try:
        client.start(timeout=10)
        yield client
    finally:
        client.stop()
        client.close()


def test_cli_runs_in_foreground_and_stops_on_sigterm(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tools", "zookeeper", "--data-dir",
                             str(tmp_path), "--port", str(port), "--tick-ms", "200"],
                            stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while "serving on" not in line:
            line = proc.stderr.readline()
            assert line, "the command ended before ZooKeeper was serving"
        assert four_letter_word("127.0.0.1", port, b"ruok") == b"imok"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        four_letter_word("127.0.0.1", port, b"ruok", timeout=0.5)
        raise AssertionError("ZooKeeper is still answering after the command stopped")
    except OSError:
        pass


def test_missing_java_is_one_clear_line(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no java on this PATH
    done = subprocess.run([sys.executable, "-m", "tools", "zookeeper", "--data-dir",
                           str(tmp_path / "zk"), "--port", str(free_port())],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "java is not installed" in done.stderr and "apt-get install zookeeper" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_port_another_zookeeper_answers_on_is_refused_not_shared(zookeeper, tmp_path):
    """An embedded ZooKeeper left running by a killed groupkeeper must not stand in for the
    next one's: the new server could not bind, and the coordinator would use the old one."""
    second = ZooKeeperServer(tmp_path, zookeeper.port)
    try:
        second.start()
    except ZooKeeperUnavailable as exc:
        assert f"a ZooKeeper already answers on {zookeeper.connect_string}" in str(exc)
    else:
        second.stop()
        raise AssertionError("a second server was started on a port in use")
    assert second.process is None
    assert four_letter_word("127.0.0.1", zookeeper.port, b"ruok") == b"imok"
