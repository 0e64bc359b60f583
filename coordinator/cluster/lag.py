"""Consumer lag of the groups coordinated here: each committed offset against where its
partition's log ends (`topics.log_ends.LogEnds`), read per scrape from what is in memory
(the stores' confirmed offsets), no request made. A scrape reads them in steps
(`lag_in_steps`, `CommitWindows.statuses_in_steps`: `metrics.STEP` between groups once
`metrics.Pace` says so), the serving loop run between them, so what they walk is a snapshot
of each store's groups and each group is read whole in one step."""

from __future__ import annotations

import time
from collections.abc import Iterator

from ..metrics import ROWS_PER_PACE, STEP, Pace, Stepped, run_through
from ..topics.log_ends import Key, LogEnds


def groups_offsets(coordinator) -> Iterator[tuple[str, dict]]:
    """(group, topic -> partition -> entry) of every group served here: the offsets ZooKeeper
    has confirmed, of loaded group-partitions not being handed over. Each group-partition's
    groups are a snapshot taken when it is reached, so the loop may run between two groups."""
    for owned in list(coordinator.owned.values()):
        if owned.loaded.is_set() and not owned.releasing:
            yield from list(owned.store.durable.items())


def committed_in(offsets: dict) -> Iterator[tuple[str, int, int]]:
    """(topic, partition, committed offset) of one group's offsets (topic -> partition -> entry)."""
    for topic, partitions in offsets.items():
        for partition, entry in partitions.items():
            if entry[0] >= 0:
                yield topic, partition, entry[0]


def committed_partitions_in_steps(coordinator, pace: Pace | None = None) -> Stepped:
    """The partitions that some group here has an offset for: whose ends lag needs; stepping
    between groups as `pace` says (`topics.log_ends.LogEndPoller.wanted_now`)."""
    pace = pace or Pace()
    found: set[Key] = set()
    for _, offsets in groups_offsets(coordinator):
        found.update((topic, partition) for topic, partition, _ in committed_in(offsets))
        if pace.due():
            yield STEP
    return found


def committed_partitions(coordinator) -> set[Key]:
    """`committed_partitions_in_steps`' result, in one piece."""
    return run_through(committed_partitions_in_steps(coordinator))


def lag_of(ends: LogEnds, topic: str, partition: int, offset: int) -> int | None:
    """How far `offset` is behind the partition's log end, None if the end is not known.
    Never negative: an end seen before the commit that passed it is older than the commit."""
    end = ends.get(topic, partition)
    return None if end is None else max(0, end[0] - offset)


def lag_in_steps(coordinator, ends: LogEnds, pace: Pace | None = None) -> Stepped:
    """((group, topic, partition, lag) where the log's end is known, and how many committed
    partitions' ends are not), stepping between groups as `pace` says."""
    pace = pace or Pace()
    rows, unknown = [], 0
    for group, offsets in groups_offsets(coordinator):
        for topic, partition, offset in committed_in(offsets):
            behind = lag_of(ends, topic, partition, offset)
            if behind is None:
                unknown += 1
            else:
                rows.append((group, topic, partition, behind))
        if pace.due():
            yield STEP
    return rows, unknown


def lag(coordinator, ends: LogEnds) -> tuple[list[tuple[str, str, int, int]], int]:
    """`lag_in_steps`' result, in one piece."""
    return run_through(lag_in_steps(coordinator, ends))


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

_NO_PARTITIONS: dict = {}
Commit = tuple[int, int, "int | None"]  # (offset, commit time ms, lag then: None if the end was unknown)


def partition_status(window: list[Commit] | tuple[Commit, ...], lag_now: int | None, now_ms: int) -> str:
    """A partition's status by the rules above, from its window of commits (oldest first)."""
    if not window or lag_now == 0 or lag_now is None:
        return OK
    # each rule in list operations done in C (a scrape judges every partition: these were
    # three quarters of its CPU, docs/benchmarks.md "A scrape as the groups grow")
    lags = [lag for _, _, lag in window if lag is not None]
    if 0 in lags:
        return OK
    offsets = [offset for offset, _, _ in window]
    if offsets != sorted(offsets):  # some offset lower than one before it
        return REWIND
    first, last = window[0][1], window[-1][1]
    if now_ms - last > last - first:
        return STOP
    if len(window) > 1 and offsets.count(offsets[0]) == len(offsets):
        return STALL
    if len(lags) > 1 and lags == sorted(lags):  # never decreasing
        return WARN
    return OK


