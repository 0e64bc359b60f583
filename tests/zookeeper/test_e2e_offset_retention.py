"""Offset retention end to end: a real `groupkeeper run` with a retention of seconds. An
abandoned group's offsets and an offsets-only group's leave OffsetFetch and ZooKeeper (the
groups deleted), an active group keeps the offsets of what it subscribes to and loses those
of a topic it does not; logged as events and counted on /metrics."""

from __future__ import annotations

import threading
import time

from kazoo.client import KazooClient

from coordinator.store import layout
from protocol import ErrorCode
from protocol.schemas import OFFSET_FETCH

from tests.support.clients import RawConnection, RawMember
from tests.support.coordinator_process import CoordinatorProcess, read_events

RETENTION = 3.0  # seconds


def fetched(port: int, group: str) -> dict[tuple[str, int], int]:
    """Every committed offset of `group`, as OffsetFetch answers."""
    connection = RawConnection(port)
    try:
        answer = connection.call(OFFSET_FETCH, 5, {"group_id": group, "topics": None})
    finally:
        connection.close()
    assert answer.error_code == ErrorCode.NONE
    return {(t.name, p.partition_index): p.committed_offset for t in answer.topics for p in t.partitions
            if p.committed_offset >= 0}


def stored(process: CoordinatorProcess) -> dict[str, list[str]]:
    """Group -> the topics it has offsets znodes for, as ZooKeeper holds them."""
    client = KazooClient(hosts=process.zookeeper)
    client.start(timeout=10)
    try:
        found = {}
        for partition in client.get_children(f"{layout.ROOT}/partitions"):
            groups = f"{layout.ROOT}/partitions/{partition}/groups"
            for node in client.get_children(groups) if client.exists(groups) else []:
                offsets = f"{groups}/{node}/offsets"
                found[layout.unescape(node)] = sorted(
                    layout.unescape(t) for t in (client.get_children(offsets) if client.exists(offsets) else []))
        return found
    finally:
        client.stop()
        client.close()


def test_abandoned_offsets_leave_offsetfetch_and_zookeeper_and_an_active_groups_stay(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path, offsets_retention_minutes=RETENTION / 60,
                                 offsets_retention_check_interval_ms=200, events_compress=False)
    process.start()
    active, abandoned, simple = (RawMember(process.port, name, "t") for name in ("active", "abandoned", "simple"))
    stop = threading.Event()
    try:
        process.topic("t", 2)
        process.topic("old", 1)
        assert active.join_and_sync() == {"t": [0, 1]}
        assert abandoned.join_and_sync() == {"t": [0, 1]}
        assert active.commit("t", {0: 5, 1: 7}) == [ErrorCode.NONE] * 2
        assert active.commit("old", {0: 3}) == [ErrorCode.NONE]  # a topic it no longer subscribes to
        assert abandoned.commit("t", {0: 11}) == [ErrorCode.NONE]
        assert simple.commit("t", {1: 13}) == [ErrorCode.NONE]  # no generation: a simple consumer's
        committed = time.monotonic()

        def heartbeats() -> None:  # the active member stays, Stable
            while not stop.wait(0.3):
                assert active.heartbeat() == ErrorCode.NONE

        beating = threading.Thread(target=heartbeats, daemon=True)
        beating.start()
        time.sleep(2.0)
        assert abandoned.leave() == ErrorCode.NONE  # empty from now: its offsets count from here
        emptied = time.monotonic()
        assert fetched(process.port, "abandoned") == {("t", 0): 11}
        assert stored(process)["abandoned"] == ["t"]

        deadline = time.monotonic() + 30
        while fetched(process.port, "simple") or fetched(process.port, "active").get(("old", 0)) is not None:
            assert time.monotonic() < deadline, "the simple consumer's and the unsubscribed offsets never expired"
            time.sleep(0.05)
        assert time.monotonic() - committed >= RETENTION - 0.5
        assert fetched(process.port, "abandoned") == {("t", 0): 11}  # empty for less than the retention
        while fetched(process.port, "abandoned"):
            assert time.monotonic() < deadline, "the abandoned group's offsets never expired"
            time.sleep(0.05)
        assert time.monotonic() - emptied >= RETENTION - 0.5
        assert fetched(process.port, "active") == {("t", 0): 5, ("t", 1): 7}
        assert beating.is_alive()

        deadline = time.monotonic() + 10
        while stored(process) != {"active": ["t"]}:  # the groups deleted, the emptied topic's znodes too
            assert time.monotonic() < deadline, stored(process)
            time.sleep(0.1)
        _, text = process.scrape()
        assert "groupkeeper_offsets_expired_total 3.0" in text
    finally:
        stop.set()
        for member in (active, abandoned, simple):
            member.close()
        assert process.stop() == 0
    expired = sorted((e["group"], e["partitions"], e["group_deleted"]) for e in read_events(tmp_path / "events")
                     if e["type"] == "offsets_expired")
    assert expired == [("abandoned", 1, True), ("active", 1, False), ("simple", 1, True)]
