"""Group members of every client, driven alike: each is a process of its own (the Java
client's GroupConsumer.java, kafka-python and librdkafka through tests/support/pymember.py,
the Go clients' program) that prints {"assigned": [...]} at every change of its assignment,
{"count": N} (distinct values read) as that grows and a last {"read": N, "values": [...], "committed": {...}} line.

`CLIENTS` names each client and protocol the conformance tests know; `Member` starts one,
follows what it prints, and stops it (a stop file, then its own close)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support import goclients, kafka as java

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Client:
    name: str  # the conformance matrix's row: client (protocol)
    program: str  # java, kafka-python, librdkafka, franz-go, sarama
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


class Member:
    """One member of `group` reading `topics` (or the topics matching `pattern`) from
    `bootstrap`: started at once; `records`: it stops by itself once it has read that many."""

    def __init__(self, client: Client, bootstrap: str, group: str, directory: Path, topics: tuple[str, ...] = (),
                 pattern: str = "", records: int | None = None, seconds: float = 120.0, commit: bool = True,
                 instance_id: str = "", session_timeout_ms: int = 10_000, strategy: str = ""):
        self.client = client
        self.stop_file = directory / f"stop-{group}-{instance_id or id(self)}"
        self.stop_file.unlink(missing_ok=True)
        self.log_path = directory / f"member-{client.program}-{group}-{instance_id or id(self)}.log"
        command = self._command(bootstrap, group, topics, pattern, records, seconds, commit, instance_id,
                                session_timeout_ms, strategy)
        self.assignments: list[list[str]] = []  # every assignment it reported, in order
        self.result: dict | None = None
        self.count = 0  # distinct records read, as it last said
        self._changed = threading.Condition()
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                        cwd=ROOT, text=True)
        log.close()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

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

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                fields = json.loads(line)
            except ValueError:
                continue
            with self._changed:
                if "assigned" in fields:
                    self.assignments.append(fields["assigned"])
                elif "count" in fields:
                    self.count = fields["count"]
                elif "read" in fields:
                    self.result = fields
                    self.count = len(set(fields["values"]))
                self._changed.notify_all()

    @property
    def assigned(self) -> set[str]:
        with self._changed:
            return set(self.assignments[-1]) if self.assignments else set()

    def wait_for(self, condition, timeout: float = 90.0, what: str = "the condition") -> None:
        """Until `condition(self)` holds; fails with the member's log if it exits first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition(self):
                if self.process.poll() is not None and self.result is None and not self._reader.is_alive():
                    raise AssertionError(f"{self.client.name} exited {self.process.returncode} before "
                                         f"{what}:\n{self.log_tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.client.name} never reached {what} (assignments "
                                         f"{self.assignments[-3:]}):\n{self.log_tail()}")
                self._changed.wait(min(left, 0.5))

    def stop(self, timeout: float = 90.0) -> dict:
        """Asks it to stop (it commits, prints what it read, and closes); its last line."""
        self.stop_file.touch()
        return self.finish(timeout)

    def finish(self, timeout: float = 90.0) -> dict:
        """Waits for it to end by itself; its last line."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"{self.client.name} did not end in {timeout} s:\n{self.log_tail()}") from None
        self._reader.join(10)
        assert self.result is not None, f"{self.client.name} exited {self.process.returncode} " \
                                        f"without its result:\n{self.log_tail()}"
        return self.result

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def log_tail(self, size: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-size:] if self.log_path.exists() else ""
