"""Transactions whose end the gateway never saw (issue 36), in front of Apache Kafka 4.4:
the owner of the group reads the end from the COMMIT or ABORT marker Kafka's transaction
coordinator writes in the group's partition of __consumer_offsets (coordinator/topics/markers.py,
cluster/pending_check.py).

A producer is played here request by request, so that each case is exact: its transaction
requests go straight to Kafka's transaction coordinator (as if relayed by a gateway
instance that died before recording the end, or answered to a producer that died), and only
its TxnOffsetCommit goes to groupkeeper. Cases: a commit and an abort not recorded; a
transaction left open and fenced by a new producer of the same transactional id (Kafka
aborts it, with a bumped epoch); the offsets pending meanwhile answer a read_committed
consumer's OffsetFetch UNSTABLE_OFFSET_COMMIT."""

from __future__ import annotations

import time

import pytest

from protocol import ErrorCode
from protocol.schemas import ADD_OFFSETS_TO_TXN, END_TXN, FIND_COORDINATOR, INIT_PRODUCER_ID, METADATA, OFFSET_FETCH, \
    TXN_OFFSET_COMMIT
from tests.support.clients import RawConnection, committed
from tests.support.kafka import create_topic, start_gateway

pytestmark = pytest.mark.conformance  # `make conformance` (tests/conftest.py)

TOPIC = "markers-in"
RETRIED = (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
           ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR)


@pytest.fixture(scope="module")
def gateway(zookeeper, tmp_path_factory, kafka):
    """A gateway that looks for unrecorded ends every half second (the default is 5 s)."""
    process = start_gateway(zookeeper, tmp_path_factory.mktemp("gateway"), kafka,
                            transactions_check_interval_ms=500)
    try:
        yield process
    finally:
        assert process.stop() == 0


def retried(call, deadline: float = 60.0):
    """`call()`'s answer once its error is not one a producer retries."""
    until = time.monotonic() + deadline
    while True:
        answer = call()
        if answer.error_code not in RETRIED:
            return answer
        assert time.monotonic() < until, f"still {ErrorCode(answer.error_code).name}"
        time.sleep(0.1)


class Producer:
    """A transactional producer's requests to Kafka's transaction coordinator, straight."""

    def __init__(self, kafka, transactional_id: str):
        self.transactional_id = transactional_id
        first = RawConnection(kafka.nodes[0].port)
        try:
            found = retried(lambda: first.call(FIND_COORDINATOR, 3, {"key": transactional_id, "key_type": 1}))
        finally:
            first.close()
        assert found.error_code == ErrorCode.NONE, found
        self.connection = RawConnection(found.port)
        self.init()

    def init(self) -> None:
        answer = retried(lambda: self.connection.call(INIT_PRODUCER_ID, 4, {
            "transactional_id": self.transactional_id, "transaction_timeout_ms": 60_000}))
        assert answer.error_code == ErrorCode.NONE, answer
        self.producer_id, self.epoch = answer.producer_id, answer.producer_epoch

    def add_offsets(self, group: str) -> None:
        answer = retried(lambda: self.connection.call(ADD_OFFSETS_TO_TXN, 3, {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "producer_epoch": self.epoch, "group_id": group}))
        assert answer.error_code == ErrorCode.NONE, answer

    def end(self, commit: bool) -> None:
        answer = retried(lambda: self.connection.call(END_TXN, 3, {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "producer_epoch": self.epoch, "committed": commit}))
        assert answer.error_code == ErrorCode.NONE, answer

    def commit_offsets(self, gateway, group: str, offsets: dict[int, int]) -> None:
        """TxnOffsetCommit to groupkeeper, as a producer of a simple (memberless) group sends it."""
        connection = RawConnection(gateway.port)
        try:
            answer = connection.call(TXN_OFFSET_COMMIT, 3, {
                "transactional_id": self.transactional_id, "group_id": group, "producer_id": self.producer_id,
                "producer_epoch": self.epoch, "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": TOPIC, "partitions": [
                    {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                     "committed_metadata": ""} for p, o in sorted(offsets.items())]}]})
        finally:
            connection.close()
        assert {p.error_code for t in answer.topics for p in t.partitions} == {ErrorCode.NONE}, answer

    def close(self) -> None:
        self.connection.close()


def stable(gateway, group: str) -> ErrorCode:
    """OffsetFetch as a read_committed consumer asks it (require_stable): its error, the
    group's or, for v7, its partitions' (one for both here)."""
    connection = RawConnection(gateway.port)
    try:
        answer = connection.call(OFFSET_FETCH, 7, {"group_id": group, "topics": [
            {"name": TOPIC, "partition_indexes": [0, 1]}], "require_stable": True})
    finally:
        connection.close()
    errors = {answer.error_code} | {p.error_code for t in answer.topics for p in t.partitions}
    return ErrorCode(max(errors))


def wait_for(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
    return value


@pytest.fixture(scope="module", autouse=True)
def topic(kafka, gateway):
    create_topic(kafka, TOPIC, 2)
    connection = RawConnection(gateway.port)
    try:
        connection.wait_for_topic(TOPIC, 2)
    finally:
        connection.close()


def test_the_gateway_has_the_brokers_create_their_offsets_topic(kafka, gateway):
    connection = RawConnection(kafka.nodes[0].port)
    try:
        wait_for(lambda: [t for t in connection.call(METADATA, 1, {"topics": [{"name": "__consumer_offsets"}]}).topics
                          if t.error_code == ErrorCode.NONE and t.partitions],
                 "__consumer_offsets was never created")
    finally:
        connection.close()


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "aborted"])
def test_an_end_the_gateway_never_saw_is_read_from_the_brokers(kafka, gateway, commit):
    group, txid = f"unseen-{commit}", f"unseen-tx-{commit}"
    producer = Producer(kafka, txid)
    try:
        producer.add_offsets(group)
        producer.commit_offsets(gateway, group, {0: 11, 1: 22})
        assert stable(gateway, group) == ErrorCode.UNSTABLE_OFFSET_COMMIT  # pending: a consumer waits
        producer.end(commit)
    finally:
        producer.close()
    wait_for(lambda: stable(gateway, group) == ErrorCode.NONE, "the pending offsets were never resolved")
    assert committed([gateway.port], group) == ({(TOPIC, 0): 11, (TOPIC, 1): 22} if commit else {})
    read = gateway.wait_for_log("a transaction's end read from the brokers", transactional_id=txid)
    assert read["outcome"] == ("committed" if commit else "aborted")
    assert read["producer_id"] == producer.producer_id


def test_an_open_transaction_fenced_by_a_new_producer_is_read_as_aborted(kafka, gateway):
    group, txid = "fenced", "fenced-tx"
    old = Producer(kafka, txid)
    try:
        old.add_offsets(group)
        old.commit_offsets(gateway, group, {0: 5})
        first_epoch = old.epoch
        new = Producer(kafka, txid)  # InitProducerId: Kafka aborts the open transaction, bumping the epoch
        new.close()
    finally:
        old.close()
    assert new.producer_id == old.producer_id and new.epoch > first_epoch
    wait_for(lambda: stable(gateway, group) == ErrorCode.NONE, "the fenced transaction's offsets stayed pending")
    assert committed([gateway.port], group) == {}
    read = gateway.wait_for_log("a transaction's end read from the brokers", transactional_id=txid)
    assert read["outcome"] == "aborted" and read["producer_epoch"] == first_epoch
