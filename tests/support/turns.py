"""How often the serving loop gets a turn while something runs: `turns_during`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio


async def turns_during(work: Callable[[], Awaitable[Any]]) -> tuple[Any, int]:
    """`await work()` beside a task that stands for the serving loop (it only checkpoints):
    work's result, and how many turns that task had from work's start to its end: one for
    each checkpoint of work's, but perhaps the last (trio runs a batch's tasks in no set order)."""
    turns, done, running = [0], trio.Event(), trio.Event()

    async def serving_loop() -> None:
        running.set()
        while not done.is_set():
            await trio.lowlevel.checkpoint()
            turns[0] += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serving_loop)
        await running.wait()
        before = turns[0]
        result = await work()
        during = turns[0] - before
        done.set()
    return result, during
