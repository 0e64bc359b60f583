"""The rules of the transaction records (store/transactions.py), without ZooKeeper: what a
record means, what replaces it, how it reads and is written; and what the gateway reads of
InitProducerId and EndTxn (gateway/transactions.py) as it relays them."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from coordinator.gateway.transactions import Recorder, observer, observing
from coordinator.store import layout
from coordinator.store.transactions import (ABORTED, BEGUN, COMMITTED, UNRECORDED, Outcome, after, decode, encode,
                                            expired, merged)
from protocol import ErrorCode, RequestHeader, decode_response, encode_request, encode_response
from protocol.messages import build
from protocol.schemas import ADD_OFFSETS_TO_TXN, END_TXN, INIT_PRODUCER_ID

TX = "orders-tx"


def o(pid, epoch, state, at_ms=1000, previous=None):
    return Outcome(TX, pid, epoch, state, at_ms, previous)


# -- ordering -------------------------------------------------------------------------------

def test_a_higher_epoch_of_the_same_producer_id_is_later_whatever_the_clocks_say():
    assert after(o(7, 3, BEGUN, at_ms=1), o(7, 2, COMMITTED, at_ms=9999))
    assert not after(o(7, 2, COMMITTED, at_ms=9999), o(7, 3, BEGUN, at_ms=1))


def test_at_one_epoch_an_end_follows_begun_and_a_later_end_an_earlier_one():
    assert after(o(7, 3, COMMITTED), o(7, 3, BEGUN))
    assert after(o(7, 3, ABORTED, at_ms=2000), o(7, 3, COMMITTED, at_ms=1000))  # transaction version 1: many per epoch
    assert not after(o(7, 3, ABORTED, at_ms=500), o(7, 3, COMMITTED, at_ms=1000))


def test_begun_never_replaces_its_own_epoch():
    assert not after(o(7, 3, BEGUN), o(7, 3, COMMITTED))
    assert not after(o(7, 3, BEGUN, at_ms=2000), o(7, 3, BEGUN, at_ms=1000))


def test_between_producer_ids_the_later_seen_wins():
    # producer ids are not ordered (a new one when the epoch is exhausted, or the id expired)
    assert after(o(3, 0, BEGUN, at_ms=2000), o(9, 32766, COMMITTED, at_ms=1000))
    assert not after(o(9, 5, COMMITTED, at_ms=1000), o(3, 0, BEGUN, at_ms=2000))


# -- what a record becomes ------------------------------------------------------------------

def test_the_first_state_is_written_as_it_is():
    assert merged(o(7, 0, BEGUN), None) == o(7, 0, BEGUN)


def test_begun_after_an_end_keeps_the_end_as_previous():
    record = merged(o(7, 1, BEGUN, at_ms=2000), o(7, 0, COMMITTED, at_ms=1000))
    assert record == o(7, 1, BEGUN, at_ms=2000, previous=o(7, 0, COMMITTED, at_ms=1000))
    # and the next begun keeps it still (the begun in between says nothing of its outcome)
    again = merged(o(7, 2, BEGUN, at_ms=3000), record)
    assert again.previous == o(7, 0, COMMITTED, at_ms=1000)


def test_an_end_after_an_end_keeps_one_previous_only():
    first = merged(o(7, 0, COMMITTED, at_ms=1000), o(7, 0, BEGUN, at_ms=500))
    second = merged(o(7, 0, ABORTED, at_ms=2000), first)
    third = merged(o(7, 0, COMMITTED, at_ms=3000), second)
    assert third == o(7, 0, COMMITTED, at_ms=3000, previous=o(7, 0, ABORTED, at_ms=2000))
    assert third.previous.previous is None


def test_a_record_never_moves_backwards():
    record = o(7, 4, BEGUN, at_ms=5000)
    assert merged(o(7, 3, BEGUN, at_ms=6000), record) is None
    assert merged(o(7, 4, BEGUN, at_ms=6000), record) is None


def test_a_late_end_becomes_the_previous_of_a_later_record():
    record = o(7, 4, BEGUN, at_ms=5000)  # the end of epoch 3, relayed by a slower instance, lands after
    assert merged(o(7, 3, COMMITTED, at_ms=4900), record) == o(7, 4, BEGUN, at_ms=5000,
                                                                previous=o(7, 3, COMMITTED, at_ms=4900))
    # not when the previous is newer already
    newer = o(7, 4, BEGUN, at_ms=5000, previous=o(7, 3, ABORTED, at_ms=4950))
    assert merged(o(7, 2, COMMITTED, at_ms=100), newer) is None


def test_a_state_seen_twice_is_written_once():
    record = o(7, 1, COMMITTED, at_ms=2000, previous=o(7, 0, ABORTED))
    assert merged(o(7, 1, COMMITTED, at_ms=2000), record) is None
    assert merged(o(7, 0, ABORTED), record) is None


def test_a_new_producer_id_replaces_the_old_one():
    record = merged(o(11, 0, BEGUN, at_ms=9000), o(7, 32766, ABORTED, at_ms=8000))
    assert record == o(11, 0, BEGUN, at_ms=9000, previous=o(7, 32766, ABORTED, at_ms=8000))


# -- the record's bytes ---------------------------------------------------------------------

def test_a_record_reads_as_written():
    record = o(7, 1, BEGUN, at_ms=2000, previous=o(7, 0, COMMITTED, at_ms=1000))
    assert decode(TX, encode(record)) == record
    assert layout.decode(encode(o(7, 0, ABORTED, at_ms=5))) == {
        "producer_id": 7, "producer_epoch": 0, "state": "aborted", "at_ms": 5}


@pytest.mark.parametrize("data", [b"", b"[]", b'{"producer_id": 1}', b'{"producer_id": "1", "producer_epoch": 0, '
                                  b'"state": "begun", "at_ms": 1}', b'{"producer_id": 1, "producer_epoch": 0, '
                                  b'"state": "prepared", "at_ms": 1}', b"\xff"])
def test_what_is_not_a_record_reads_as_none(data):
    assert decode(TX, data) is None


def test_the_record_path_escapes_the_transactional_id():
    assert layout.transaction_path("a/b.c") == "/groupkeeper/transactions/a%2Fb%2Ec"


def test_expiry_is_by_the_time_the_state_was_seen():
    assert expired(o(7, 0, BEGUN, at_ms=1000), now_ms=5001, retention_ms=4000)
    assert not expired(o(7, 0, BEGUN, at_ms=1000), now_ms=5000, retention_ms=4000)


# -- the gateway's reading ------------------------------------------------------------------

class Sink:
    def __init__(self):
        self.seen = []

    def begun(self, *args):
        self.seen.append(("begun", *args))

    def ended(self, *args):
        self.seen.append(("ended", *args))


def request(api, version, values, correlation_id=7):
    return encode_request(RequestHeader(api.key, version, correlation_id, "client"),
                          build(api.request.struct, values))[4:]


def answer(api, version, values, correlation_id=7):
    return encode_response(RequestHeader(api.key, version, correlation_id, None), build(api.response.struct, values))[4:]


@pytest.mark.parametrize("version", [0, 2, 3, 4, 5])
def test_init_producer_id_answered_none_is_begun_with_the_answers_producer(version):
    sink = Sink()
    seen = observer(INIT_PRODUCER_ID.key, version, request(INIT_PRODUCER_ID, version, {
        "transactional_id": TX, "transaction_timeout_ms": 60000}), sink)
    seen(answer(INIT_PRODUCER_ID, version, {"error_code": 0, "producer_id": 4000, "producer_epoch": 3}))
    assert sink.seen == [("begun", TX, 4000, 3)]
    seen(answer(INIT_PRODUCER_ID, version, {"error_code": ErrorCode.CONCURRENT_TRANSACTIONS, "producer_id": -1,
                                            "producer_epoch": -1}))
    assert len(sink.seen) == 1


def test_an_idempotent_producers_init_producer_id_is_not_recorded():
    assert observer(INIT_PRODUCER_ID.key, 4, request(INIT_PRODUCER_ID, 4, {
        "transactional_id": None, "transaction_timeout_ms": 60000}), Sink()) is None


@pytest.mark.parametrize("version", [0, 3, 4])
@pytest.mark.parametrize("committed", [True, False])
def test_end_txn_answered_none_is_its_outcome(version, committed):
    sink = Sink()
    seen = observer(END_TXN.key, version, request(END_TXN, version, {
        "transactional_id": TX, "producer_id": 4000, "producer_epoch": 3, "committed": committed}), sink)
    seen(answer(END_TXN, version, {"error_code": ErrorCode.PRODUCER_FENCED}))
    assert sink.seen == []
    seen(answer(END_TXN, version, {"error_code": 0}))
    assert sink.seen == [("ended", TX, 4000, 3, committed)]


def test_end_txn_v5_records_the_requests_producer_epoch_not_the_answers():
    # KIP-890 (transaction version 2): the answer carries the epoch of the producer's NEXT transaction
    sink = Sink()
    seen = observer(END_TXN.key, 5, request(END_TXN, 5, {
        "transactional_id": TX, "producer_id": 4000, "producer_epoch": 3, "committed": True}), sink)
    seen(answer(END_TXN, 5, {"error_code": 0, "producer_id": 4000, "producer_epoch": 4}))
    assert sink.seen == [("ended", TX, 4000, 3, True)]


def test_other_apis_and_unreadable_requests_are_not_observed():
    assert observer(ADD_OFFSETS_TO_TXN.key, 3, request(ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": TX, "producer_id": 1, "producer_epoch": 0, "group_id": "g"}), Sink()) is None
    assert observer(END_TXN.key, 3, b"\x00\x1a\x00\x03\x00", Sink()) is None


def test_the_relayed_answer_goes_on_as_it_came_even_when_it_does_not_read():
    sink = Sink()
    frame = request(END_TXN, 3, {"transactional_id": TX, "producer_id": 1, "producer_epoch": 0, "committed": True})
    relay = observing(END_TXN.key, 3, frame, sink, None)
    good = answer(END_TXN, 3, {"error_code": 0})
    assert relay(good) == len(good).to_bytes(4, "big") + good
    assert decode_response(END_TXN.key, 3, relay(good)[4:])[1].error_code == 0
    assert relay(b"\x00\x00\x00\x07") == b"\x00\x00\x00\x04\x00\x00\x00\x07"  # too short to read: relayed, unrecorded
    assert sink.seen == [("ended", TX, 1, 0, True), ("ended", TX, 1, 0, True)]
    # a rewriter already there (ACLs merging) still makes the frame
    assert observing(END_TXN.key, 3, frame, sink, lambda a: b"R" + a)(good) == b"R" + good
    assert observing(ADD_OFFSETS_TO_TXN.key, 3, frame, sink, None) is None


# -- the gateway's queue --------------------------------------------------------------------

class SlowOutcomes:
    def __init__(self):
        self.recorded = []
        self.go = trio.Event()

    async def record_begun(self, txid, pid, epoch, at_ms, timeout):
        await self.go.wait()
        self.recorded.append((BEGUN, txid, pid, epoch))

    async def record_end(self, txid, pid, epoch, committed, at_ms, timeout):
        await self.go.wait()
        self.recorded.append((COMMITTED if committed else ABORTED, txid, pid, epoch))


async def test_the_queue_never_blocks_drops_past_its_limit_and_keeps_order():
    outcomes = SlowOutcomes()
    recorder = Recorder(outcomes, limit=2)
    dropped = UNRECORDED.labels("queue_full")._value.get()
    async with trio.open_nursery() as nursery:
        await nursery.start(recorder.run)
        recorder.begun(TX, 1, 0)
        await trio.testing.wait_all_tasks_blocked()  # the task holds the first, waiting on ZooKeeper
        recorder.ended(TX, 1, 0, True)
        recorder.ended(TX, 1, 0, False)
        recorder.ended(TX, 1, 1, True)  # over the limit: dropped
        assert UNRECORDED.labels("queue_full")._value.get() == dropped + 1
        outcomes.go.set()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert outcomes.recorded == [(BEGUN, TX, 1, 0), (COMMITTED, TX, 1, 0), (ABORTED, TX, 1, 0)]
