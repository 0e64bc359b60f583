"""The Go clients for the tests: tests/kafka/go's program (franz-go and IBM sarama group
members with the contract of tests/kafka/java/GroupConsumer.java, and a franz-go producer),
built by `make install` into var/go/bin/goclients.

`go_group_read` runs one member to its end and returns its last line; `go_group_member`
starts one in the background (a mixed group's member, a `MemberProcess`: wait for what it
reports, then stop it with its stop file); `go_produce` produces numbered records with franz-go;
`go_copier_command` is either client's exactly-once loop (tests/support/members.py runs it).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.member_process import MemberProcess

ROOT = Path(__file__).resolve().parents[2]
BINARY = Path(os.environ.get("GROUPKEEPER_GOCLIENTS", ROOT / "var" / "go" / "bin" / "goclients"))


class GoClientsMissing(RuntimeError):
    pass


def binary() -> str:
    if not os.access(BINARY, os.X_OK):
        raise GoClientsMissing(f"the Go clients' program {BINARY} is not built: run `make install` "
                               "(its target go-clients builds tests/kafka/go)")
    return str(BINARY)


def go_command(bootstrap: str, group: str, topics: list[str] | tuple[str, ...] | str, records: int | None = None,
               client: str = "franz", protocol: str = "classic", *, seconds: float = 60.0,
               stop_file: Path | str | None = None, commit: bool = True, instance_id: str = "",
               strategy: str = "", session_timeout_ms: int = 10_000, kafka_version: str = "",
               pattern: str = "", verbose: bool = False) -> list[str]:
    """The command line of one group member (see tests/kafka/go/main.go for the flags)."""
    topics = topics if isinstance(topics, str) else ",".join(topics)
    command = [binary(), "--client", client, "--protocol", protocol, "--bootstrap", bootstrap, "--group", group,
               "--seconds", str(seconds), "--session-timeout-ms", str(session_timeout_ms)]
    command += ["--pattern", pattern] if pattern else ["--topics", topics]
    command += ["--records", str(records)] if records is not None else []
    command += ["--stop-file", str(stop_file)] if stop_file else []
    command += ["--commit"] if commit else []
    command += ["--instance-id", instance_id] if instance_id else []
    command += ["--strategy", strategy] if strategy else []
    command += ["--kafka-version", kafka_version] if kafka_version else []
    command += ["--verbose"] if verbose else []
    return command


def go_copier_command(bootstrap: str, group: str, source: str, sink: str, transactional_id: str, records: int,
                      client: str = "franz", protocol: str = "classic", *, abort_every: int = 0, batch: int = 10,
                      seconds: float = 90.0, verbose: bool = False) -> list[str]:
    """The command line of the client's exactly-once loop copying `source` to `sink` (see
    tests/kafka/go/copier.go)."""
    command = [binary(), "--client", client, "--protocol", protocol, "--bootstrap", bootstrap, "--group", group,
               "--topics", source, "--copy-to", sink, "--transactional-id", transactional_id,
               "--records", str(records), "--abort-every", str(abort_every), "--batch", str(batch),
               "--seconds", str(seconds)]
    return command + (["--verbose"] if verbose else [])


def lines_of(stream) -> Iterator[dict]:
    """The JSON objects a member prints, one a line (other lines skipped)."""
    for line in stream:
        try:
            printed = json.loads(line)
        except ValueError:
            continue
        if isinstance(printed, dict):
            yield printed


def go_group_read(bootstrap: str, group: str, topics, records: int | None, client: str = "franz",
                  protocol: str = "classic", timeout: float | None = None, log: Path | None = None,
                  **opts) -> dict:
    """Runs one member until it has read `records` (or its `seconds` pass), commits (unless
    commit=False) and closes; its last line, {"read", "values", "committed", "member",
    "generation"}, with "assignments": every assignment it reported, in order. `log`: a file
    for its stderr (the client's own log), else it is kept for the error."""
    command = go_command(bootstrap, group, topics, records, client, protocol, **opts)
    timeout = timeout if timeout is not None else opts.get("seconds", 60.0) + 60.0
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if log is not None:
        Path(log).write_text(done.stderr)
    printed = list(lines_of(done.stdout.splitlines()))
    results = [p for p in printed if "read" in p]
    if done.returncode != 0 or not results:
        raise AssertionError(f"goclients --client {client} --protocol {protocol} exited {done.returncode}:\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    last = max(i for i, p in enumerate(printed) if "read" in p)
    return {**printed[last], "assignments": [p["assigned"] for p in printed[:last] if "assigned" in p]}


def go_group_member(bootstrap: str, group: str, topics, records: int | None = None, client: str = "franz",
                    protocol: str = "classic", *, log: Path, stop_file: Path | None = None, **opts) -> MemberProcess:
    """One member started in the background, for mixed groups: its stderr (the client's log)
    in `log`; with `stop_file` (default: beside the log), `stop()` ends it."""
    stop_file = Path(stop_file) if stop_file else Path(log).with_suffix(".stop")
    stop_file.unlink(missing_ok=True)
    command = go_command(bootstrap, group, topics, records, client, protocol, stop_file=stop_file, **opts)
    return MemberProcess(f"goclients --client {client} --protocol {protocol}", command, log, stop_file)


def go_produce(bootstrap: str, topic: str, records: int, partitions: int = 0, prefix: str = "go",
               timeout: float = 120.0) -> dict[int, int]:
    """Produces `records` values "PREFIX-i" with franz-go (acks=all), record i to partition
    i % `partitions` when given; how many each partition took."""
    command = [binary(), "--produce", str(records), "--bootstrap", bootstrap, "--topics", topic,
               "--partitions", str(partitions), "--prefix", prefix]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    printed = [p for p in lines_of(done.stdout.splitlines()) if "acked" in p]
    if done.returncode != 0 or not printed or printed[-1]["acked"] != records:
        raise AssertionError(f"goclients --produce exited {done.returncode}:\n{done.stdout[-2000:]}\n"
                             f"{done.stderr[-6000:]}")
    return {int(p): n for p, n in printed[-1]["partitions"].items()}