class CommitWindows:
    """The last WINDOW commits of each partition of the groups served here, with the lag at
    each (against `ends` as then known); at most `max_partitions` partitions are followed.
    Kept per group (`windows`: group -> (topic, partition) -> window), so that a scrape's
    pruning walks a snapshot of the groups, not of every partition (`statuses_in_steps`)."""

    def __init__(self, ends: LogEnds, window: int = WINDOW, min_distance_ms: int = MIN_DISTANCE_MS,
                 max_partitions: int = 1_000_000):
        self.ends = ends
        self.window = window
        self.min_distance_ms = min_distance_ms
        self.max_partitions = max_partitions
        self.windows: dict[str, dict[tuple[str, int], list[Commit]]] = {}
        self.partitions = 0  # windows followed, over all groups

    def followed(self) -> set[tuple[str, str, int]]:
        """(group, topic, partition) of every window kept."""
        return {(group, topic, partition) for group, mine in self.windows.items() for topic, partition in mine}

    def committed(self, group: str, topic: str, entries: dict) -> None:
        """A store's confirmed offsets (partition -> (offset, epoch, metadata, time ms))."""
        mine = self.windows.get(group)
        for partition, entry in entries.items():
            offset, when = entry[0], entry[3]
            if offset < 0:
                continue
            window = None if mine is None else mine.get((topic, partition))
            if window is None:
                if self.partitions >= self.max_partitions:
                    continue
                if mine is None:
                    mine = self.windows[group] = {}
                window = mine[(topic, partition)] = []
                self.partitions += 1
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
        mine = self.windows.get(group, _NO_PARTITIONS)
        worst = None
        for topic, partition, offset in committed_in(offsets):
            status = partition_status(mine.get((topic, partition), ()), lag_of(self.ends, topic, partition, offset),
                                      now_ms)
            if worst is None or SEVERITY[status] > SEVERITY[worst]:
                worst = status
        return worst

    def statuses_in_steps(self, coordinator, now_ms: int, pace: Pace | None = None) -> Stepped:
        """Each group served here that has committed offsets: its worst partition's status,
        stepping between groups as `pace` says. Windows of partitions not served here when
        the scrape passed are dropped, of the groups followed when it began: a group whose
        first window a commit began meanwhile is kept whole."""
        pace = pace or Pace()
        began = list(self.windows)  # the groups followed (a snapshot of every partition's
        # keys took 5-11 ms in one piece at 180,000 partitions)
        worst: dict[str, str] = {}
        served: dict[str, dict] = {}  # group -> its offsets (topic -> partition -> entry)
        for group, offsets in groups_offsets(coordinator):
            if (status := self.group_status(group, offsets, now_ms)) is not None:
                worst[group] = status
            served[group] = offsets
            if pace.due():
                yield STEP
        # looked up in the groups' own dicts: a set of keys made here cost 6.5 ms to free,
        # in one piece, at 60,000 partitions
        for i, group in enumerate(began, 1):
            mine = self.windows.get(group)
            if mine is not None:
                offsets = served.get(group)
                gone = list(mine) if offsets is None else [
                    (topic, partition) for topic, partition in mine
                    if (entry := offsets.get(topic, _NO_PARTITIONS).get(partition)) is None or entry[0] < 0]
                for key in gone:
                    del mine[key]
                self.partitions -= len(gone)
                if not mine:
                    del self.windows[group]
            if not i % ROWS_PER_PACE and pace.due():
                yield STEP
        return worst

    def statuses(self, coordinator, now_ms: int) -> dict[str, str]:
        """`statuses_in_steps`' result, in one piece."""
        return run_through(self.statuses_in_steps(coordinator, now_ms))
