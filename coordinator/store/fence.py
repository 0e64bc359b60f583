"""Ownership of a group-partition, and the fence every owner's write carries.

Each group-partition has a persistent epoch znode; its ZooKeeper version *is* the epoch.
Taking ownership creates the ephemeral owner znode and bumps the epoch in one multi(), so
at most one instance holds a given epoch. Every write of an owner is a multi() that begins
with a check of the epoch znode at the owner's version: once another instance has taken
over (and bumped the epoch), the old owner's writes fail whole and land nothing — the
pattern Kafka's controller uses with its epoch znode. A check of the ephemeral owner znode
alone would not do: a successor's owner znode is recreated at version 0 and would pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from kazoo.exceptions import (BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError,
                              OperationTimeoutError, RolledBackError, SessionExpiredError)

from . import layout
from .bridge import ZooKeeperBridge


class NotOwner(Exception):
    """This instance does not, or no longer, own the group-partition: NOT_COORDINATOR."""


class StoreUnavailable(Exception):
    """ZooKeeper did not confirm the write (connection lost, suspended, timed out): the
    outcome is unknown, so nothing is acknowledged and the client retries."""


class StoreError(Exception):
    """A write that ZooKeeper refused for a reason other than fencing."""


_UNCONFIRMED = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)


@dataclass(frozen=True)
class Fence:
    partition: int
    epoch: int  # the version of the epoch znode this owner set

    @property
    def path(self) -> str:
        return layout.epoch_path(self.partition)


async def acquire(zk: ZooKeeperBridge, partition: int, owner_data: dict) -> Fence:
    """Take ownership of `partition`; raises NotOwner while another instance holds it."""
    epoch_path = layout.epoch_path(partition)
    try:
        await zk.create(epoch_path, b"", makepath=True)
    except NodeExistsError:
        pass
    while True:
        stat = await zk.exists(epoch_path)
        epoch = stat.version + 1
        txn = zk.client.transaction()
        txn.create(layout.owner_path(partition), layout.encode({**owner_data, "epoch": epoch}),
                   ephemeral=True)
        txn.set_data(epoch_path, b"", version=stat.version)
        results = await _results(zk, txn.commit_async())
        if isinstance(results[0], NodeExistsError):
            raise NotOwner(f"group-partition {partition} is owned by another instance")
        if isinstance(results[1], BadVersionError):
            continue  # another instance bumped the epoch between our read and our multi
        _raise_first_error(results)
        return Fence(partition, epoch)


async def release(zk: ZooKeeperBridge, fence: Fence) -> None:
    """Give ownership up: delete the owner znode, if the fence still holds."""
    txn = zk.client.transaction()
    txn.check(fence.path, fence.epoch)
    txn.delete(layout.owner_path(fence.partition))
    await fenced_commit(zk, fence, txn)


async def fenced_commit(zk: ZooKeeperBridge, fence: Fence, txn) -> None:
    """Commit `txn`, whose first op must be the fence's check."""
    await confirm(zk, fence, txn.commit_async())


async def confirm(zk: ZooKeeperBridge, fence: Fence, submitted) -> None:
    """Wait for a submitted fenced multi() (`txn.commit_async()`). kazoo reports a failed op
    in the result list rather than raising, so every result is inspected."""
    results = await _results(zk, submitted)
    if isinstance(results[0], (BadVersionError, NoNodeError)):
        raise NotOwner(f"group-partition {fence.partition}: epoch {fence.epoch} is fenced off")
    _raise_first_error(results)


async def _results(zk: ZooKeeperBridge, submitted) -> list:
    try:
        return await zk.wait(submitted)
    except _UNCONFIRMED as exc:
        raise StoreUnavailable(f"ZooKeeper did not confirm the write: {type(exc).__name__}") from None


def _raise_first_error(results: list) -> None:
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
            raise StoreError(f"ZooKeeper refused the write: {type(result).__name__}")
