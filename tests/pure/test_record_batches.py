"""Record batches' headers (`protocol.record_batches`), cross-checked against kafka-python's
reader: transactional data batches, COMMIT and ABORT control batches (built as a broker
writes them: the control bit set, the CRC over the rest), old message sets stepped over, a
batch cut short at the end of a fetch left unread, and what cannot be read refused."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.util import calc_crc32c

from protocol import DecodeError
from protocol.record_batches import ABORT, COMMIT, CONTROL, TRANSACTIONAL, batch_headers


def data_batch(base: int, values: list[bytes], producer_id: int = -1, epoch: int = -1) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, producer_id >= 0, producer_id, epoch, 0 if producer_id >= 0 else -1,
                                        1 << 20)
    for i, value in enumerate(values):
        builder.append(i, 1_700_000_000_000 + i, None, value, [])
    return _rebased(bytes(builder.build()), base)


def control_batch(base: int, producer_id: int, epoch: int, kind: int) -> bytes:
    """A marker as a broker writes one: one record, key (version 0, type), the control and
    transactional bits set."""
    builder = DefaultRecordBatchBuilder(2, 0, True, producer_id, epoch, -1, 1 << 20)
    builder.append(0, 1_700_000_000_000, struct.pack(">hh", 0, kind), b"\x00\x00\x00\x00\x00\x00", [])
    batch = bytearray(builder.build())
    attributes = struct.unpack_from(">h", batch, 21)[0] | CONTROL
    struct.pack_into(">h", batch, 21, attributes)
    struct.pack_into(">I", batch, 17, calc_crc32c(bytes(batch[21:])))
    return _rebased(bytes(batch), base)


def _rebased(batch: bytes, base: int) -> bytes:
    return struct.pack(">q", base) + batch[8:]


def test_headers_agree_with_kafka_pythons_reader():
    records = (data_batch(0, [b"a", b"b", b"c"]) + data_batch(3, [b"d"], producer_id=7, epoch=2)
               + control_batch(4, 7, 2, COMMIT) + control_batch(5, 7, 3, ABORT))
    ours = list(batch_headers(records))
    pos, theirs = 0, []
    while pos < len(records):
        size = 12 + struct.unpack_from(">i", records, pos + 8)[0]
        batch = DefaultRecordBatch(records[pos:pos + size])
        assert batch.validate_crc()
        kinds = [r.type for r in batch] if batch.is_control_batch else [None]
        theirs.append((batch.base_offset, batch.base_offset + batch.last_offset_delta, batch.producer_id,
                       batch.producer_epoch, batch.is_transactional, kinds[0]))
        pos += size
    assert [(b.base_offset, b.last_offset, b.producer_id, b.producer_epoch, bool(b.attributes & TRANSACTIONAL),
             b.control_type) for b in ours] == theirs
    assert [b.control_type for b in ours] == [None, None, COMMIT, ABORT]
    assert [b.next_offset for b in ours] == [3, 4, 5, 6]


def test_a_batch_cut_short_is_left_for_the_next_fetch():
    whole = data_batch(0, [b"x"]) + control_batch(1, 9, 0, COMMIT)
    assert [b.base_offset for b in batch_headers(whole[:-5])] == [0]
    assert [b.base_offset for b in batch_headers(whole[:7])] == []  # not even a length
    assert list(batch_headers(b"")) == []


def test_old_message_sets_are_stepped_over():
    legacy = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    legacy.append(0, 1_700_000_000_000, None, b"old")
    old = bytes(legacy.build())
    headers = list(batch_headers(old + control_batch(1, 4, 0, ABORT)))
    assert [(b.magic, b.control_type) for b in headers] == [(1, None), (2, ABORT)]


@pytest.mark.parametrize("broken", [
    struct.pack(">qi", 0, -4) + b"\x00" * 20,  # a negative length
    struct.pack(">qi", 0, 2) + b"\x00\x00",  # too short to hold a magic byte
    struct.pack(">qi", 0, 10) + b"\x00" * 4 + b"\x02" + b"\x00" * 5,  # magic 2 without its header
])
def test_what_cannot_be_read_is_refused(broken):
    with pytest.raises(DecodeError):
        list(batch_headers(broken))


def test_a_control_record_that_cannot_be_read_is_refused():
    batch = bytearray(control_batch(0, 1, 0, COMMIT))
    batch[61:] = b"\xff" * (len(batch) - 61)  # the record's varints run on
    with pytest.raises(DecodeError):
        list(batch_headers(bytes(batch)))
