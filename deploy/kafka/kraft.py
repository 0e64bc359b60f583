#!/usr/bin/env python3
"""A local Apache Kafka cluster in KRaft mode, from the jars `make install` caches
(deploy/kafka/pom.xml -> var/kafka/libs): one node, or three, each a combined broker and
controller, on free loopback ports, with storage formatted for the run in a folder of its
own, a bounded heap and its logs beside its data. Python's standard library only: it needs
neither groupkeeper nor its virtualenv.

    deploy/kafka/kraft.py start [--nodes 3] [--dir DIR]       # until Ctrl-C
    deploy/kafka/kraft.py run [--nodes 1] [--port 19092] -- COMMAND ...
    deploy/kafka/kraft.py tool kafka-consumer-groups --bootstrap-server HOST:PORT --list

`run` starts the cluster, runs COMMAND with KAFKA_BOOTSTRAP set (`make run KAFKA=1` fronts
it with groupkeeper this way) and stops the cluster when COMMAND ends. `tool` runs one of
Kafka's command-line tools by its script's name. The tests use the class `KraftCluster`.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBS = Path(os.environ.get("GROUPKEEPER_KAFKA_LIBS", ROOT / "var" / "kafka" / "libs"))
VERSION = "4.4.0"

# Kafka's scripts and the classes they run (bin/kafka-*.sh in Kafka's distribution).
TOOLS = {
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
}

# A tool's JVM: small and quick to start (it runs for seconds).
TOOL_JVM = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
            "-Djava.awt.headless=true"]

_LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""

_TOOL_LOG4J = """\
status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
"""


class KafkaError(Exception):
    """A node that would not format, start or stop; the message names its log."""


def new_cluster_id() -> str:
    """A random cluster id as Kafka writes them (a UUID in URL-safe base64), never one that
    starts with "-": kafka-storage would read that as an option (1 start in 64 failed so)."""
    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))[0] == "-":
        pass
    return cluster_id


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def classpath() -> str:
    if not (LIBS / f"kafka_2.13-{VERSION}.jar").exists():
        raise KafkaError(f"Apache Kafka {VERSION}'s jars are not in {LIBS}: run `make install`")
    return str(LIBS / "*")


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found:
        raise KafkaError("no java on PATH (Kafka 4.4 needs Java 17 or newer): run `make install`")
    return found


_LIBC = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the thread that started it ends, so that a
    test run killed outright leaves no JVM behind (Linux's PR_SET_PDEATHSIG)."""
    _LIBC.prctl(1, signal.SIGKILL)


def tool_jvm() -> list[str]:
    """A short-lived JVM's command line up to the main class: a tool's, or a test's program
    (its warnings on stderr, nothing on stdout)."""
    config = Path(tempfile.gettempdir()) / "groupkeeper-kafka-tool-log4j2.properties"
    if not config.exists():
        config.write_text(_TOOL_LOG4J)
    return [java(), *TOOL_JVM, f"-Dlog4j2.configurationFile={config}", "-cp", classpath()]


def tool_command(name: str, *args: str) -> list[str]:
    """The command line of Kafka's tool `name` (a script's name, as in TOOLS)."""
    return [*tool_jvm(), TOOLS[name], *args]


