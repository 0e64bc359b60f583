"""Group members of every client, driven alike: each is a process of its own (the Java
client's GroupConsumer.java, kafka-python and librdkafka through tests/support/pymember.py,
the Go clients' program) that prints {"assigned": [...]} at every change of its assignment,
{"count": N} (distinct values read) as that grows and a last {"read": N, "values": [...],
"committed": {...}} line.

`CLIENTS` names each client and protocol the conformance tests know (`MORE_CLIENTS`: others,
aiokafka, that other tests start); `Member` starts one
(a MemberProcess: it follows what the process prints and stops it through a stop file)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support import goclients, kafka as java
from tests.support.member_process import MemberProcess


@dataclass(frozen=True)
class Client:
    name: str  # the conformance matrix's row: client (protocol)
    program: str  # java, kafka-python, librdkafka, aiokafka, franz-go, sarama
    protocol: str  # classic or consumer (KIP-848)


CLIENTS = {c.name: c for c in [
    Client("kafka-python (classic)", "kafka-python", "classic"),
    Client("librdkafka (classic)", "librdkafka", "classic"),
    Client("librdkafka (consumer)", "librdkafka", "consumer"),
    Client("Java (classic)", "java", "classic"),
    Client("Java (consumer)", "java", "consumer"),
    Client("franz-go (classic)", "franz-go", "classic"),
    Client("franz-go (consumer)", "franz-go", "consumer"),
    Client("sarama (classic)", "sarama", "classic"),
]}
# Clients the conformance matrix does not run (yet), for tests of their own to start
# (tests/tansu/test_static_rejoin.py)
MORE_CLIENTS = {c.name: c for c in [
    Client("aiokafka (classic)", "aiokafka", "classic"),
]}


class Member(MemberProcess):
    """One member of `group` reading `topics` (or the topics matching `pattern`) from
    `bootstrap`: started at once; `records`: it stops by itself once it has read that many."""

    def __init__(self, client: Client, bootstrap: str, group: str, directory: Path, topics: tuple[str, ...] = (),
                 pattern: str = "", records: int | None = None, seconds: float = 120.0, commit: bool = True,
                 instance_id: str = "", session_timeout_ms: int = 10_000, strategy: str = ""):
        self.client = client
        self.stop_file = directory / f"stop-{group}-{instance_id or id(self)}"
        self.stop_file.unlink(missing_ok=True)
        command = self._command(bootstrap, group, topics, pattern, records, seconds, commit, instance_id,
                                session_timeout_ms, strategy)
        super().__init__(client.name, command,
                         directory / f"member-{client.program}-{group}-{instance_id or id(self)}.log", self.stop_file)

    def _command(self, bootstrap, group, topics, pattern, records, seconds, commit, instance_id, session_ms,
                 strategy) -> list[str]:
        program = self.client.program
        if program == "java":
            args = ["--pattern", pattern] if pattern else ["--topics", ",".join(topics)]
            args += ["--seconds", str(int(seconds)), "--stop-file", str(self.stop_file)]
            args += ["--records", str(records)] if records is not None else []
            args += ["--commit"] if commit else []
            props = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": self.client.protocol}
            if instance_id:
                props["group.instance.id"] = instance_id
            if self.client.protocol == "classic":
                props.update({"session.timeout.ms": session_ms, "heartbeat.interval.ms": min(1000, session_ms // 3)})
                if strategy:
                    props["partition.assignment.strategy"] = {
                        "range": "org.apache.kafka.clients.consumer.RangeAssignor",
                        "roundrobin": "org.apache.kafka.clients.consumer.RoundRobinAssignor",
                        "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
                    }[strategy]
            return java.java_command("GroupConsumer", *args, *(f"{k}={v}" for k, v in props.items()))
        if program in ("franz-go", "sarama"):
            return goclients.go_command(bootstrap, group, topics, records, {"franz-go": "franz"}.get(program, program),
                                        self.client.protocol, seconds=seconds, stop_file=self.stop_file,
                                        commit=commit, instance_id=instance_id, strategy=strategy,
                                        session_timeout_ms=session_ms, pattern=pattern)
        args = ["--client", program, "--bootstrap", bootstrap, "--group", group, "--protocol", self.client.protocol,
                "--seconds", str(seconds), "--stop-file", str(self.stop_file),
                "--session-timeout-ms", str(session_ms)]
        args += ["--pattern", pattern] if pattern else ["--topics", ",".join(topics)]
        args += ["--records", str(records)] if records is not None else []
        args += ["--commit"] if commit else []
        args += ["--instance-id", instance_id] if instance_id else []
        args += ["--strategy", strategy] if strategy else []
        return [sys.executable, "-m", "tests.support.pymember", *args]

