"""What trio's loop has to do, seen from the serving loop: `TrioLoop`.

The serving loop (`server.Server._poll`) waits for its sockets in an epoll set of its own.
Waiting for that set through trio (`trio.lowlevel.wait_readable`) costs a round of trio's
scheduler at every wake-up: trio's own `epoll_wait`, the set's one-shot registration made
again, the task rescheduled and stepped. At one wake-up per message that round is much of
what a relayed record costs: a 40-line Python relay measured 132 us of CPU a record at
2,000 records/s waiting through trio, 80 us waiting in its own epoll as below, 74 us with
no trio at all (docs/benchmarks.md, "Waiting in the serving loop's own epoll").

So, with `serving_wait = "epoll"`, while trio has nothing to run the serving loop waits in
its own set, with trio's epoll registered in it: a socket of trio's that becomes ready, a
thread's `run_sync_soon` or a signal (both write trio's wakeup socket) wakes it too, and it
then yields (`trio.lowlevel.checkpoint`) so that trio runs what is due. Its timeout is
trio's next deadline, so no cancel scope or sleep is late.

"Nothing to run" is counted, not read from the run queue: trio steps the tasks runnable at
the start of a turn as one batch, so while the serving loop runs, the tasks of its batch
still to step are in no queue. An instrument (`_Scheduled`, trio's public hooks) keeps the
tasks scheduled and not yet stepped; the loop waits on its own only when that holds none
but itself. Tasks scheduled before the instrument was added are all stepped within the
two turns the loop yields after claiming (`settle`).

The rest reads trio's private state (its epoll, clock, deadlines, guest mode, a test's
wait for all tasks blocked), which trio does not promise to keep. `TrioLoop.claim()`
returns None wherever any of it is not as expected (another trio version or I/O manager,
guest mode, a clock that is not the system's, as tests' MockClock), and the serving loop
then waits through trio as before: slower, never wrong. One serving loop per trio run may
wait on its own; another one's set is registered in trio's epoll as before, so the first's
wait wakes for it too.
"""

from __future__ import annotations

import math
from time import perf_counter
from typing import Any

import trio

_CLAIMED: set[int] = set()  # the runs (by their runner's id) where a serving loop waits on its own


class _Scheduled(trio.abc.Instrument):
    """The tasks scheduled to run and not stepped since."""

    def __init__(self):
        self.tasks: set = set()

    def task_scheduled(self, task) -> None:
        self.tasks.add(task)

    def before_task_step(self, task) -> None:
        self.tasks.discard(task)


class TrioLoop:
    """The running trio loop: whether it has something to run, and until when it has not."""
    __slots__ = ("_clock", "_deadlines", "_offset", "_runner", "_scheduled", "fd")

    def __init__(self, runner: Any):
        self._runner = runner
        self._clock = runner.clock
        self._offset: float = runner.clock.offset  # trio's time is the system clock's perf_counter() + this
        self._deadlines = runner.deadlines
        self._scheduled = _Scheduled()
        self.fd: int = runner.io_manager._epoll.fileno()  # trio's epoll: readable when trio has events

    @classmethod
    def claim(cls) -> TrioLoop | None:
        """The running loop's, for the caller alone to wait on its own until `release`; None
        where its state is not what this reads (see above), or another caller has it."""
        try:
            from trio._core._io_epoll import EpollIOManager
            from trio._core._run import GLOBAL_RUN_CONTEXT, SystemClock

            runner = GLOBAL_RUN_CONTEXT.runner
            if (runner.is_guest or type(runner.clock) is not SystemClock
                    or type(runner.io_manager) is not EpollIOManager):
                return None
            loop = cls(runner)
            loop._deadlines.next_deadline()  # every attribute it reads is there
            _ = runner.waiting_for_idle
        except (ImportError, AttributeError, TypeError):
            return None
        if id(runner) in _CLAIMED:
            return None
        _CLAIMED.add(id(runner))
        trio.lowlevel.add_instrument(loop._scheduled)
        return loop

    async def settle(self) -> None:
        """Yield twice: every task scheduled before the instrument came has stepped after."""
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()

    def release(self) -> None:
        _CLAIMED.discard(id(self._runner))
        try:
            trio.lowlevel.remove_instrument(self._scheduled)
        except (KeyError, RuntimeError):  # the run is over
            pass

    @property
    def watched(self) -> bool:
        """Whether a task waits for every task to be blocked (`trio.testing.wait_all_tasks_blocked`):
        then the serving loop must wait through trio, or trio never sees itself idle."""
        return bool(self._runner.waiting_for_idle)

    def timeout(self) -> float | None:
        """Seconds the serving loop, running now, may wait in its own epoll (-1: for ever), or
        None: trio has something to run now."""
        if self._scheduled.tasks:
            return None
        deadline = self._deadlines.next_deadline()
        if deadline == math.inf:
            return -1
        left = deadline - (self._offset + perf_counter())
        return left if left > 0 else None

    def now(self) -> float:
        """`trio.current_time()`, read in one step rather than three."""
        return self._offset + perf_counter()
