"""Consumer lag of the groups coordinated here: each committed offset against where its
partition's log ends (`topics.log_ends.LogEnds`), read per scrape from what is in memory
(the stores' confirmed offsets), no request made."""

from __future__ import annotations

from collections.abc import Iterator

from ..topics.log_ends import Key, LogEnds


def committed(coordinator) -> Iterator[tuple[str, str, int, int]]:
    """(group, topic, partition, committed offset) of every group served here: the offsets
    ZooKeeper has confirmed, of loaded group-partitions not being handed over."""
    for owned in list(coordinator.owned.values()):
        if not owned.loaded.is_set() or owned.releasing:
            continue
        for group, topics in owned.store.durable.items():
            for topic, partitions in topics.items():
                for partition, entry in partitions.items():
                    if entry[0] >= 0:
                        yield group, topic, partition, entry[0]


def committed_partitions(coordinator) -> set[Key]:
    """The partitions that some group here has an offset for: whose ends lag needs."""
    return {(topic, partition) for _, topic, partition, _ in committed(coordinator)}


def lag(coordinator, ends: LogEnds) -> tuple[list[tuple[str, str, int, int]], int]:
    """((group, topic, partition, lag) where the log's end is known, and how many committed
    partitions' ends are not). Lag is never negative: an end seen before the commit that
    passed it is older than the commit."""
    rows, unknown = [], 0
    for group, topic, partition, offset in committed(coordinator):
        end = ends.get(topic, partition)
        if end is None:
            unknown += 1
        else:
            rows.append((group, topic, partition, max(0, end[0] - offset)))
    return rows, unknown
