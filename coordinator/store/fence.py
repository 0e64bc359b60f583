"""Ownership of a group-partition, and the fence every owner's write carries.

Each group-partition has a persistent epoch znode; its ZooKeeper version *is* the epoch.
Taking ownership creates the ephemeral owner znode and bumps the epoch in one multi(), so
at most one instance holds a given epoch. Every write of an owner is a multi() that begins
with a check of the epoch znode at the owner's version and a check that its owner znode
still exists: once another instance has taken over (and bumped the epoch), or the owner's
session has ended (and its ephemeral owner znode with it, even if no one has taken over
yet), the old owner's writes fail whole and land nothing — the pattern Kafka's controller
uses with its epoch znode. A check of the owner znode alone would not do: a successor's
owner znode is recreated at version 0 and would pass.

The epoch znode's data says who held the group-partition last and whether it let go in
order (`released_ms`) or went without releasing (its session ended): how a new owner tells a
handover from a failover.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kazoo.exceptions import (BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError,
                              OperationTimeoutError, RolledBackError, RuntimeInconsistency,
                              SessionExpiredError)

from . import layout
from .bridge import ZooKeeperBridge, count_written
from .errors import NotOwner, RolledBack, StoreError, StoreUnavailable


_UNCONFIRMED = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)


@dataclass(frozen=True)
class Fence:
    partition: int
    epoch: int  # the version of the epoch znode this owner set

    @property
    def path(self) -> str:
        return layout.epoch_path(self.partition)

    def transaction(self, zk: ZooKeeperBridge):
        """A multi() beginning with the fence's checks; commit it with `fenced_commit`."""
        txn = zk.client.transaction()
        txn.check(self.path, self.epoch)
        txn.check(layout.owner_path(self.partition), 0)  # the owner znode is never rewritten
        return txn


@dataclass(frozen=True)
class Previous:
    """Who held a group-partition before, as its epoch znode tells."""
    instance: int | None  # None: never held
    released_ms: int | None  # wall-clock ms of an orderly release; None: its owner went without one


async def acquire(zk: ZooKeeperBridge, partition: int, instance: int) -> tuple[Fence, Previous]:
    """Take ownership of `partition`; raises NotOwner while another instance holds it."""
    epoch_path = layout.epoch_path(partition)
    try:
        await zk.create(epoch_path, b"", makepath=True)
    except NodeExistsError:
        pass
    while True:
        data, stat = await zk.get(epoch_path)
        epoch = stat.version + 1
        txn = zk.client.transaction()
        txn.create(layout.owner_path(partition), layout.encode({"instance": instance, "epoch": epoch}),
                   ephemeral=True)
        txn.set_data(epoch_path, layout.encode({"instance": instance, "acquired_ms": _now_ms()}),
                     version=stat.version)
        results = await _results(zk, txn.commit_async())
        if isinstance(results[0], NodeExistsError):
            raise NotOwner(f"group-partition {partition} is owned by another instance")
        if isinstance(results[1], BadVersionError):
            continue  # another instance bumped the epoch between our read and our multi
        _raise_first_error(results)
        return Fence(partition, epoch), _previous(data)


def _previous(data: bytes) -> Previous:
    try:
        record = layout.decode(data) if data else {}
        return Previous(record.get("instance"), record.get("released_ms"))
    except (ValueError, AttributeError):
        return Previous(None, None)


async def release(zk: ZooKeeperBridge, fence: Fence, instance: int, stopped_ms: int | None = None) -> None:
    """Give ownership up in order: delete the owner znode and record the release (when the
    owner stopped serving, `stopped_ms`, default now) in the epoch znode, which moves the
    epoch on; only if the fence still holds."""
    txn = fence.transaction(zk)
    txn.delete(layout.owner_path(fence.partition))
    txn.set_data(fence.path, layout.encode({"instance": instance, "released_ms": stopped_ms or _now_ms()}),
                 version=fence.epoch)
    await fenced_commit(zk, fence, txn)


async def fenced_commit(zk: ZooKeeperBridge, fence: Fence, txn) -> None:
    """Commit `txn`, begun with `fence.transaction()`."""
    count_written(txn.operations)
    await confirm(zk, fence, txn.commit_async())


async def confirm(zk: ZooKeeperBridge, fence: Fence, submitted) -> None:
    """Wait for a submitted fenced multi() (`txn.commit_async()`)."""
    check(fence, await _results(zk, submitted))


def check(fence: Fence, outcome) -> None:
    """Raise what the outcome of a fenced multi(), or of one group-partition's part of one,
    means: its result list, or the exception kazoo met (no answer: the outcome is unknown).
    kazoo reports a failed op in the result list rather than raising, so every result is
    inspected: in a failed multi(), the ops before the one that failed read back as rolled
    back, those after it as a runtime inconsistency."""
    if isinstance(outcome, BaseException):
        raise StoreUnavailable(f"ZooKeeper did not confirm the write: {type(outcome).__name__}")
    if any(isinstance(r, (BadVersionError, NoNodeError)) for r in outcome[:2]):
        raise NotOwner(f"group-partition {fence.partition}: epoch {fence.epoch} is fenced off")
    if outcome and all(isinstance(r, (RolledBackError, RuntimeInconsistency)) for r in outcome):
        raise RolledBack(f"group-partition {fence.partition}: rolled back with another's write")
    _raise_first_error(outcome)


async def _results(zk: ZooKeeperBridge, submitted) -> list:
    try:
        return await zk.wait(submitted)
    except _UNCONFIRMED as exc:
        raise StoreUnavailable(f"ZooKeeper did not confirm the write: {type(exc).__name__}") from None


def _raise_first_error(results: list) -> None:
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, (RolledBackError, RuntimeInconsistency)):
            raise StoreError(f"ZooKeeper refused the write: {type(result).__name__}")


def _now_ms() -> int:
    return int(time.time() * 1000)
