"""`Turns`: writes of one key (a group, a pending transaction) one after the other, with a
lock made when first wanted and dropped once nobody holds or waits for it, so that no lock
is kept for every key ever written."""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

import trio


class Turns:
    def __init__(self):
        self._locks: dict[Hashable, trio.Lock] = {}

    @asynccontextmanager
    async def __call__(self, key: Hashable) -> AsyncIterator[None]:
        lock = self._locks.setdefault(key, trio.Lock())
        async with lock:
            try:
                yield
            finally:  # no checkpoint between this and the release: no one can take the lock meanwhile
                if not lock.statistics().tasks_waiting:
                    del self._locks[key]

    def __len__(self) -> int:
        return len(self._locks)
