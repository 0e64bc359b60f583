"""groupkeeper's data in ZooKeeper protected from other ZooKeeper users.

With `zookeeper_digest_file`, every instance authenticates with that digest user, and every
znode it creates under /groupkeeper carries `bridge.protected_acl`: everything for that user,
reading for anyone. Nodes created before protection was turned on are given the same ACL
once, at start-up, by `protect`: children first and the root last, so that a root with the
ACL means a tree done, and a walk cut short is done again by the next instance to start.
Kafka's own layout (/brokers) is left open: Kafka's brokers write there.
"""

from __future__ import annotations

import trio
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import Permissions

from . import layout
from .bridge import ZooKeeperBridge

WALK_CONCURRENCY = 64  # requests in flight while walking the tree


class Locked(Exception):
    """The data is protected for another user (or password) than this instance has."""


async def protect(zk: ZooKeeperBridge) -> int:
    """Give every node under the root the protected ACL if the root lacks it: how many
    nodes were changed (0: protection off, nothing there yet, or already done). Locked when
    this instance could not write the data: protected, and not for its digest."""
    try:
        acls, _ = await zk.get_acls(layout.ROOT)
    except NoNodeError:
        return 0
    if zk.acl is None:
        if not any(a.id.scheme == "world" and a.perms & Permissions.WRITE for a in acls):
            raise Locked("groupkeeper's data in ZooKeeper is protected: set zookeeper_digest_file")
        return 0
    if list(acls) == list(zk.acl):
        return 0
    paths = await _tree(zk, layout.ROOT)
    limiter = trio.CapacityLimiter(WALK_CONCURRENCY)
    refused = []

    async def set_one(path: str) -> None:
        async with limiter:
            try:
                await zk.set_acls(path, zk.acl)
            except NoNodeError:
                pass  # gone meanwhile (an ephemeral's session ended)
            except NoAuthError:
                refused.append(path)
    for level in reversed(paths):  # the deepest first, the root last
        async with trio.open_nursery() as nursery:
            for path in level:
                nursery.start_soon(set_one, path)
        if refused:
            raise Locked("groupkeeper's data in ZooKeeper is protected for another user or password "
                         f"than zookeeper_digest_file's ({refused[0]})")
    return sum(len(level) for level in paths)


async def _tree(zk: ZooKeeperBridge, root: str) -> list[list[str]]:
    """Every path under and including `root`, level by level."""
    levels = [[root]]
    limiter = trio.CapacityLimiter(WALK_CONCURRENCY)
    while levels[-1]:
        below: list[str] = []

        async def children(path: str) -> None:
            async with limiter:
                try:
                    names = await zk.get_children(path)
                except NoNodeError:
                    return
            below.extend(f"{path}/{name}" for name in names)
        async with trio.open_nursery() as nursery:
            for path in levels[-1]:
                nursery.start_soon(children, path)
        levels.append(below)
    return levels[:-1]
