"""Shutdown with ZooKeeper gone, and the embedded ZooKeeper never outliving its instance:
real `groupkeeper run` processes, real ZooKeeper servers, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from coordinator.store.zkserver import ZooKeeperServer, ZooKeeperUnavailable, four_letter_word, free_port
from tests.support.coordinator_process import CoordinatorProcess

GRACE = 2.0  # shutdown_grace of the instances here
# docs/operations.md, "Shutdown": handing over (shutdown_grace), open connections
# (shutdown_grace + 1 s), leaving ZooKeeper (2 s); with the embedded ZooKeeper, up to 5 s
# more for it to exit
BOUND = 2 * GRACE + 1 + 2
EMBEDDED_BOUND = BOUND + 5
SLACK = 3.0  # an interpreter exiting on a busy machine; the bug was "still running 60 s later"


# -- processes, as /proc tells them -------------------------------------------------------


def _started(pid: int) -> str | None:
    """The process's start time (/proc/PID/stat's 22nd field); None if there is none, or
    only its zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _zookeeper_of(pid: int, timeout: float = 30.0) -> tuple[int, str]:
    """(pid, start time) of the ZooKeeper JVM `pid` runs as a child."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in _children(pid):
            try:
                if b"org.apache.zookeeper" in Path(f"/proc/{child}/cmdline").read_bytes():
                    return child, _started(child)
            except OSError:
                pass
        time.sleep(0.05)
    raise AssertionError(f"no ZooKeeper child of {pid} within {timeout}s")


def _wait_gone(pid: int, started: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _started(pid) != started:
            return True
        time.sleep(0.05)
    return False


def _kill_if_left(pid: int, started: str) -> None:
    """A test's own leftover (it found the pid itself a moment ago, and the start time says
    it is still that process): killed so that it cannot outlive the test."""
    if _started(pid) == started:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)


def _answers(port: int) -> bool:
    """Whether a ZooKeeper answers on `port` (a gone one refuses at once; a live one on a busy
    machine may take a while)."""
    try:
        return four_letter_word("127.0.0.1", port, b"ruok", timeout=5.0) == b"imok"
    except OSError:
        return False


# -- groupkeeper run with the embedded ZooKeeper --------------------------------------------


def _run_embedded(data_dir: Path, zk_port: int) -> tuple[subprocess.Popen, Path]:
    """`groupkeeper run` with its embedded ZooKeeper on `zk_port`, data in `data_dir`, its
    JSON log in a file; returns once it serves."""
    port = free_port()
    log_path, config = data_dir / f"groupkeeper-{port}.log", data_dir / f"groupkeeper-{port}.toml"
    config.write_text(f"shutdown_grace = {GRACE}\n")
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tools", "run", "--log-format", "json", "--config", str(config),
                                 "--listeners", f"PLAINTEXT://127.0.0.1:{port}",
                                 "--metrics-listen", f"127.0.0.1:{free_port()}",
                                 "--embedded-zookeeper-port", str(zk_port), "--data-dir", str(data_dir)],
                                stdout=log, stderr=log)
    try:
        _wait_log(proc, log_path, "group-partitions loaded")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, log_path


def _log(log_path: Path) -> list[dict]:
    """The JSON log's entries so far; a last line still being written is left for later."""
    entries = []
    for line in log_path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def _wait_log(proc: subprocess.Popen, log_path: Path, event: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in _log(log_path):
            if entry.get("event") == event:
                return entry
        if proc.poll() is not None:
            raise AssertionError(f"groupkeeper exited ({proc.returncode}) before {event!r}:\n"
                                 + log_path.read_text()[-3000:])
        time.sleep(0.05)
    raise AssertionError(f"no {event!r} within {timeout}s")


def _sigterm_exit_time(proc: subprocess.Popen, bound: float) -> float:
    """SIGTERM, and how long it took to exit; fails (and kills it) past `bound` + SLACK."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=bound + SLACK)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"groupkeeper still running {bound + SLACK:.0f}s after SIGTERM "
                             f"(documented bound {bound:.0f}s)") from None
    return time.monotonic() - started


# -- SIGTERM while ZooKeeper is unreachable -------------------------------------------------


@pytest.mark.parametrize("outage", ["paused", "killed"])
def test_sigterm_exits_within_the_bound_while_zookeeper_is_unreachable(tmp_path, outage):
    """paused: the server SIGSTOPped (connections open, nothing answered: a hung server, a
    partition dropping packets); killed: connections refused."""
    server = ZooKeeperServer(tmp_path / "zk", free_port())
    server.start()
    jvm = server.process.pid
    instance = CoordinatorProcess(server, tmp_path, shutdown_grace=GRACE)
    try:
        instance.start()
        if outage == "paused":
            os.kill(jvm, signal.SIGSTOP)
        else:
            server.kill()
        took = _sigterm_exit_time(instance.process, BOUND)
        assert instance.process.returncode == 0, instance.log_path.read_text()[-3000:]
        print(f"exit {took:.2f}s after SIGTERM, ZooKeeper {outage}")
        events = [entry["event"] for entry in instance.events()]
        assert "stopping" in events
    finally:
        if instance.process is not None and instance.process.poll() is None:
            instance.process.kill()
            instance.process.wait()
        if server.process is not None:
            os.kill(jvm, signal.SIGCONT)
        server.stop()


def test_sigterm_exits_within_the_bound_while_the_embedded_zookeeper_is_paused(tmp_path):
    """The embedded ZooKeeper SIGSTOPped: the instance stops anyway, and takes it down."""
    zk_port = free_port()
    proc, log_path = _run_embedded(tmp_path, zk_port)
    jvm, jvm_started = _zookeeper_of(proc.pid)
    try:
        os.kill(jvm, signal.SIGSTOP)
        took = _sigterm_exit_time(proc, EMBEDDED_BOUND)
        assert proc.returncode == 0, log_path.read_text()[-3000:]
        print(f"exit {took:.2f}s after SIGTERM, embedded ZooKeeper paused")
        assert _wait_gone(jvm, jvm_started, 5.0), "the embedded ZooKeeper outlived its instance"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill_if_left(jvm, jvm_started)


# -- the embedded ZooKeeper never outlives its instance -------------------------------------


def test_the_embedded_zookeeper_dies_with_a_sigkilled_instance(tmp_path):
    zk_port = free_port()
    proc, _ = _run_embedded(tmp_path, zk_port)
    jvm, jvm_started = _zookeeper_of(proc.pid)
    try:
        proc.kill()
        proc.wait()
        assert _wait_gone(jvm, jvm_started, 10.0), "the embedded ZooKeeper outlived its SIGKILLed instance"
        assert not _answers(zk_port)
    finally:
        _kill_if_left(jvm, jvm_started)


_LEFTOVER = """
import sys, threading, time
from coordinator.store.zkserver import ZooKeeperServer
# started from a thread other than the main one, which PR_SET_PDEATHSIG cannot tie it to:
# what a server started before it was set, or where it does not exist, is like
thread = threading.Thread(target=ZooKeeperServer(sys.argv[1], int(sys.argv[2])).start)
thread.start()
thread.join()
print("serving", flush=True)
time.sleep(3600)
"""


def _leave_a_zookeeper(data_dir: Path, port: int) -> tuple[int, str]:
    """A ZooKeeper on `data_dir` whose owner was SIGKILLed, leaving it running: its (pid,
    start time)."""
    owner = subprocess.Popen([sys.executable, "-c", _LEFTOVER, str(data_dir), str(port)],
                             stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    try:
        assert owner.stdout.readline().strip() == "serving"
        jvm, started = _zookeeper_of(owner.pid)
    finally:
        owner.kill()
        owner.wait()
    assert _answers(port) and _started(jvm) == started
    return jvm, started


def test_a_leftover_embedded_zookeeper_is_reaped_at_the_next_start(tmp_path):
    zk_port = free_port()
    jvm, jvm_started = _leave_a_zookeeper(tmp_path / "zookeeper", zk_port)
    proc = None
    try:
        proc, log_path = _run_embedded(tmp_path, zk_port)
        assert _started(jvm) != jvm_started, "the leftover ZooKeeper is still running"
        assert _zookeeper_of(proc.pid)[0] != jvm  # the instance's own, on the same port
        reaped = [entry for entry in _log(log_path) if entry.get("event") == "leftover zookeeper stopped"]
        assert [entry["pid"] for entry in reaped] == [jvm]
        assert _sigterm_exit_time(proc, EMBEDDED_BOUND) and proc.returncode == 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill_if_left(jvm, jvm_started)


def _pid_file(data_dir: Path) -> Path:
    return data_dir / "zookeeper.pid"


def test_a_stranger_named_by_a_stale_pid_file_is_left_alone(tmp_path):
    """The PID file of a ZooKeeper long gone names processes that are not it: one that got
    its pid later (here: a process whose command line looks like that ZooKeeper's, but whose
    start time differs from the file's), another program (an operator's `tail -f` of the
    data dir's zoo.cfg), and another data dir's ZooKeeper. None of them is killed, and the
    instance starts."""
    data_dir = tmp_path / "instance"
    (data_dir / "zookeeper").mkdir(parents=True)
    config = data_dir / "zookeeper" / "zoo.cfg"
    config.touch()
    impostor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)",
                                 "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)])
    stranger = subprocess.Popen(["tail", "-f", str(config)], stdout=subprocess.DEVNULL)
    other_zk = ZooKeeperServer(tmp_path / "other", free_port())
    other_zk.start()
    other_jvm = other_zk.process.pid
    dead_owner = subprocess.Popen(["true"])
    dead_owner.wait()  # a pid that was a process, its owner's, now gone
    try:
        for pid, started in [(impostor.pid, "1"), (stranger.pid, _started(stranger.pid)),
                             (other_jvm, _started(other_jvm))]:
            _pid_file(data_dir / "zookeeper").write_text(json.dumps(
                {"pid": pid, "started": started, "owner": dead_owner.pid, "owner_started": "1"}) + "\n")
            proc, _ = _run_embedded(data_dir, free_port())
            try:
                assert impostor.poll() is None, "a process that got a leftover's pid later was killed"
                assert stranger.poll() is None, "another program named by a stale PID file was killed"
                assert other_zk.process.poll() is None and _answers(other_zk.port), \
                    "another data dir's ZooKeeper was killed"
                assert _sigterm_exit_time(proc, EMBEDDED_BOUND) and proc.returncode == 0
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            assert not _pid_file(data_dir / "zookeeper").exists()  # removed by the orderly stop
    finally:
        for process in (impostor, stranger):
            process.kill()
            process.wait()
        other_zk.stop()


def test_a_zookeeper_whose_owner_lives_is_not_reaped(tmp_path):
    """Two servers on one data dir (two instances given the same data_dir): the second is
    refused, and the first, its owner alive, keeps serving."""
    first = ZooKeeperServer(tmp_path, free_port())
    first.start()
    try:
        second = ZooKeeperServer(tmp_path, free_port())
        try:
            with pytest.raises(ZooKeeperUnavailable, match="in use by ZooKeeper"):
                second.start()
        finally:
            second.stop()  # if it was started after all
        assert first.process.poll() is None and _answers(first.port)
    finally:
        first.stop()
    assert not _pid_file(tmp_path).exists()


def test_a_server_started_from_another_thread_is_not_killed_when_that_thread_ends(tmp_path):
    """PR_SET_PDEATHSIG fires when the *thread* that started the child ends: only the main
    thread's children get it, or a server started from a worker thread would die with it."""
    server = ZooKeeperServer(tmp_path, free_port())
    thread = threading.Thread(target=server.start)
    thread.start()
    thread.join()
    try:
        time.sleep(0.5)  # time for a SIGKILL to land, if one had been asked for
        assert server.process.poll() is None and _answers(server.port)
    finally:
        server.stop()
