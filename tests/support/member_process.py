"""A group member running as a process of its own that prints JSON lines: {"assigned": [...]}
at every change of its assignment, {"count": N} (distinct values read) as that grows, and a
last {"read": N, "values": [...], "committed": {...}}: the contract of
tests/kafka/java/GroupConsumer.java, tests/support/pymember.py and tests/kafka/go's program.
`MemberProcess` follows those lines from a thread and stops the process through its stop
file (tests/support/members.py starts one of any client; tests/support/goclients.py one of
the Go clients with options of their own)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class MemberProcess:
    def __init__(self, name: str, command: list[str], log_path: Path, stop_file: Path | None):
        self.name = name
        self.log_path, self.stop_file = Path(log_path), stop_file
        self.assignments: list[list[str]] = []  # every assignment it reported, in order
        self.count = 0  # distinct records read, as it last said
        self.counts: list[tuple[float, int]] = []  # (time.monotonic() when said, count) of every count line
        self.result: dict | None = None
        self._changed = threading.Condition()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                            cwd=ROOT, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                fields = json.loads(line)
            except ValueError:
                continue
            with self._changed:
                if "assigned" in fields and self.result is None:
                    self.assignments.append(fields["assigned"])
                elif "count" in fields:
                    self.count = fields["count"]
                    self.counts.append((time.monotonic(), self.count))
                elif "read" in fields:
                    self.result = fields
                    self.count = len(set(fields["values"]))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def assigned(self) -> set[str]:
        with self._changed:
            return set(self.assignments[-1]) if self.assignments else set()

    def wait_for(self, condition, what: str = "the condition", timeout: float = 90.0) -> None:
        """Until `condition(self)` holds (checked at each line it prints, and twice a
        second); fails with its log if it ends first or `timeout` passes."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition(self):
                if not self._reader.is_alive() and self.result is None:
                    raise AssertionError(f"{self.name} ended ({self.process.poll()}) before {what}:\n"
                                         f"{self.log_tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.name} never reached {what} (assignments "
                                         f"{self.assignments[-3:]}):\n{self.log_tail()}")
                self._changed.wait(min(left, 0.5))

    def stop(self, timeout: float = 90.0) -> dict:
        """Asks it to stop (it commits, prints what it read, and closes); its last line."""
        assert self.stop_file is not None, "started without a stop file"
        Path(self.stop_file).touch()
        return self.finish(timeout)

    def finish(self, timeout: float = 90.0) -> dict:
        """Waits for it to end by itself; its last line."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not end in {timeout} s (read {self.count}, assignments "
                                 f"{self.assignments[-3:]}):\n{self.log_tail()}") from None
        self._reader.join(10)
        assert self.process.returncode == 0 and self.result is not None, \
            f"{self.name} exited {self.process.returncode} without its result:\n{self.log_tail()}"
        return self.result

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def log_tail(self, size: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-size:] if self.log_path.exists() else ""
