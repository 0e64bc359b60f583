"""Consumer lag of the groups coordinated here: each committed offset against where its
partition's log ends (`topics.log_ends.LogEnds`), read per scrape from what is in memory
(the stores' confirmed offsets), no request made."""

from __future__ import annotations

import time
from collections.abc import Iterator

from ..topics.log_ends import Key, LogEnds


def groups_offsets(coordinator) -> Iterator[tuple[str, dict]]:
    """(group, topic -> partition -> entry) of every group served here: the offsets ZooKeeper
    has confirmed, of loaded group-partitions not being handed over."""
    for owned in list(coordinator.owned.values()):
        if owned.loaded.is_set() and not owned.releasing:
            yield from owned.store.durable.items()


def committed(coordinator) -> Iterator[tuple[str, str, int, int]]:
    """(group, topic, partition, committed offset) of every group served here."""
    for group, topics in groups_offsets(coordinator):
        for topic, partitions in topics.items():
            for partition, entry in partitions.items():
                if entry[0] >= 0:
                    yield group, topic, partition, entry[0]


def committed_partitions(coordinator) -> set[Key]:
    """The partitions that some group here has an offset for: whose ends lag needs."""
    return {(topic, partition) for _, topic, partition, _ in committed(coordinator)}


def lag_of(ends: LogEnds, topic: str, partition: int, offset: int) -> int | None:
    """How far `offset` is behind the partition's log end, None if the end is not known.
    Never negative: an end seen before the commit that passed it is older than the commit."""
    end = ends.get(topic, partition)
    return None if end is None else max(0, end[0] - offset)


def lag(coordinator, ends: LogEnds) -> tuple[list[tuple[str, str, int, int]], int]:
    """((group, topic, partition, lag) where the log's end is known, and how many committed
    partitions' ends are not)."""
    rows, unknown = [], 0
    for group, topic, partition, offset in committed(coordinator):
        behind = lag_of(ends, topic, partition, offset)
        if behind is None:
            unknown += 1
        else:
            rows.append((group, topic, partition, behind))
    return rows, unknown


# -- a group's status, by Burrow's rules ---------------------------------------------------
#
# Burrow (LinkedIn's lag monitor) judges a consumer by the shape of its recent commits, not
# by a lag threshold: for each partition, a window of its last commits (offset, time, lag at
# that moment), and these rules, the first that holds deciding:
#   1. the lag was zero at some commit of the window, or is zero now: OK;
#   2. an offset went backwards within the window: REWIND;
#   3. the time since the last commit exceeds the window's own span: STOP (no commits);
#   4. every commit of the window has the same offset (lag not zero): STALL;
#   5. the lag never decreased from one commit to the next: WARN (falling behind);
#   otherwise OK. A group is as bad as its worst partition (Burrow's group status shows
# STOP, STALL and REWIND as ERR). Burrow reads the commits from __consumer_offsets, which
# never sees groupkeeper's; groupkeeper sees each commit first-hand.

OK, WARN, STOP, STALL, REWIND = "OK", "WARN", "STOP", "STALL", "REWIND"
SEVERITY = {OK: 0, WARN: 1, STOP: 2, STALL: 3, REWIND: 4}
ERRORS = frozenset({STOP, STALL, REWIND})  # Burrow's ERR
WINDOW = 10  # commits kept per partition (Burrow's `intervals`)
MIN_DISTANCE_MS = 1000  # a commit this close to the last replaces it (Burrow's `min-distance`)

Commit = tuple[int, int, "int | None"]  # (offset, commit time ms, lag then: None if the end was unknown)


def partition_status(window: list[Commit] | tuple[Commit, ...], lag_now: int | None, now_ms: int) -> str:
    """A partition's status by the rules above, from its window of commits (oldest first)."""
    if not window or lag_now == 0 or lag_now is None:
        return OK
    lags = [lag for _, _, lag in window if lag is not None]
    if any(lag == 0 for lag in lags):
        return OK
    offsets = [offset for offset, _, _ in window]
    if any(later < earlier for earlier, later in zip(offsets, offsets[1:])):
        return REWIND
    first, last = window[0][1], window[-1][1]
    if now_ms - last > last - first:
        return STOP
    if len(window) > 1 and all(offset == offsets[0] for offset in offsets):
        return STALL
    if len(lags) > 1 and all(later >= earlier for earlier, later in zip(lags, lags[1:])):
        return WARN
    return OK


class CommitWindows:
    """The last WINDOW commits of each partition of the groups served here, with the lag at
    each (against `ends` as then known); at most `max_partitions` partitions are followed."""

    def __init__(self, ends: LogEnds, window: int = WINDOW, min_distance_ms: int = MIN_DISTANCE_MS,
                 max_partitions: int = 1_000_000):
        self.ends = ends
        self.window = window
        self.min_distance_ms = min_distance_ms
        self.max_partitions = max_partitions
        self.windows: dict[tuple[str, str, int], list[Commit]] = {}

    def committed(self, group: str, topic: str, entries: dict) -> None:
        """A store's confirmed offsets (partition -> (offset, epoch, metadata, time ms))."""
        for partition, entry in entries.items():
            offset, when = entry[0], entry[3]
            if offset < 0:
                continue
            key = (group, topic, partition)
            window = self.windows.get(key)
            if window is None:
                if len(self.windows) >= self.max_partitions:
                    continue
                window = self.windows[key] = []
            commit = (offset, when, lag_of(self.ends, topic, partition, offset))
            if window and 0 <= when - window[-1][1] < self.min_distance_ms:
                window[-1] = commit
            else:
                window.append(commit)
                if len(window) > self.window:
                    del window[0]

    def group_status(self, group: str, offsets: dict, now_ms: int | None = None) -> str | None:
        """One group's status from its confirmed offsets (topic -> partition -> entry); None
        when it has none to judge."""
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        worst = None
        for topic, partitions in offsets.items():
            for partition, entry in partitions.items():
                if entry[0] < 0:
                    continue
                status = partition_status(self.windows.get((group, topic, partition), ()),
                                          lag_of(self.ends, topic, partition, entry[0]), now_ms)
                if worst is None or SEVERITY[status] > SEVERITY[worst]:
                    worst = status
        return worst

    def statuses(self, coordinator, now_ms: int) -> dict[str, str]:
        """Each group served here that has committed offsets: its worst partition's status.
        Windows of partitions no longer served here are dropped."""
        worst: dict[str, str] = {}
        kept = set()
        for group, offsets in groups_offsets(coordinator):
            if (status := self.group_status(group, offsets, now_ms)) is not None:
                worst[group] = status
            kept.update((group, topic, p) for topic, partitions in offsets.items()
                        for p, entry in partitions.items() if entry[0] >= 0)
        for key in [k for k in self.windows if k not in kept]:
            del self.windows[key]
        return worst
