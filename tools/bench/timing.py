"""Throughput of a callable: the best of several timed rounds, so that a noisy neighbour
costs a round, not the result."""

from __future__ import annotations

import time
from collections.abc import Callable


def ops_per_second(fn: Callable[[], object], min_round_s: float = 0.2, rounds: int = 5) -> float:
    n = 1
    while True:  # calibrate: enough calls that one round takes min_round_s
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_round_s / 4:
            break
        n *= 4
    n = max(1, int(n * min_round_s / max(elapsed, 1e-9)))
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - start)
    return n / best
