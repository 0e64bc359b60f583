"""An answer that a callback completes: what a handler returns when its request waits on
something that reports by callback (a commit, on its batch's confirmation by ZooKeeper).
Unlike a coroutine it needs no task, cancel scope or event to wait in. And `Deferred`: an
answer that a coroutine hands back to be made by its connection once there is room for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Answer = Callable[[], Any]  # computes the response message; called by the connection
_UNRESOLVED: Any = object()


class Pending:
    __slots__ = ("_answer", "_deliver", "place")

    def __init__(self) -> None:
        self._answer: Answer = _UNRESOLVED
        self._deliver: Callable[[Answer], None] | None = None
        self.place: Any = None  # a relayed request's place in its connection's line of replies

    def resolve(self, answer: Answer) -> None:
        """The answer is ready: `answer()` computes it, where the connection can contain a
        failure to one connection."""
        if self._deliver is None:
            self._answer = answer
        else:
            self._deliver(answer)

    def on_resolved(self, deliver: Callable[[Answer], None]) -> None:
        """Have `deliver(answer)` called once it is resolved (at once if it is already)."""
        if self._answer is _UNRESOLVED:
            self._deliver = deliver
        else:
            deliver(self._answer)


class Deferred:
    """What a coroutine handler may return instead of its response: `answer()` makes it, and
    the connection calls it only while its client's unread answers are within
    `max_queued_reply_bytes`. For an answer that may be large and is made after a wait (an
    OffsetFetch's, megabytes, once ZooKeeper's doubts are settled): a connection's waiting
    requests would otherwise make theirs all at once, whatever its client has not read."""
    __slots__ = ("answer",)

    def __init__(self, answer: Answer):
        self.answer = answer
