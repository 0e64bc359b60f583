"""kazoo from trio: ZooKeeper calls awaited without blocking the trio thread.

kazoo runs its own threads. Every call here goes through kazoo's asynchronous API; the
completion callback, which runs on a kazoo thread, only hands the result to trio with
`TrioToken.run_sync_soon`. Connection state changes (CONNECTED, SUSPENDED, LOST) reach trio
the same way: kept as `state`, and queued in order for each subscriber (`subscribe_states`),
so no transition is missed, however quickly they follow each other.

The session timeout that matters is the one ZooKeeper granted, which may be shorter than the
one asked for (the server bounds it to 2-20 ticks): `session_timeout` is the granted one once
connected, read from kazoo's connection handshake.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.serialization import Create, Transaction
from kazoo.security import OPEN_ACL_UNSAFE, make_acl, make_digest_acl
from kazoo.protocol.states import KazooState

from .. import logs, metrics
from .multiread import MultiRead

_SECONDS = {op: metrics.ZOOKEEPER_SECONDS.labels(op) for op in
            ("create", "get", "set", "exists", "get_children", "delete", "ensure_path", "multi", "multi_read",
             "get_acls", "set_acls")}
READS_PER_REQUEST = 64  # reads in one multiRead: bounds a request's answer, whatever the znodes hold


def protected_acl(user: str, password: str) -> list:
    """Everything for the digest user, reading for anyone (the groups CLI and operators'
    tools read; only groupkeeper writes)."""
    return [make_digest_acl(user, password, all=True), make_acl("world", "anyone", read=True)]


def count_written(operations: list) -> None:
    """Count the znode data a multi() carries (`groupkeeper_zookeeper_written_bytes_total`)."""
    metrics.ZOOKEEPER_WRITTEN.inc(sum(len(getattr(op, "data", None) or b"") for op in operations))


class ZooKeeperBridge:
    def __init__(self, hosts: str, session_timeout: float = 10.0, digest: tuple[str, str] | None = None):
        """`digest`: (user, password) to authenticate with; everything this session creates
        is then writable by that user only (readable by all), see `store/acls.py`."""
        self.acl = None if digest is None else protected_acl(*digest)
        # reconnect attempts back off, but never beyond a sixth of the session: kazoo's default
        # (up to an hour) would leave an instance cut off long after ZooKeeper is back
        self.client = KazooClient(hosts=hosts, timeout=session_timeout, connection_retry={
            "max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": session_timeout / 6},
            auth_data=None if digest is None else [("digest", f"{digest[0]}:{digest[1]}")],
            default_acl=self.acl)
        self.session_timeout = session_timeout  # the granted timeout once connected
        self.state = KazooState.LOST  # until the first connection
        self.session_id: int | None = None  # of the current (or last) session
        self._capture_granted_timeout()
        self._subscribers: list[trio.MemorySendChannel] = []
        self._token: trio.lowlevel.TrioToken | None = None
        self._unanswered: set[_Delivery] = set()  # multis sent whose outcome has not run yet

    async def start(self, timeout: float = 15.0) -> None:
        """Connect; raises trio.TooSlowError when ZooKeeper does not answer in time."""
        self._token = trio.lowlevel.current_trio_token()
        self.client.add_listener(self._listener)
        started = self.client.start_async()  # a threading.Event set by kazoo
        with trio.fail_after(timeout):
            while not started.is_set():
                await trio.to_thread.run_sync(started.wait, 0.1)
        if not self.client.connected:
            raise ConnectionError(f"could not connect to ZooKeeper at {self.client.hosts}")
        self.state = KazooState.CONNECTED  # the listener queues the change itself
        self.session_id = self.client._session_id
        metrics.ZOOKEEPER_CONNECTED.set(1)
        if self.client.chroot:
            await self._create_chroot()

    async def _create_chroot(self) -> None:
        """A connect string's chroot ("host:2181/groupkeeper/prod") must exist before anything
        can be created under it, and kazoo cannot create it (its paths all start below it):
        its components are created through this session, bypassing the chroot."""
        path = ""
        for part in self.client.chroot.strip("/").split("/"):
            path += "/" + part
            try:
                await self.wait(self._submit(Create(path, b"", OPEN_ACL_UNSAFE, 0)), "create")
            except NodeExistsError:
                pass

    def _capture_granted_timeout(self) -> None:
        """kazoo keeps the granted timeout to itself; its handshake returns a read timeout of
        2/3 of it (milliseconds), from which it is recovered. Runs on kazoo's thread."""
        connection = self.client._connection
        handshake = connection._connect

        def connect(*args, **kwargs):
            read_timeout, connect_timeout = handshake(*args, **kwargs)
            self.session_timeout = read_timeout * 1.5 / 1000
            return read_timeout, connect_timeout

        connection._connect = connect

    async def stop(self) -> None:
        await trio.to_thread.run_sync(self._stop_blocking)
        metrics.ZOOKEEPER_CONNECTED.set(0)

    def _stop_blocking(self) -> None:
        self.client.stop()
        self.client.close()

    # -- connection state -----------------------------------------------------------------

    def _listener(self, state: str) -> None:
        """On a kazoo thread: must not block or call ZooKeeper."""
        try:  # the session id as of this change (kazoo sets it before telling listeners)
            self._token.run_sync_soon(self._set_state, state, self.client._session_id)
        except trio.RunFinishedError:
            pass

    def _set_state(self, state: str, session_id: int | None) -> None:
        self.state = state
        if state == KazooState.CONNECTED:
            self.session_id = session_id
        else:
            # kazoo fails what it had queued or sent when the connection drops, but holds what
            # was sent after the drop and before this (until a reconnection, which may be long):
            # all of them end now, their outcome unknown (a late answer is ignored)
            for delivery in list(self._unanswered):
                delivery.run(ConnectionLoss())
        metrics.ZOOKEEPER_CONNECTED.set(state == KazooState.CONNECTED)
        for channel in self._subscribers:
            channel.send_nowait(state)

    def subscribe_states(self) -> trio.MemoryReceiveChannel:
        """A channel of every connection state change from now on, in order."""
        send, receive = trio.open_memory_channel(math.inf)
        self._subscribers.append(send)
        return receive

    def watch(self, on_fire: Callable[[], None]) -> Callable[[Any], None]:
        """A watch callback for a kazoo call that runs `on_fire()` in trio when it fires (kazoo
        fires it on its own thread, where nothing may block)."""
        token = self._token

        def fired(_event) -> None:
            try:
                token.run_sync_soon(on_fire)
            except trio.RunFinishedError:
                pass
        return fired

    # -- calls ----------------------------------------------------------------------------

    async def wait(self, async_result, op: str = "multi") -> Any:
        """The outcome of a kazoo IAsyncResult, raised if it is an exception; its time is
        observed under `op` (callers that commit transactions leave it "multi")."""
        started = trio.current_time()
        done = trio.Event()
        token = self._token

        def completed(_):
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass

        async_result.rawlink(completed)
        await done.wait()
        _SECONDS[op].observe(trio.current_time() - started)
        return async_result.get_nowait()

    def send(self, operations: list, on_done: Callable[[Any], None]) -> None:
        """Submit a multi() of kazoo operations (a transaction's `operations`) and return at
        once: `on_done` gets its result list, or the exception kazoo met, in trio's thread.
        kazoo's connection thread hands the outcome straight to `run_sync_soon`, without
        kazoo's completion thread between and without a task woken for it; outcomes come in
        the order the multis were sent (one session answers in order, and `run_sync_soon`
        keeps it). Sent while the connection is down, it fails at once (ConnectionLoss): kazoo
        would hold it until a reconnection."""
        delivery = _Delivery(self._token, on_done, self._unanswered)
        self._unanswered.add(delivery)
        count_written(operations)
        if self.state != KazooState.CONNECTED:
            delivery.set_exception(ConnectionLoss())
            return
        self.client._call(Transaction(operations), delivery)

    def _submit(self, request):
        """Send a request object kazoo has no method for (its paths taken as they are, the
        chroot not prepended); its IAsyncResult."""
        async_result = self.client.handler.async_result()
        self.client._call(request, async_result)
        return async_result

    async def read_many(self, reads: list[tuple[int, str]]) -> list:
        """Many reads ((multiread.GET or CHILDREN, path) pairs) in multiRead requests, all in
        flight at once; the answers in order, a failed read's exception in its place."""
        chroot = self.client.chroot.rstrip("/")
        submitted = []
        for start in range(0, len(reads), READS_PER_REQUEST):
            submitted.append(self._submit(MultiRead([(kind, chroot + path) for kind, path in
                                                     reads[start:start + READS_PER_REQUEST]])))
        answers: list = []
        for async_result in submitted:
            answers += await self.wait(async_result, "multi_read")
        return answers

    async def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        return await self.wait(self.client.create_async(
            path, value, ephemeral=ephemeral, sequence=sequence, makepath=makepath), "create")

    async def get(self, path: str, watch=None) -> tuple[bytes, Any]:
        return await self.wait(self.client.get_async(path, watch=watch), "get")

    async def set(self, path: str, value: bytes, version: int = -1) -> Any:
        return await self.wait(self.client.set_async(path, value, version), "set")

    async def sync(self, path: str) -> Any:
        """Until the server this session reads from has every write the ensemble committed
        before now (a write of another session, seen acknowledged elsewhere, is then read)."""
        return await self.wait(self.client.sync_async(path), "sync")

    async def exists(self, path: str, watch=None) -> Any:
        return await self.wait(self.client.exists_async(path, watch=watch), "exists")

    async def get_children(self, path: str, watch=None) -> list[str]:
        return await self.wait(self.client.get_children_async(path, watch=watch), "get_children")

    async def watched_data(self, path: str, watch) -> bytes | None:
        """The data of `path`, or None while it does not exist; watched either way (its
        creation too), so that what is written later, changed or deleted is read when it happens."""
        while True:
            try:
                data, _ = await self.get(path, watch=watch)
                return data
            except NoNodeError:
                if await self.exists(path, watch=watch) is None:
                    return None
                # created between the two: read it

    async def watched_children(self, path: str, watch) -> list[str] | None:
        """The children of `path`, or None while it does not exist; watched as `watched_data`."""
        while True:
            try:
                return await self.get_children(path, watch=watch)
            except NoNodeError:
                if await self.exists(path, watch=watch) is None:
                    return None

    async def delete(self, path: str, version: int = -1) -> Any:
        return await self.wait(self.client.delete_async(path, version), "delete")

    async def ensure_path(self, path: str, acl=None) -> Any:
        return await self.wait(self.client.ensure_path_async(path, acl=acl), "ensure_path")

    async def get_acls(self, path: str) -> tuple[list, Any]:
        return await self.wait(self.client.get_acls_async(path), "get_acls")

    async def set_acls(self, path: str, acls: list) -> Any:
        return await self.wait(self.client.set_acls_async(path, acls), "set_acls")


