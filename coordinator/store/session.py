"""What the ZooKeeper session state means for an owner, and the lease that lets it answer.

SUSPENDED: stop acknowledging writes at once, keep everything else. Still SUSPENDED after a
safe fraction of the (granted) session timeout: fenced — act as if ownership were gone, even
though kazoo only reports LOST after it reconnects and learns the session expired; by the
time the session could have expired, another instance may have taken over. LOST: fenced.
Connected again after a fence (the same session, or a new one): recovered — the owner has
dropped everything by then and takes its share afresh, without a restart.

The lease: a ZooKeeper round trip sent at time t and answered in the same session proves the
session alive after t, so it cannot expire before t + the session timeout, and until then
no one else can take over. An instance answers as owner only until t + SAFE_FRACTION of it,
measured on the monotonic clock, which keeps running while the process is stopped: after a
pause (SIGSTOP, a long GC, a VM freeze) the lease has run out before the first request is
read, and nothing is answered as owner until a fresh round trip renews it.
"""

from __future__ import annotations

import math

import trio
from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState

from .bridge import ZooKeeperBridge

SAFE_FRACTION = 2 / 3  # of the session timeout; the session expires at 1
RENEWALS_PER_TIMEOUT = 6  # lease renewals per session timeout: a lease outlives three misses


class SessionGuard:
    def __init__(self, zk: ZooKeeperBridge, on_fenced=None, on_recovered=None):
        self.zk = zk
        self.on_fenced = on_fenced  # called once when ownership must be given up
        self.on_recovered = on_recovered  # called when ownership may be taken afresh
        self.writable = zk.state == KazooState.CONNECTED
        self.fenced = False
        self.lease_until = -math.inf
        self._renewed = trio.Event()
        self._states = zk.subscribe_states()

    def current(self, now: float | None = None) -> bool:
        """Whether ownership held now (or at `now`, a time just read) is provably still this
        instance's."""
        return not self.fenced and (trio.current_time() if now is None else now) < self.lease_until

    async def wait_current(self) -> None:
        while not self.current():
            await self._renewed.wait()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow_states)
            await self._renew_once()
            nursery.start_soon(self._renew_lease)
            task_status.started()

    async def _follow_states(self) -> None:
        fence_at = math.inf  # while SUSPENDED: when to give up
        while True:
            with trio.move_on_at(fence_at) as waited:
                state = await self._states.receive()
            if waited.cancelled_caught:
                fence_at = math.inf
                self._fence()
            elif state == KazooState.CONNECTED:
                fence_at = math.inf
                if self.fenced:
                    self.fenced = False
                    if self.on_recovered is not None:
                        self.on_recovered()
                self.writable = True
            elif state == KazooState.LOST:
                fence_at = math.inf
                self.writable = False
                self._fence()
            else:  # SUSPENDED
                self.writable = False
                fence_at = trio.current_time() + self.zk.session_timeout * SAFE_FRACTION

    async def _renew_lease(self) -> None:
        while True:
            started = trio.current_time()
            await self._renew_once()
            await trio.sleep_until(started + self.zk.session_timeout / RENEWALS_PER_TIMEOUT)

    async def _renew_once(self) -> None:
        sent, session = trio.current_time(), self.zk.session_id
        interval = self.zk.session_timeout / RENEWALS_PER_TIMEOUT
        try:
            with trio.move_on_after(interval) as waited:  # a late answer extends nothing
                await self.zk.exists("/")
        except KazooException:
            return
        if waited.cancelled_caught or self.zk.session_id != session or self.zk.state != KazooState.CONNECTED:
            return
        self.lease_until = max(self.lease_until, sent + self.zk.session_timeout * SAFE_FRACTION)
        self._renewed.set()
        self._renewed = trio.Event()

    def _fence(self) -> None:
        if not self.fenced:
            self.fenced = True
            if self.on_fenced is not None:
                self.on_fenced()
