"""FrameReader: size-prefixed frames out of a byte stream fed in chunks of any size."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import FrameError, FrameReader, frame
from protocol.framing import LARGE_FRAME, WholeFrames

SIZE = struct.Struct(">i").pack

payloads = st.lists(st.binary(max_size=300), min_size=1, max_size=12)


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:])]


def read_all(chunks, reader: FrameReader | None = None) -> list[bytes]:
    reader = reader or FrameReader()
    out = []
    for chunk in chunks:
        reader.feed(chunk)
        out.extend(reader.frames())
    assert reader.buffered == 0
    return out


def test_frame_is_a_big_endian_int32_size_then_the_payload():
    assert frame(b"") == b"\x00\x00\x00\x00"
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"x" * 300) == b"\x00\x00\x01\x2c" + b"x" * 300


@settings(max_examples=100, deadline=None)
@given(payloads=payloads)
def test_frame_round_trips_through_the_reader(payloads):
    reader = FrameReader()
    for p in payloads:
        reader.feed(frame(p))
        assert reader.frames() == [p]
        assert reader.frames() == []
        assert reader.buffered == 0


@settings(max_examples=50, deadline=None)
@given(payloads=payloads)
def test_one_byte_at_a_time(payloads):
    stream = b"".join(frame(p) for p in payloads)
    assert read_all(stream[i:i + 1] for i in range(len(stream))) == payloads


@settings(max_examples=200, deadline=None)
@given(payloads=payloads, cuts=st.lists(st.integers(0, 10_000), max_size=20))
def test_any_chunking_gives_the_same_frames_in_order(payloads, cuts):
    stream = b"".join(frame(p) for p in payloads)
    chunks = split_at(stream, cuts)
    assert b"".join(chunks) == stream
    assert read_all(chunks) == payloads


@settings(max_examples=100, deadline=None)
@given(payloads=payloads, cuts=st.lists(st.integers(0, 10_000), max_size=20))
def test_frames_taken_out_only_at_the_end_come_out_the_same(payloads, cuts):
    reader = FrameReader()
    for chunk in split_at(b"".join(frame(p) for p in payloads), cuts):
        reader.feed(chunk)
    assert reader.frames() == payloads
    assert reader.buffered == 0
    assert reader.frames() == []


def test_a_partial_frame_is_none_and_counted_as_buffered():
    reader = FrameReader()
    assert reader.frames() == [] and reader.buffered == 0
    reader.feed(b"\x00\x00")  # half a size prefix
    assert reader.frames() == []
    assert reader.buffered == 2
    reader.feed(b"\x00\x05hel")  # the size, and three of five bytes
    assert reader.frames() == []
    assert reader.buffered == 7
    assert reader.frames() == []
    reader.feed(b"lo\x00\x00\x00\x02h")  # the rest, and the start of the next frame
    assert reader.frames() == [b"hello"]
    assert reader.buffered == 5
    assert reader.frames() == []
    assert reader.buffered == 5
    reader.feed(b"i")
    assert reader.frames() == [b"hi"]
    assert reader.buffered == 0


def test_a_zero_length_frame_is_empty_bytes():
    reader = FrameReader()
    reader.feed(b"\x00\x00\x00\x00" + frame(b"x") + b"\x00\x00\x00\x00")
    assert reader.frames() == [b"", b"x", b""]
    assert reader.frames() == []
    assert reader.buffered == 0


@pytest.mark.parametrize("size", [-1, -2, -(2**31)])
def test_a_negative_size_is_refused_as_soon_as_its_four_bytes_are_in(size):
    reader = FrameReader()
    prefix = SIZE(size)
    for byte in prefix[:3]:
        reader.feed(bytes([byte]))
        assert reader.frames() == []
    reader.feed(prefix[3:])
    with pytest.raises(FrameError):
        reader.frames()


@pytest.mark.parametrize("size,limit", [(1025, 1024), (2**31 - 1, 1024),
                                        (100 * 1024 * 1024 + 1, None)])
def test_a_size_over_the_limit_is_refused_before_the_body_arrives(size, limit):
    reader = FrameReader() if limit is None else FrameReader(max_frame=limit)
    prefix = SIZE(size)
    reader.feed(prefix[:3])
    assert reader.frames() == []
    reader.feed(prefix[3:])  # no body byte at all
    with pytest.raises(FrameError):
        reader.frames()


def test_a_size_at_the_limit_is_accepted():
    reader = FrameReader(max_frame=16)
    reader.feed(frame(b"y" * 16))
    assert reader.frames() == [b"y" * 16]
    reader.feed(frame(b"z" * 17))
    with pytest.raises(FrameError):
        reader.frames()


def test_the_default_limit_is_kafkas_socket_request_max_bytes():
    assert FrameReader().max_frame == 100 * 1024 * 1024


def test_a_frame_after_an_oversized_one_is_not_returned():
    reader = FrameReader(max_frame=8)
    reader.feed(SIZE(9) + b"123456789" + frame(b"ok"))
    with pytest.raises(FrameError):
        reader.frames()


def test_many_frames_one_after_another_leave_nothing_buffered():
    reader = FrameReader()
    for i in range(10_000):
        payload = i.to_bytes(4, "big") * (i % 7)
        reader.feed(frame(payload))
        assert reader.frames() == [payload]
        assert reader.buffered == 0
    assert len(reader._buf) < 64  # white box: the buffer was emptied as frames went out


def test_a_stream_that_always_ends_mid_frame_does_not_grow_the_buffer():
    """Every feed ends halfway into the next frame, so the buffer is never empty when a
    frame is taken out: the reader must still drop the bytes it has already returned."""
    reader = FrameReader()
    stream = b"".join(frame(i.to_bytes(4, "big") * 8) for i in range(20_000))  # 36 bytes each
    assert len(stream) == 720_000
    chunks = [stream[:18]] + [stream[s:s + 36] for s in range(18, len(stream), 36)]
    largest = count = 0
    for chunk in chunks:
        reader.feed(chunk)
        for payload in reader.frames():
            assert payload == count.to_bytes(4, "big") * 8
            count += 1
        assert reader.buffered == (18 if count < 20_000 else 0)
        largest = max(largest, len(reader._buf))  # white box: the internal buffer
    assert count == 20_000
    assert reader.buffered == 0
    # bounded by the reader's compaction threshold (64 KiB), not by the stream's length
    assert largest < 256 * 1024, f"buffer grew to {largest} bytes over a {len(stream)}-byte stream"


# -- WholeFrames: a relay's frames, sizes kept, one copy at most ------------------------------

@settings(max_examples=300, deadline=None)
@given(payloads=payloads, cuts=st.lists(st.integers(0, 10_000), max_size=20))
def test_whole_frames_are_the_frames_with_their_sizes_for_any_chunking(payloads, cuts):
    stream = b"".join(frame(p) for p in payloads)
    reader, out = WholeFrames(), []
    for chunk in split_at(stream, cuts):
        out += reader.feed(chunk)
    assert [bytes(f) for f in out] == [frame(p) for p in payloads]
    assert reader.buffered == 0


def test_a_whole_frame_fed_alone_is_passed_on_without_a_copy():
    chunk = frame(b"x" * 1000)
    assert WholeFrames().feed(chunk)[0] is chunk


def test_whole_frames_refuse_sizes_as_the_reader_does():
    with pytest.raises(FrameError):
        WholeFrames().feed(SIZE(-1))
    reader = WholeFrames(max_frame=10)
    reader.feed(b"\x00\x00")
    with pytest.raises(FrameError):
        reader.feed(b"\x00\x0b")  # its size completes across chunks: 11 > 10
    assert WholeFrames(max_frame=10).feed(frame(b"x" * 10)) == [frame(b"x" * 10)]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 3, 1000, LARGE_FRAME - 1, LARGE_FRAME, LARGE_FRAME + 7, 200_000]),
                      min_size=1, max_size=6),
       reads=st.lists(st.integers(1, 90_000), min_size=1, max_size=30), in_place=st.lists(st.booleans(), max_size=30))
def test_large_frames_read_in_place_or_fed_give_the_same_frames(sizes, reads, in_place):
    """As a connection reads: into a large frame's own buffer when it offers one (`into`),
    fed otherwise, in reads of any size; the frames come out the same, in order, the large
    ones begun in one read and ended in another as bytearrays of exactly their size."""
    payloads = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    stream = b"".join(frame(p) for p in payloads)
    reader, got, pos, i = FrameReader(), [], 0, 0
    while pos < len(stream):
        size = reads[i % len(reads)]
        into = reader.into()
        if into is not None and (in_place[i % len(in_place)] if in_place else True):
            n = min(size, len(into), len(stream) - pos)
            into[:n] = stream[pos:pos + n]
            reader.filled(n)
        else:
            n = min(size, len(stream) - pos)
            reader.feed(stream[pos:pos + n])
        pos += n
        i += 1
        got += reader.frames()
        assert reader.buffered == pos - sum(4 + len(f) for f in got)
    assert got == payloads and reader.buffered == 0 and reader.into() is None
    assert all(type(f) is bytes or len(f) >= LARGE_FRAME for f in got)


def test_a_large_frame_begun_is_read_in_place_and_counted_from_its_size():
    reader = FrameReader()
    reader.feed(SIZE(100_000) + b"ab")
    assert reader.frames() == [] and reader.buffered == 6  # its size counts: a request has begun
    into = reader.into()
    assert len(into) == 100_000 - 2
    into[:] = b"c" * len(into)
    reader.filled(len(into))
    reader.feed(SIZE(1) + b"z")
    got = reader.frames()
    assert got == [b"ab" + b"c" * 99_998, b"z"] and type(got[0]) is bytearray and reader.buffered == 0


def test_a_large_frame_begun_may_be_dropped_and_its_rest_taken_elsewhere():
    """A relay streaming a large frame: its head from the reader, its rest straight from the
    stream, then frames as before."""
    big = bytes(range(256)) * ((LARGE_FRAME + 5000) // 256)
    small = b"after"
    stream = frame(b"first") + frame(big) + frame(small)
    reader = FrameReader()
    reader.feed(stream[:len(frame(b"first")) + 4 + 3000])  # the first whole, the large one begun
    assert reader.frames() == [b"first"]
    assert reader.begun() == (len(big), 3000)
    assert reader.head() == big[:3000]
    view = reader.into()
    view[:1000] = big[3000:4000]  # a read in place, as a socket's recv_into
    reader.filled(1000)
    assert reader.begun() == (len(big), 4000) and reader.head() == big[:4000]
    reader.drop()
    assert reader.begun() is None and reader.into() is None and reader.buffered == 0
    # the rest of the large frame never reaches the reader; what follows does
    reader.feed(stream[len(frame(b"first")) + 4 + len(big):])
    assert reader.frames() == [small]


def test_only_a_large_frame_read_alone_may_be_dropped():
    reader = FrameReader()
    with pytest.raises(ValueError):
        reader.drop()  # none begun
    reader.feed(SIZE(LARGE_FRAME) + b"x" * 10)
    assert reader.frames() == []
    reader.feed(b"y" * (LARGE_FRAME - 10) + SIZE(2))  # fed past its end: the next frame's size is here too
    assert reader.begun() == (LARGE_FRAME, LARGE_FRAME)
    with pytest.raises(ValueError):  # what follows it came through the reader: it is not the caller's
        reader.drop()
    assert [len(f) for f in reader.frames()] == [LARGE_FRAME]
