"""Which instances are alive: each registers an ephemeral znode with the address clients
should use, and watches everyone's.

The znode lives exactly as long as the instance's ZooKeeper session, so "live" means what
ZooKeeper's failure detection says: a crashed or paused instance stays live until its session
expires, and not a moment longer. After its own session is lost an instance registers again
with the new one, without a restart.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

import trio
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from .. import logs
from ..store import layout
from ..store.bridge import Refresher, ZooKeeperBridge
from ..store.multiread import GET

REREGISTER_RETRY = 1.0  # seconds between attempts while another session holds our id


@dataclass(frozen=True)
class Instance:
    id: int
    host: str  # the advertised address clients connect to (its first listener's)
    port: int
    # every listener's advertised address, as (name, host, port); a registration older than
    # listeners had one, PLAINTEXT
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def address(self, listener: str) -> tuple[str, int] | None:
        """Where a client of `listener` (its name) reaches this instance; None if it has no such listener."""
        for name, host, port in self.endpoints or (("PLAINTEXT", self.host, self.port),):
            if name == listener:
                return host, port
        return None


class AlreadyRegistered(Exception):
    """Another live instance uses this instance id."""


class Membership:
    def __init__(self, zk: ZooKeeperBridge, me: Instance):
        self.zk = zk
        self.me = me
        self.live: dict[int, Instance] = {}
        self.updated = trio.Event()  # set (and replaced) whenever `live` changes
        self._refresher = Refresher(zk, self._refresh)
        self.log = logs.get("groupkeeper.membership").bind(instance=me.id)

    # -- this instance --------------------------------------------------------------------

    async def register(self, wait: float = 0.0) -> None:
        """Create this instance's znode. If another session holds it, wait up to `wait`
        seconds for it to go (a killed predecessor's session expiring), then raise
        AlreadyRegistered."""
        data = layout.encode({"host": self.me.host, "port": self.me.port,
                              "endpoints": [f"{name}://{_bracketed(host)}:{port}" for name, host, port in self.me.endpoints],
                              "hostname": socket.gethostname(),
                              "pid": os.getpid(), "started": int(time.time() * 1000)})
        path = layout.instance_path(self.me.id)
        deadline = trio.current_time() + wait
        while True:
            try:
                await self.zk.create(path, data, ephemeral=True, makepath=True)
                return
            except NodeExistsError:
                pass
            gone = trio.Event()
            stat = await self.zk.exists(path, watch=self.zk.watch(gone.set))
            if stat is None:
                continue
            if stat.ephemeralOwner == self.zk.session_id:
                return
            if trio.current_time() >= deadline:
                raise AlreadyRegistered(f"instance id {self.me.id} is already registered in ZooKeeper ({path}) by "
                                        "another session: is another instance running with it?")
            self.log.warning("instance id held by another session; waiting for it to expire",
                             session=hex(stat.ephemeralOwner), wait_s=round(deadline - trio.current_time(), 1))
            with trio.move_on_at(deadline):
                await gone.wait()

    async def deregister(self) -> None:
        """Remove this instance's znode (if it is still this session's): the others see it go
        at once, instead of after the session timeout. Waits for ZooKeeper as long as it takes:
        callers bound it (at shutdown: unreachable, it would answer only once reconnected)."""
        try:
            if await self._mine():
                await self.zk.delete(layout.instance_path(self.me.id))
        except (NoNodeError, KazooException):
            pass
        finally:  # cut short too: this instance counts itself out from now on
            self.live.pop(self.me.id, None)

    async def _mine(self) -> bool:
        stat = await self.zk.exists(layout.instance_path(self.me.id))
        return stat is not None and stat.ephemeralOwner == self.zk.session_id

    # -- everyone -------------------------------------------------------------------------

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow_session, self.zk.subscribe_states())
            await nursery.start(self._refresher.run)
            task_status.started()

    async def _follow_session(self, states: trio.MemoryReceiveChannel) -> None:
        """A new session (CONNECTED after LOST): register again, the old session's znode
        having gone with it; until it is done, whatever comes in between."""
        lost = False
        async for state in states:
            if state == KazooState.LOST:
                lost = True
            elif state == KazooState.CONNECTED and lost:
                lost = False
                await self._register_again()

    async def _register_again(self) -> None:
        while True:
            try:
                await self.register(wait=self.zk.session_timeout)
                self.log.info("instance registered again", session=hex(self.zk.session_id or 0))
                return
            except AlreadyRegistered as exc:
                self.log.error("cannot register again", error=str(exc))
            except KazooException as exc:  # disconnected again: once reconnected, the call goes through
                self.log.warning("registering again failed; retrying", error=str(exc) or type(exc).__name__)
            await trio.sleep(REREGISTER_RETRY)

    async def _refresh(self) -> None:
        """Read the registered instances (all of them: one that came back may have a new
        address), re-arming the watch on the set."""
        names = await self.zk.get_children(layout.INSTANCES, watch=self._refresher.watch)
        ids = sorted(int(name) for name in names if name.isdigit())
        live: dict[int, Instance] = {}
        for i, read in zip(ids, await self.zk.read_many([(GET, layout.instance_path(i)) for i in ids])):
            if isinstance(read, NoNodeError):
                continue  # gone again already
            if isinstance(read, Exception):
                raise read
            try:
                record = layout.decode(read[0])
                live[i] = Instance(i, str(record["host"]), int(record["port"]),
                                   tuple(_endpoint(text) for text in record.get("endpoints", ())))
            except (ValueError, KeyError, TypeError, AttributeError):
                self.log.warning("unreadable instance registration", instance_id=i)
        if live != self.live:
            joined, left = sorted(set(live) - set(self.live)), sorted(set(self.live) - set(live))
            self.live = live
            self.log.info("live instances changed", live=sorted(live), joined=joined, left=left)
            self.updated.set()
            self.updated = trio.Event()


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _endpoint(text: str) -> tuple[str, str, int]:
    """"NAME://HOST:PORT" as (name, host, port); ValueError if it is not one."""
    name, sep, address = text.partition("://")
    host, _, port = address.rpartition(":")
    if not sep or not host:
        raise ValueError(text)
    return name, host.strip("[]"), int(port)
