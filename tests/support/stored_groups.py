"""What a group runtime stored, kept as PartitionStore keeps it: each group's record and a
consumer group's member records, a write applying only what it carries. A test's `persist`."""

from __future__ import annotations

import trio

from coordinator.groups.snapshot import assemble_consumer
from coordinator.store.errors import StoreUnavailable


class StoredGroups:
    def __init__(self):
        self.records: dict[str, dict] = {}
        self.members: dict[str, dict[str, dict]] = {}
        self.written: list[dict] = []  # after each write, the group as a reader would find it
        self.writes: list[tuple[str, bool, int]] = []  # (group, with its record, member records written)
        self.gate: trio.Event | None = None  # set: writes wait for it
        self.fail = False

    async def __call__(self, group_id: str, data: dict | None, members: dict[str, dict | None] | None = None) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise StoreUnavailable("disconnected")
        self.writes.append((group_id, data is not None, len(members or {})))
        if data is not None:
            self.records[group_id] = data
        if members is None:
            self.members.pop(group_id, None)
        else:
            stored = self.members.setdefault(group_id, {})
            for member, record in members.items():
                if record is None:
                    stored.pop(member, None)
                else:
                    stored[member] = record
        self.written.append(self.group(group_id))

    def group(self, group_id: str) -> dict:
        """The group's stored records, as a new owner assembles them."""
        return assemble_consumer(self.records[group_id], self.members.get(group_id, {}))