def run_tool(name: str, *args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(tool_command(name, *args), capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise KafkaError(f"{name} {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done


class Node:
    """One combined broker+controller: its ports, folder and process."""

    def __init__(self, node_id: int, directory: Path, host: str, port: int, controller_port: int):
        self.node_id = node_id
        self.directory = directory
        self.host = host
        self.port = port
        self.controller_port = controller_port
        self.process: subprocess.Popen | None = None
        self.startup_seconds: float | None = None
        # more plaintext listeners of its own, set before `start()`: name -> (port, the
        # address it advertises), e.g. one whose clients must come through a relay
        self.listeners: dict[str, tuple[int, str]] = {}

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def config(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class KraftCluster:
    """`nodes` combined nodes (ids 1..nodes) in `directory`. `start()` formats the storage
    (once) and returns when every node has said it started; `stop()` ends them (SIGTERM,
    then SIGKILL after `stop_timeout`). `kill(n)` and `start_node(n)` stop and start one
    node with its port and data kept. `heap_mb` bounds each node's heap."""

    def __init__(self, directory: Path | str, nodes: int = 1, heap_mb: int = 512, host: str = "127.0.0.1",
                 port: int | None = None, partitions: int = 3, stop_timeout: float = 30.0,
                 extra: dict[str, str] | None = None):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.heap_mb = heap_mb
        self.stop_timeout = stop_timeout
        self.cluster_id = new_cluster_id()
        self.nodes = [Node(i, self.directory / f"node-{i}", host,
                           port if (port and i == 1) else free_port(), free_port())
                      for i in range(1, nodes + 1)]
        replicas = min(3, nodes)
        self.settings = {
            "process.roles": "broker,controller",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.quorum.voters": ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in self.nodes),
            "num.partitions": str(partitions),
            "default.replication.factor": str(replicas),
            "min.insync.replicas": str(min(2, replicas)),
            "offsets.topic.replication.factor": str(replicas),
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": str(replicas),
            "transaction.state.log.min.isr": str(min(2, replicas)),
            "transaction.state.log.num.partitions": "10",
            "share.coordinator.state.topic.replication.factor": str(replicas),
            "share.coordinator.state.topic.min.isr": str(min(2, replicas)),
            "share.coordinator.state.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
            "log.segment.bytes": str(64 << 20),
            # a node that left comes back as leader of what it led, soon
            "leader.imbalance.check.interval.seconds": "5",
            **(extra or {}),
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id - 1]

    def _write_config(self, node: Node) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        more = node.listeners.items()
        lines = {**self.settings, "node.id": str(node.node_id),
                 "listeners": ",".join([f"PLAINTEXT://{node.host}:{node.port}",
                                        f"CONTROLLER://{node.host}:{node.controller_port}",
                                        *(f"{name}://{node.host}:{port}" for name, (port, _) in more)]),
                 "advertised.listeners": ",".join([f"PLAINTEXT://{node.address}",
                                                   *(f"{name}://{shown}" for name, (_, shown) in more)]),
                 "listener.security.protocol.map": ",".join([self.settings["listener.security.protocol.map"],
                                                             *(f"{name}:PLAINTEXT" for name in node.listeners)]),
                 "log.dirs": str(node.directory / "data")}
        node.config.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        (node.directory / "log4j2.properties").write_text(_LOG4J.format(log=node.log))

    def _format(self, node: Node) -> None:
        if (node.directory / "data" / "meta.properties").exists():
            return
        done = subprocess.run([java(), *TOOL_JVM, "-cp", classpath(), TOOLS["kafka-storage"], "format",
                               "--cluster-id", self.cluster_id, "--config", str(node.config), "--ignore-formatted"],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise KafkaError(f"formatting node {node.node_id} failed: {done.stdout}{done.stderr}")

    def _jvm(self, node: Node) -> list[str]:
        return [java(), f"-Xmx{self.heap_mb}m", f"-Xms{min(self.heap_mb, 256)}m", "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20", "-Xshare:auto", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={node.directory}", "-cp", classpath(), "kafka.Kafka", str(node.config)]

    def start(self, timeout: float = 120.0) -> None:
        """Formats and starts every node that is not running, in parallel; returns when all
        have said so in their logs."""
        for node in self.nodes:
            self._write_config(node)
        formatting = [n for n in self.nodes if not (n.directory / "data" / "meta.properties").exists()]
        for node in formatting:
            self._format(node)
        waiting = [n for n in self.nodes if not n.alive]
        for node in waiting:
            self._spawn(node)
        deadline = time.monotonic() + timeout
        for node in waiting:
            self._wait_started(node, deadline)

    def start_node(self, node_id: int, timeout: float = 120.0) -> None:
        node = self.node(node_id)
        if node.alive:
            return
        self._spawn(node)
        self._wait_started(node, time.monotonic() + timeout)

    def _spawn(self, node: Node) -> None:
        node.started_at = time.monotonic()
        node.mark = node.log.stat().st_size if node.log.exists() else 0
        out = open(node.directory / "stdout.log", "ab")
        node.process = subprocess.Popen(self._jvm(node), stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        out.close()

    def _wait_started(self, node: Node, deadline: float) -> None:
        while time.monotonic() < deadline:
            if node.process.poll() is not None:
                raise KafkaError(f"Kafka node {node.node_id} exited {node.process.returncode} while starting: "
                                 f"see {node.log} and {node.directory / 'stdout.log'}")
            if node.log.exists():
                with open(node.log, "rb") as log:
                    log.seek(node.mark)
                    if b"Kafka Server started" in log.read():
                        node.startup_seconds = time.monotonic() - node.started_at
                        return
            time.sleep(0.1)
        raise KafkaError(f"Kafka node {node.node_id} did not start in time: see {node.log}")

    def kill(self, node_id: int, signum: int = signal.SIGKILL) -> None:
        """Sends `signum` to one node (SIGKILL: and waits for it to be gone)."""
        node = self.node(node_id)
        if node.alive:
            node.process.send_signal(signum)
            if signum == signal.SIGKILL:
                node.process.wait()

    def stop_node(self, node_id: int) -> None:
        node = self.node(node_id)
        if not node.alive:
            return
        node.process.terminate()
        try:
            node.process.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait()

    def stop(self) -> None:
        """Every node at once: SIGTERM, then SIGKILL for those still there after the timeout."""
        alive = [n for n in self.nodes if n.alive]
        for node in alive:
            node.process.terminate()
        deadline = time.monotonic() + self.stop_timeout
        for node in alive:
            try:
                node.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait()

    def __enter__(self) -> KraftCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kraft.py", description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    for verb in ("start", "run"):
        sub = verbs.add_parser(verb)
        sub.add_argument("--nodes", type=int, choices=(1, 3), default=1 if verb == "run" else 3)
        sub.add_argument("--port", type=int, help="the first node's broker port (default: a free one)")
        sub.add_argument("--dir", help="where the nodes keep data and logs (default: a temporary folder, removed)")
        sub.add_argument("--heap-mb", type=int, default=512)
        if verb == "run":
            sub.add_argument("command", nargs=argparse.REMAINDER)
    tool = verbs.add_parser("tool")
    tool.add_argument("name", choices=sorted(TOOLS))
    tool.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    try:
        if options.verb == "tool":
            return subprocess.call(tool_command(options.name, *options.args))
        keep = options.dir is not None
        directory = Path(options.dir) if keep else Path(tempfile.mkdtemp(prefix="kraft-"))
        cluster = KraftCluster(directory, nodes=options.nodes, heap_mb=options.heap_mb, port=options.port)
        try:
            began = time.monotonic()
            cluster.start()
            print(f"Kafka {VERSION} ({options.nodes} node{'s' if options.nodes > 1 else ''}) ready in "
                  f"{time.monotonic() - began:.1f} s: bootstrap {cluster.bootstrap}; logs in {directory}", file=sys.stderr)
            if options.verb == "run":
                command = options.command[1:] if options.command[:1] == ["--"] else options.command
                if not command:
                    parser.error("run needs a command after --")
                child = subprocess.Popen(command, env={**os.environ, "KAFKA_BOOTSTRAP": cluster.bootstrap})
                signal.signal(signal.SIGTERM, lambda *_: child.terminate())
                try:
                    return child.wait()
                except KeyboardInterrupt:
                    child.send_signal(signal.SIGINT)
                    return child.wait()
            signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
            while all(n.alive for n in cluster.nodes):
                time.sleep(0.5)
            print("a Kafka node exited: see its server.log", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 0
        finally:
            cluster.stop()
            if not keep:
                shutil.rmtree(directory, ignore_errors=True)
    except KafkaError as error:
        print(f"kraft.py: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
