"""kazoo from trio: ZooKeeper calls awaited without blocking the trio thread.

kazoo runs its own threads. Every call here goes through kazoo's asynchronous API; the
completion callback, which runs on a kazoo thread, only hands the result to trio with
`TrioToken.run_sync_soon`. Connection state changes (CONNECTED, SUSPENDED, LOST) reach trio
the same way: kept as `state`, and queued in order for each subscriber (`subscribe_states`),
so no transition is missed, however quickly they follow each other.
"""

from __future__ import annotations

import math
from typing import Any

import trio
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from .. import metrics

_SECONDS = {op: metrics.ZOOKEEPER_SECONDS.labels(op) for op in
            ("create", "get", "set", "exists", "get_children", "delete", "ensure_path", "multi")}


class ZooKeeperBridge:
    def __init__(self, hosts: str, session_timeout: float = 10.0):
        self.client = KazooClient(hosts=hosts, timeout=session_timeout)
        self.session_timeout = session_timeout
        self.state = KazooState.LOST  # until the first connection
        self._subscribers: list[trio.MemorySendChannel] = []
        self._token: trio.lowlevel.TrioToken | None = None

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
        metrics.ZOOKEEPER_CONNECTED.set(1)

    async def stop(self) -> None:
        await trio.to_thread.run_sync(self._stop_blocking)
        metrics.ZOOKEEPER_CONNECTED.set(0)

    def _stop_blocking(self) -> None:
        self.client.stop()
        self.client.close()

    # -- connection state -----------------------------------------------------------------

    def _listener(self, state: str) -> None:
        """On a kazoo thread: must not block or call ZooKeeper."""
        try:
            self._token.run_sync_soon(self._set_state, state)
        except trio.RunFinishedError:
            pass

    def _set_state(self, state: str) -> None:
        self.state = state
        metrics.ZOOKEEPER_CONNECTED.set(state == KazooState.CONNECTED)
        for channel in self._subscribers:
            channel.send_nowait(state)

    def subscribe_states(self) -> trio.MemoryReceiveChannel:
        """A channel of every connection state change from now on, in order."""
        send, receive = trio.open_memory_channel(math.inf)
        self._subscribers.append(send)
        return receive

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

    async def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        return await self.wait(self.client.create_async(
            path, value, ephemeral=ephemeral, sequence=sequence, makepath=makepath), "create")

    async def get(self, path: str, watch=None) -> tuple[bytes, Any]:
        return await self.wait(self.client.get_async(path, watch=watch), "get")

    async def set(self, path: str, value: bytes, version: int = -1) -> Any:
        return await self.wait(self.client.set_async(path, value, version), "set")

    async def exists(self, path: str, watch=None) -> Any:
        return await self.wait(self.client.exists_async(path, watch=watch), "exists")

    async def get_children(self, path: str, watch=None) -> list[str]:
        return await self.wait(self.client.get_children_async(path, watch=watch), "get_children")

    async def delete(self, path: str, version: int = -1) -> Any:
        return await self.wait(self.client.delete_async(path, version), "delete")

    async def ensure_path(self, path: str) -> Any:
        return await self.wait(self.client.ensure_path_async(path), "ensure_path")
