"""Taking a group-partition from its previous owner: wait for it to let go (a handover) or for
its session to end (a failover), then acquire.

The previous owner's side of a handover is `Coordinator._keep`: it stops answering for the
group-partition, lets its writes in flight finish or fail (`PartitionStore.close`), and only
then releases the owner znode; the epoch fence makes sure that even a write it could not
stop never lands after the new owner's acquisition, which precedes its load.
"""

from __future__ import annotations

import trio
from kazoo.exceptions import NoNodeError

from ..store import layout
from ..store.bridge import ZooKeeperBridge
from ..store.errors import NotOwner
from ..store.fence import Fence, Previous, acquire


async def take(zk: ZooKeeperBridge, partition: int, instance: int) -> tuple[Fence, Previous]:
    """Acquire `partition`, waiting while another session holds its owner znode. An owner
    znode of this instance's own session is a leftover (ownership was dropped when the
    session was suspended too long, and the session survived): it is removed and taken anew.

    Cancellable while it waits, never inside the acquisition itself: a cancelled acquire
    whose multi() had been sent could leave an owner znode nobody knows it holds, and every
    other instance would wait for it until this session ends."""
    path = layout.owner_path(partition)
    while True:
        with trio.CancelScope(shield=True):
            try:
                return await acquire(zk, partition, instance)
            except NotOwner:
                pass
        released = trio.Event()
        stat = await zk.exists(path, watch=zk.watch(released.set))
        if stat is None:
            continue
        if stat.ephemeralOwner == zk.session_id:
            try:
                await zk.delete(path, version=stat.version)
            except NoNodeError:
                pass
            continue
        # a watch lost to a disconnection costs at most one session timeout
        with trio.move_on_after(zk.session_timeout):
            await released.wait()
