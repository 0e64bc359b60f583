"""Record batches' headers, read without their records: what groupkeeper needs of a log is
its transactions' control markers (KIP-98), never a record's key or value.

A record batch (magic 2) opens with a fixed 61-byte header: base offset (int64), batch
length (int32, the bytes after it), partition leader epoch (int32), magic (int8), CRC
(uint32), attributes (int16: bit 4 transactional, bit 5 control), last offset delta
(int32), first and max timestamps (int64), producer id (int64), producer epoch (int16),
base sequence (int32) and the record count (int32). A control batch holds one record
whose key is a version (int16) and a type (int16): 0 ABORT, 1 COMMIT. Control batches are
never compressed. Older message sets (magic 0 and 1) share the first 12 bytes (offset,
size) and carry no transactions: they are stepped over.

A Fetch answer's record set may end with a batch cut short (the broker fills up to the
bytes asked); it is not read, and `BatchHeader`s stop before it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from .exceptions import DecodeError
from .varint import read_varint, read_varlong

_PREFIX = struct.Struct(">qi")  # base offset, batch length
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = _HEADER.size  # 61
TRANSACTIONAL = 0x10
CONTROL = 0x20
ABORT, COMMIT = 0, 1


@dataclass(frozen=True)
class BatchHeader:
    base_offset: int
    last_offset: int
    magic: int
    attributes: int
    producer_id: int
    producer_epoch: int
    control_type: int | None  # ABORT or COMMIT for a control batch; None otherwise

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def batch_headers(records: bytes | memoryview) -> Iterator[BatchHeader]:
    """The whole batches of a record set, in order (see the module's docstring). Raises
    DecodeError for a batch that cannot be read (a length that does not hold its header)."""
    view = memoryview(records)
    pos, end = 0, len(view)
    while end - pos >= _PREFIX.size:
        base_offset, length = _PREFIX.unpack_from(view, pos)
        size = _PREFIX.size + length
        if length < 0:
            raise DecodeError(f"a record batch of negative length at {pos}")
        if end - pos < size:
            return  # cut short by the fetch's size: the next fetch reads it
        if size < 17:
            raise DecodeError(f"a record batch of {size} bytes at {pos}")
        magic = view[pos + 16]
        if magic < 2:  # a message set entry: no transactions, its offset its last
            yield BatchHeader(base_offset, base_offset, magic, 0, -1, -1, None)
        else:
            if size < HEADER_BYTES:
                raise DecodeError(f"a record batch of {size} bytes at {pos}")
            (_, _, _, magic, _, attributes, last_delta, _, _, producer_id, producer_epoch, _,
             count) = _HEADER.unpack_from(view, pos)
            control = _control_type(view[pos + HEADER_BYTES:pos + size]) if attributes & CONTROL and count else None
            yield BatchHeader(base_offset, base_offset + last_delta, magic, attributes, producer_id, producer_epoch,
                              control)
        pos += size


def _control_type(records: memoryview) -> int:
    """The type in the key of a control batch's first record."""
    data = bytes(records[:64])  # a control record's length, attributes, deltas and key fit
    try:
        _, pos = read_varint(data, 0)  # the record's length
        pos += 1  # its attributes
        _, pos = read_varlong(data, pos)  # timestamp delta
        _, pos = read_varint(data, pos)  # offset delta
        key_length, pos = read_varint(data, pos)
    except DecodeError as exc:
        raise DecodeError(f"a control record that cannot be read: {exc}") from None
    if key_length < 4 or pos + 4 > len(data):
        raise DecodeError(f"a control record's key of {key_length} bytes")
    _, kind = struct.unpack_from(">hh", data, pos)
    return kind
