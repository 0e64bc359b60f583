"""What the ZooKeeper session state means for an owner.

SUSPENDED: stop acknowledging writes at once. Still SUSPENDED after a safe fraction of the
session timeout: fenced — act as if ownership were gone, even though kazoo only reports
LOST after it reconnects and learns the session expired; by the time the session could
have expired, another instance may have taken over. LOST: this instance owns nothing.
"""

from __future__ import annotations

import trio
from kazoo.protocol.states import KazooState

from .bridge import ZooKeeperBridge

SAFE_FRACTION = 2 / 3  # of the session timeout; the session expires at 1


class SessionGuard:
    def __init__(self, zk: ZooKeeperBridge, session_timeout: float, on_fenced=None):
        self.zk = zk
        self.session_timeout = session_timeout
        self.on_fenced = on_fenced  # called once when ownership must be given up
        self.writable = zk.state == KazooState.CONNECTED
        self.fenced = False
        self._states = zk.subscribe_states()

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            state = await self._states.receive()
            if state == KazooState.CONNECTED:
                self.writable = not self.fenced
                continue
            self.writable = False
            if state == KazooState.LOST:
                self._fence()
                continue
            # SUSPENDED: fenced unless the connection comes back in time
            with trio.move_on_after(self.session_timeout * SAFE_FRACTION):
                state = await self._states.receive()
                if state == KazooState.CONNECTED:
                    self.writable = not self.fenced
                    continue
                if state == KazooState.LOST:
                    self._fence()
                    continue
            self._fence()

    def _fence(self) -> None:
        if not self.fenced:
            self.fenced = True
            if self.on_fenced is not None:
                self.on_fenced()

    def reset(self) -> None:
        """After the owner has given everything up and may take ownership afresh."""
        self.fenced = False
        self.writable = self.zk.state == KazooState.CONNECTED
