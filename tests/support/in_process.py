"""Coordinator instances inside the test process, wired as `daemon.run` wires them (without
the server): each its own ZooKeeper session, session guard, topic registry, membership and
`Coordinator`; and the ZooKeeper chores the tests share."""

from __future__ import annotations

import itertools
import time
from contextlib import asynccontextmanager

import trio
from kazoo.client import KazooClient

from coordinator.cluster.membership import Instance, Membership
from coordinator.cluster.ownership import Coordinator
from coordinator.groups.group import GroupConfig
from coordinator.store.bridge import ZooKeeperBridge
from coordinator.topics.zookeeper import ZooKeeperTopics
from coordinator.store.session import SessionGuard

CONFIG = GroupConfig(min_session_timeout=1.0, initial_rebalance_delay=0.0)
_chroots = itertools.count()


def make_chroot(connect: str, prefix: str) -> str:
    """A fresh, empty chroot on the ZooKeeper at `connect`: its path."""
    path = f"/{prefix}-{next(_chroots)}-{int(time.time() * 1000)}"
    client = KazooClient(hosts=connect)
    client.start(timeout=10)
    client.ensure_path(path)
    client.stop()
    client.close()
    return path


def expire(connect: str, zk: ZooKeeperBridge, timeout: float = 60.0) -> None:
    """Expire `zk`'s session as kazoo's own test harness does: join it, then close it; and
    return once `zk`'s kazoo has dropped it (its session id reset or replaced).

    Joining moves the session to the other connection, and `zk`'s client, dropped, connects
    again within 0.1 s with the same session. If it gets there before the close (a loaded
    machine), it takes the session back: the other client, dropped in turn, sends no close, and
    the session lives on. So: join and close again until the session is gone."""
    client = zk.client
    session, password = client._session_id, client._session_passwd  # kazoo's, as the bridge reads it
    deadline = time.monotonic() + timeout
    while True:
        other = KazooClient(hosts=connect, client_id=(session, password))
        try:
            other.start(timeout=10)
        except other.handler.timeout_exception:
            pass  # its connection was taken back at once: tried again below
        finally:
            other.stop()
            other.close()
        settled = time.monotonic() + 5.0  # the dropped client's reconnection: well under a second
        while time.monotonic() < settled:
            if client._session_id != session:
                return
            time.sleep(0.02)
        if time.monotonic() > deadline:
            raise AssertionError(f"ZooKeeper session {session:#x} outlived {timeout:g} s of attempts to expire it")


async def start_coordinator(zk: ZooKeeperBridge, nursery: trio.Nursery, instance_id: int) -> Coordinator:
    guard = SessionGuard(zk)
    await nursery.start(guard.run)
    topics = ZooKeeperTopics(zk)
    await nursery.start(topics.run)
    membership = Membership(zk, Instance(instance_id, "127.0.0.1", 9000 + instance_id))
    await membership.register()
    coordinator = Coordinator(zk, guard, topics, membership, CONFIG, {})
    guard.on_fenced, guard.on_recovered = coordinator.fenced, coordinator.recovered
    await nursery.start(coordinator.run)
    return coordinator


@asynccontextmanager
async def running(connect: str, instance_id: int, session_timeout: float = 4.0):
    """One instance with a session of its own, stopped (not handed over) at the end."""
    zk = ZooKeeperBridge(connect, session_timeout=session_timeout)
    await zk.start()
    try:
        async with trio.open_nursery() as nursery:
            yield await start_coordinator(zk, nursery, instance_id)
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


async def until(condition, timeout: float = 20.0) -> None:
    """Wait (checking every 10 ms) until `condition()` holds; fail after `timeout`."""
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.01)
