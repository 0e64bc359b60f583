"""Operators' changes made straight in ZooKeeper (ACLs with `groupkeeper acls`, users with
`groupkeeper users`), logged and put in the event log by every instance.

No request reaches an instance for such a change: the CLIs write Kafka's znodes
themselves. So each change also leaves a record (`store.blocking.ZooKeeperAdmin.audit`: who,
from which host, what, when) under `store.layout.AUDIT`, and `AuditWatch` follows those
records: each new one becomes a log line (`operator change`) and an `operator_change` event,
on every instance (each keeps its own event log; the record's `id`, its znode's sequence
number, is the same on all, so that a fleet's analysis counts a change once). Records that
were there when the instance started are history, not news: they are not repeated.
Bounded: the CLIs keep the newest AUDIT_KEEP records; a record over MAX_RECORD_BYTES, or
one that is not what a CLI writes, is logged as unreadable.
"""

from __future__ import annotations

import json

import trio

from .. import logs
from ..events import DISCARD, EventSink
from ..store.bridge import Refresher, ZooKeeperBridge
from ..store.layout import AUDIT

MAX_RECORD_BYTES = 64 * 1024


def _sequence(name: str) -> int:
    try:
        return int(name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


class AuditWatch:
    def __init__(self, zk: ZooKeeperBridge, events: EventSink = DISCARD):
        self.zk = zk
        self.events = events
        self.seen = -1  # the newest record's sequence number already told (or history)
        self._first = True
        self._refresher = Refresher(zk, self._refresh)
        self.log = logs.get("groupkeeper.audit")

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await self._refresher.run(task_status=task_status)

    async def _refresh(self) -> None:
        names = await self.zk.watched_children(AUDIT, self._refresher.watch) or []  # absent: watched to appear
        fresh = sorted((seq, name) for name in names if (seq := _sequence(name)) > self.seen)
        if self._first:  # what was there before this instance started is history
            self._first = False
            self.seen = max((seq for seq, _ in fresh), default=self.seen)
            return
        for seq, name in fresh:
            try:
                data, _ = await self.zk.get(f"{AUDIT}/{name}")
            except Exception as exc:  # noqa: BLE001 - pruned meanwhile, or not readable here
                self.log.info("operator change not readable", id=seq, error=type(exc).__name__)
                self.seen = seq
                continue
            self.seen = seq
            record = _record(data)
            if record is None:
                self.log.warning("operator change record unreadable", id=seq, bytes=len(data or b""))
                continue
            self.log.info("operator change", id=seq, **record)
            self.events.emit("operator_change", None, id=seq, **record)


def _record(data: bytes | None) -> dict | None:
    """The fields of a record as a CLI writes them, or None."""
    if not data or len(data) > MAX_RECORD_BYTES:
        return None
    try:
        raw = json.loads(data)
    except ValueError:
        return None
    if not isinstance(raw, dict) or not all(isinstance(raw.get(k), str) for k in ("by", "host", "kind")):
        return None
    return {"by": raw["by"][:256], "host": raw["host"][:256], "kind": raw["kind"][:64],
            "what": raw.get("what") if isinstance(raw.get("what"), dict) else {},
            "at_ms": raw.get("at_ms") if isinstance(raw.get("at_ms"), int) else None}
