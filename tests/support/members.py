"""Group members of every client, driven alike: each is a process of its own (the Java
client's GroupConsumer.java, kafka-python and librdkafka through tests/support/pymember.py,
the Go clients' program) that prints {"assigned": [...]} at every change of its assignment,
{"count": N} (distinct values read) as that grows and a last {"read": N, "values": [...],
"committed": {...}} line.

`CLIENTS` names each client and protocol the conformance tests know (`MORE_CLIENTS`: others,
aiokafka, that other tests start); `Member` starts one
(a MemberProcess: it follows what the process prints and stops it through a stop file).

`copy_exactly_once` runs a client's exactly-once read-process-write loop (EosCopier.java,
tests/support/pycopier.py, the Go program's copier.go: one contract, EosCopier.java's) to its
end."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support import goclients, kafka as java
from tests.support.member_process import ROOT, MemberProcess


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
                 instance_id: str = "", session_timeout_ms: int = 10_000, strategy: str = "",
                 auto_commit_ms: int = 0):
        self.client = client
        self.stop_file = directory / f"stop-{group}-{instance_id or id(self)}"
        self.stop_file.unlink(missing_ok=True)
        command = self._command(bootstrap, group, topics, pattern, records, seconds, commit, instance_id,
                                session_timeout_ms, strategy, auto_commit_ms)
        super().__init__(client.name, command,
                         directory / f"member-{client.program}-{group}-{instance_id or id(self)}.log", self.stop_file)

    def _command(self, bootstrap, group, topics, pattern, records, seconds, commit, instance_id, session_ms,
                 strategy, auto_commit_ms) -> list[str]:
        program = self.client.program
        if program == "java":
            args = ["--pattern", pattern] if pattern else ["--topics", ",".join(topics)]
            args += ["--seconds", str(int(seconds)), "--stop-file", str(self.stop_file)]
            args += ["--records", str(records)] if records is not None else []
            args += ["--commit"] if commit else []
            props = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": self.client.protocol}
            if instance_id:
                props["group.instance.id"] = instance_id
            if auto_commit_ms:
                props.update({"enable.auto.commit": "true", "auto.commit.interval.ms": auto_commit_ms})
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
            if auto_commit_ms:
                raise ValueError("the Go members commit only as they stop (no auto_commit_ms)")
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
        args += ["--auto-commit-ms", str(auto_commit_ms)] if auto_commit_ms else []
        return [sys.executable, "-m", "tests.support.pymember", *args]


def copy_exactly_once(client: Client, bootstrap: str, group: str, source: str, sink: str, transactional_id: str,
                      records: int, directory: Path, *, abort_every: int = 3, batch: int = 10,
                      seconds: float = 90.0) -> dict:
    """The client's exactly-once loop, a member of `group`, copies `records` records of
    `source` to `sink`, `batch` at most a transaction, every `abort_every`th transaction
    aborted and the consumer rewound to the committed offsets; run to its end (killed at
    `seconds` + 30). Its last line ({"done": true, "copied", "transactions", "aborted",
    "failed"}), with "values": the input values it copied in committed transactions, in order,
    and "lines": every line. Fails, with its output and log, unless it copied them all."""
    program = client.program
    if program == "java":
        props = {"bootstrap.servers": bootstrap, "consumer.group.protocol": client.protocol,
                 # a poll's records are a transaction's: small batches, many transactions
                 "consumer.max.poll.records": batch}
        if client.protocol == "classic":
            props.update({"consumer.session.timeout.ms": 10_000, "consumer.heartbeat.interval.ms": 1000})
        command = java.java_command("EosCopier", "--input", source, "--output", sink, "--group", group,
                                    "--transactional-id", transactional_id, "--records", str(records),
                                    "--abort-every", str(abort_every), "--seconds", str(int(seconds)),
                                    *(f"{k}={v}" for k, v in props.items()))
    elif program in ("franz-go", "sarama"):
        command = goclients.go_copier_command(bootstrap, group, source, sink, transactional_id, records,
                                              {"franz-go": "franz"}.get(program, program), client.protocol,
                                              abort_every=abort_every, batch=batch, seconds=seconds)
    else:
        command = [sys.executable, "-m", "tests.support.pycopier", "--client", program, "--bootstrap", bootstrap,
                   "--group", group, "--protocol", client.protocol, "--input", source, "--output", sink,
                   "--transactional-id", transactional_id, "--records", str(records),
                   "--abort-every", str(abort_every), "--batch", str(batch), "--seconds", str(seconds)]
    log = directory / f"copier-{program}-{group}.log"
    with open(log, "wb") as stderr:
        try:
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                                  text=True, timeout=seconds + 30, cwd=ROOT)
            stdout, status = done.stdout, done.returncode
        except subprocess.TimeoutExpired as expired:  # run() has killed it
            stdout, status = expired.stdout or "", "killed"
            stdout = stdout.decode(errors="replace") if isinstance(stdout, bytes) else stdout
    log.with_suffix(".out").write_text(stdout)  # what it said, beside its log
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    last = next((line for line in reversed(lines) if "done" in line), {})  # its closing may say more after it
    assert status == 0 and last.get("done") is True, \
        f"{client.name}'s exactly-once loop exited {status}: {lines[-8:]}\n{log.read_text(errors='replace')[-6000:]}"
    return {**last, "values": [v for line in lines if "committed" in line for v in line["committed"]],
            "lines": lines}
