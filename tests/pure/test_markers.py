"""Reading a transaction's end from the brokers' __consumer_offsets (`topics.markers`):
the group's partition as Kafka computes it (Java's String.hashCode), and the first marker
of the producer at its epoch or a later one after where its offsets started, read from a
partition log served by a stand-in for the leader's Fetch and ListOffsets (the real
brokers': tests/kafka/test_exactly_once.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio
import trio.testing

from coordinator.topics.markers import OFFSETS_TOPIC, MarkerReader, Unavailable, java_hash, offsets_partition
from coordinator.topics.view import Broker, PartitionState, TopicView
from protocol import ErrorCode
from protocol.record_batches import ABORT, COMMIT
from protocol.schemas import FETCH, FIND_COORDINATOR, LIST_OFFSETS
from tests.pure.test_record_batches import control_batch, data_batch


@pytest.mark.parametrize("text, expected", [
    ("", 0), ("a", 97), ("hello", 99162322), ("Hello World", -862545276),
    ("polygenelubricants", -(1 << 31)), ("\U0001F600", 31 * 0xD83D + 0xDE00), ("é", 233),
])
def test_java_string_hash(text, expected):
    assert java_hash(text) == expected


def test_the_groups_partition_as_kafka_computes_it():
    assert offsets_partition("hello", 50) == 99162322 % 50
    assert offsets_partition("Hello World", 50) == 862545276 % 50
    assert offsets_partition("polygenelubricants", 7) == 0  # Utils.abs(Integer.MIN_VALUE) is 0


class Leader:
    """The leader of __consumer_offsets-p: a log of whole batches; Fetch answers whole
    batches from the one holding the offset asked, up to the bytes asked (at least one)."""

    def __init__(self, partition: int):
        self.partition = partition
        self.batches: list[tuple[int, bytes]] = []  # (base offset, batch)
        self.end = 0
        self.log_start = 0
        self.calls: list[tuple[str, int]] = []
        self.error = ErrorCode.NONE

    def write(self, batch: bytes, count: int = 1) -> None:
        self.batches.append((self.end, batch))
        self.end += count

    async def call(self, node, api, versions, body):
        self.calls.append((api.name, node))
        if api is LIST_OFFSETS:
            return SimpleNamespace(topics=[SimpleNamespace(name=OFFSETS_TOPIC, partitions=[SimpleNamespace(
                partition_index=self.partition, error_code=ErrorCode.NONE, offset=self.end)])])
        if api is FIND_COORDINATOR:
            return SimpleNamespace(coordinators=[])
        assert api is FETCH
        asked = body["topics"][0]["partitions"][0]
        offset, limit = asked["fetch_offset"], asked["partition_max_bytes"]
        error, records = self.error, b""
        if offset < self.log_start or offset > self.end:
            error = ErrorCode.OFFSET_OUT_OF_RANGE
        else:
            for base, batch in self.batches:
                nxt = next((b for b, _ in self.batches if b > base), self.end)
                if nxt <= offset:
                    continue
                if records and len(records) + len(batch) > limit:
                    break
                records += batch
        return SimpleNamespace(responses=[SimpleNamespace(partitions=[SimpleNamespace(
            partition_index=self.partition, error_code=error, high_watermark=self.end, records=records)])])

    def close(self):
        pass


GROUP = "copier"
PARTITIONS = 10


def reader() -> tuple[MarkerReader, Leader]:
    view = TopicView()
    view.brokers = {1: Broker(1, "127.0.0.1", 1)}
    view.partitions = {OFFSETS_TOPIC: PARTITIONS}
    partition = offsets_partition(GROUP, PARTITIONS)
    view.states = {(OFFSETS_TOPIC, p): PartitionState(1, (1,), 0) for p in range(PARTITIONS)}
    markers = MarkerReader(view)
    leader = Leader(partition)
    markers.nodes = leader
    return markers, leader


def find(markers, start, pid=7, epoch=0, **kw):
    return trio.run(lambda: markers.find(GROUP, pid, epoch, start, **kw))


def test_the_first_end_of_the_producer_after_where_its_offsets_started():
    markers, leader = reader()
    leader.write(control_batch(0, 7, 0, ABORT))  # an earlier transaction's end, before the start
    start = trio.run(markers.log_end, GROUP)
    assert start == 1
    leader.write(control_batch(1, 8, 0, ABORT))  # another producer's
    leader.write(data_batch(2, [b"x", b"y"], producer_id=9, epoch=0), 2)
    assert find(markers, start).outcome is None  # open still: nothing of it yet
    leader.write(control_batch(4, 7, 0, COMMIT))
    leader.write(control_batch(5, 7, 0, ABORT))  # a later transaction's (the same epoch: version 1)
    scan = find(markers, start)
    assert (scan.outcome, scan.next_offset) == ("committed", 5)


def test_a_fence_or_timeout_abort_carries_a_later_epoch():
    markers, leader = reader()
    leader.write(control_batch(0, 7, 4, ABORT))  # bumped from 3 by the coordinator
    assert find(markers, 0, epoch=3).outcome == "aborted"
    assert find(markers, 0, pid=7, epoch=5).outcome is None  # an earlier epoch's end is not a later one's


def test_reading_goes_on_where_it_stopped_and_within_its_budget(monkeypatch):
    markers, leader = reader()
    for i in range(20):
        leader.write(data_batch(i, [b"v" * 1000], producer_id=100 + i, epoch=0))
    scan = find(markers, 0)
    assert (scan.outcome, scan.next_offset) == (None, 20)
    leader.write(control_batch(20, 7, 0, ABORT))
    fetches = len(leader.calls)
    assert find(markers, scan.next_offset).outcome == "aborted"
    assert len(leader.calls) == fetches + 1  # only what was new
    monkeypatch.setattr("coordinator.topics.markers.FETCH_BYTES", 1500)  # a batch a Fetch
    partial = find(markers, 0, budget=3000)
    assert (partial.outcome, partial.next_offset) == (None, 3)  # three Fetches, then left for the next look
    assert find(markers, partial.next_offset, budget=10**9).outcome == "aborted"


def test_a_log_that_no_longer_holds_the_start_says_so():
    markers, leader = reader()
    leader.write(control_batch(0, 7, 0, COMMIT))
    leader.log_start = 1
    scan = find(markers, 0)
    assert scan.gone and scan.outcome is None


def test_a_partition_that_cannot_be_read_is_unavailable():
    markers, leader = reader()
    leader.error = ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(Unavailable):
        find(markers, 0)
    markers.view.states.clear()
    with pytest.raises(Unavailable):
        find(markers, 0)


def test_without_the_topic_the_start_is_unknown_and_the_brokers_are_asked_to_create_it():
    markers, leader = reader()
    markers.view.partitions = {}

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(markers.run)
            assert await markers.log_end(GROUP) == -1
            assert await markers.log_end(GROUP) == -1  # asked once, not again within ENSURE_INTERVAL
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    trio.run(main)
    assert [name for name, _ in leader.calls] == ["FindCoordinator"]
    with pytest.raises(Unavailable):
        find(markers, 0)
