"""The event log: what happened to groups, one JSON object a line, for the fleet-wide
analysis (`groupkeeper analyze`). docs/events.md is the schema.

`emit` never blocks and never raises: it renders the line and queues it. One writer task
takes whatever is queued and appends it in a worker thread, so the event loop never waits
on the disk; it writes at most every FLUSH_INTERVAL, so that a busy coordinator pays one
thread handoff for many lines rather than one per line. Files are `events-<instance>-<opened, UTC>.jsonl` under the events directory;
a file is closed when it reaches `max_bytes` or `max_age` seconds, and then gzipped in the
same thread when `compress` is set (the file being written is always plain JSON lines, so
a crash leaves at most one unfinished line to skip). When the disk is full or the directory
unwritable, the lines of that batch are dropped and counted, a partly written batch is cut
back off, and the coordinator goes on serving; the next batch tries again.
"""

from __future__ import annotations

import gzip
import os
import shutil
import time
from collections import deque
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import orjson
import trio

from . import logs, metrics

SCHEMA_VERSION = 1
FLUSH_INTERVAL = 0.05  # seconds between writes at most: lines wait that long, at worst


def timestamp(epoch_s: float) -> str:
    """RFC 3339, UTC, milliseconds: 2026-11-23T07:58:01.123Z."""
    return timestamp_ms(int(epoch_s * 1000))


def timestamp_ms(epoch_ms: int) -> str:
    """`timestamp` of a time in milliseconds; the date and time of day rendered once per second."""
    return f"{_second(epoch_ms // 1000)}{epoch_ms % 1000:03d}Z"


@lru_cache(maxsize=1 << 12)
def _second(epoch_s: int) -> str:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.")


class EventSink(Protocol):
    def emit(self, type_: str, group: str | None, **fields: Any) -> None: ...


class _Discard:
    """Where events go when the event log is off (events_dir = "none")."""

    def emit(self, type_: str, group: str | None, **fields: Any) -> None:
        pass


DISCARD = _Discard()


class EventLog:
    def __init__(self, directory: Path, instance: int, *, max_bytes: int, max_age: float,
                 compress: bool, queue_limit: int):
        self.directory = Path(directory)
        self.instance = instance
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.compress = compress
        self.queue_limit = queue_limit
        self._queue: deque[bytes] = deque()
        self._wake = trio.Event()
        self._fd: int | None = None  # the file being written; only the worker thread touches it
        self._path: Path | None = None
        self._opened = 0.0  # trio's clock when the current file was opened
        self._size = 0
        self._failing = False
        self.log = logs.get("groupkeeper.events").bind(instance=instance)

    def emit(self, type_: str, group: str | None, **fields: Any) -> None:
        if len(self._queue) >= self.queue_limit:  # the writer is stuck: shed, do not grow
            metrics.EVENTS_DROPPED.labels("queue full").inc()
            return
        event = {"v": SCHEMA_VERSION, "ts": timestamp(time.time()), "instance": self.instance,
                 "type": type_, "group": group, **fields}
        self._queue.append(orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE))
        self._wake.set()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Write until cancelled; on the way out, write what is queued and close the file."""
        task_status.started()
        try:
            while True:
                with trio.move_on_after(self._until_rotation()):
                    await self._wake.wait()
                await trio.sleep(FLUSH_INTERVAL)  # let the lines of a busy moment gather
                self._wake = trio.Event()
                await self._flush()
        finally:
            await self._flush()
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._close, False)

    def _until_rotation(self) -> float:
        if self._fd is None:
            return float("inf")
        return max(0.0, self._opened + self.max_age - trio.current_time())

    async def _flush(self) -> None:
        lines = list(self._queue)
        self._queue.clear()
        with trio.CancelScope(shield=True):  # taken from the queue: written, whatever happens
            await trio.to_thread.run_sync(self._write, lines, trio.current_time())

    # -- in the worker thread -------------------------------------------------------------

    def _write(self, lines: list[bytes], now: float) -> None:
        try:
            if self._fd is not None and (self._size >= self.max_bytes or now - self._opened >= self.max_age):
                self._close(self.compress)
            if not lines:
                return
            if self._fd is None:
                self._open(now)
            data = b"".join(lines)
            try:
                written = 0
                while written < len(data):  # os.write may write part of it
                    written += os.write(self._fd, data[written:])
            except OSError:
                try:
                    os.ftruncate(self._fd, self._size)  # no half-written line stays behind
                except OSError:
                    self._close(False)  # then the next batch starts a new file
                raise
            self._size += len(data)
            metrics.EVENTS_WRITTEN.inc(len(lines))
            if self._failing:
                self._failing = False
                self.log.info("event log writable again", path=str(self._path))
        except OSError as exc:
            metrics.EVENTS_DROPPED.labels("write failed").inc(len(lines))
            if not self._failing:  # once per outage, not once per batch
                self._failing = True
                self.log.error("event log not writable; dropping events", error=str(exc),
                               directory=str(self.directory))

    def _open(self, now: float) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        opened = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        self._path = self.directory / f"events-{self.instance}-{opened}.jsonl"
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._opened, self._size = now, os.fstat(self._fd).st_size

    def _close(self, compress: bool) -> None:
        if self._fd is None:
            return
        fd, path = self._fd, self._path
        self._fd = self._path = None
        try:
            os.close(fd)
            if compress and path.stat().st_size:
                packed_path = path.with_name(path.name + ".gz")
                with open(path, "rb") as plain, gzip.open(f"{packed_path}.tmp", "wb") as packed:
                    shutil.copyfileobj(plain, packed)
                os.replace(f"{packed_path}.tmp", packed_path)
                path.unlink()
        except OSError as exc:  # the plain file stays: readers take both
            self.log.warning("could not close or compress an event file", path=str(path), error=str(exc))
