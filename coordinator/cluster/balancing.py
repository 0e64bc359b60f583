"""Where each group-partition should live, given the live instances: balanced, and moving as
few group-partitions as the balance allows. Pure: every instance computes the same answer
from the same inputs, so racing writers of the placement agree.

Each live instance gets `partitions // k` group-partitions, and `partitions % k` of them one
more; the extra ones go to the instances that already hold the most (ties: the lower id), so
nothing moves that need not. An instance keeps what it held up to its quota (its
lowest-numbered ones); everything else (what dead instances held, what an instance holds
beyond its quota, what nobody held) goes to the instances below their quota, least loaded
first. A new instance therefore takes its fair share from the most loaded, and a dead one's
share is spread over the survivors; the number moved is the minimum any balanced placement
needs.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence


def balance(partitions: int, live: Iterable[int], previous: Sequence[int | None]) -> list[int | None]:
    """The owner of each group-partition (`None` for all when no instance is live), from the
    previous placement (`previous[p]`; missing or dead owners count as none)."""
    instances = sorted(set(live))
    if not instances:
        return [None] * partitions
    held: dict[int, list[int]] = {i: [] for i in instances}
    free = []
    for p in range(partitions):
        owner = previous[p] if p < len(previous) else None
        if owner in held:
            held[owner].append(p)
        else:
            free.append(p)
    base, extra = divmod(partitions, len(instances))
    ranked = sorted(instances, key=lambda i: (-len(held[i]), i))
    quota = {i: base + (rank < extra) for rank, i in enumerate(ranked)}
    owners: list[int | None] = [None] * partitions
    for i in instances:
        kept, given_up = held[i][:quota[i]], held[i][quota[i]:]
        for p in kept:
            owners[p] = i
        free += given_up
    # (load, id) of every instance below its quota; the least loaded takes the next one
    needy = [(len(held[i]), i) for i in instances if len(held[i]) < quota[i]]
    heapq.heapify(needy)
    for p in sorted(free):
        load, i = heapq.heappop(needy)
        owners[p] = i
        if load + 1 < quota[i]:
            heapq.heappush(needy, (load + 1, i))
    return owners


def moved(before: Sequence[int | None], after: Sequence[int | None]) -> int:
    """Group-partitions whose owner differs between two placements."""
    return sum(1 for p, owner in enumerate(after) if (before[p] if p < len(before) else None) != owner)