class _Delivery:
    """Completed by kazoo as it completes its own asynchronous results (`set`,
    `set_exception`), on its connection thread; runs `on_done(outcome)` once, in trio: the
    first outcome to run wins (kazoo may fail a request twice when its connection is closing,
    and the bridge ends unanswered ones when the connection drops)."""

    __slots__ = ("on_done", "started", "token", "unanswered")
    log = logs.get("groupkeeper.zookeeper")

    def __init__(self, token: trio.lowlevel.TrioToken, on_done: Callable[[Any], None], unanswered: set):
        self.token = token
        self.on_done = on_done
        self.started = time.perf_counter()
        self.unanswered = unanswered  # the bridge's: this is in it until its outcome runs

    def set(self, value: Any = None) -> None:
        self._deliver(value)

    def set_exception(self, exception: BaseException) -> None:
        self._deliver(exception)

    def _deliver(self, outcome: Any) -> None:
        try:
            self.token.run_sync_soon(self.run, outcome)
        except trio.RunFinishedError:
            pass

    def run(self, outcome: Any) -> None:
        """In trio: `on_done(outcome)`, unless an outcome ran already."""
        if self not in self.unanswered:
            return
        self.unanswered.discard(self)
        _SECONDS["multi"].observe(time.perf_counter() - self.started)
        try:
            self.on_done(outcome)
        except Exception:  # a bug: logged, not allowed to take trio's run down with it
            self.log.exception("handling a ZooKeeper answer failed")


class Refresher:
    """Runs `refresh()` again whenever a watch it armed fires (`watch`), when poked, and after
    every reconnection (what changed while disconnected, and watches a new session lacks); a
    refresh cut short by a disconnection waits for the reconnection and runs again."""

    def __init__(self, zk: ZooKeeperBridge, refresh: Callable[[], Awaitable[None]]):
        self.zk = zk
        self.refresh = refresh
        self._wake = trio.Event()
        self._states = zk.subscribe_states()

    @property
    def watch(self) -> Callable[[Any], None]:
        return self.zk.watch(self.poke)

    def poke(self) -> None:
        self._wake.set()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The first refresh happens before `started()`, and its errors are the caller's."""
        await self.refresh()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow_states)
            task_status.started()
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                try:
                    await self.refresh()
                except* KazooException:  # disconnected: the reconnection pokes again
                    pass

    async def _follow_states(self) -> None:
        async for state in self._states:
            if state == KazooState.CONNECTED:
                self.poke()
