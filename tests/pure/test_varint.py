"""Unsigned varints (compact lengths, tags), zig-zag VARINT and VARLONG."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import DecodeError
from protocol.varint import read_uvarint, read_varint, read_varlong, uvarint, varint, varlong

U32 = st.integers(0, 2**32 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
PREFIX = st.binary(max_size=4)
SUFFIX = st.binary(max_size=4)


@settings(max_examples=300)
@given(value=U32, prefix=PREFIX, suffix=SUFFIX)
def test_uvarint_round_trip(value, prefix, suffix):
    encoded = uvarint(value)
    assert 1 <= len(encoded) <= 5
    assert read_uvarint(prefix + encoded + suffix, len(prefix)) == (value, len(prefix) + len(encoded))


@settings(max_examples=300)
@given(value=I32, prefix=PREFIX, suffix=SUFFIX)
def test_varint_round_trip(value, prefix, suffix):
    encoded = varint(value)
    assert 1 <= len(encoded) <= 5
    assert read_varint(prefix + encoded + suffix, len(prefix)) == (value, len(prefix) + len(encoded))


@settings(max_examples=300)
@given(value=I64, prefix=PREFIX, suffix=SUFFIX)
def test_varlong_round_trip(value, prefix, suffix):
    encoded = varlong(value)
    assert 1 <= len(encoded) <= 10
    assert read_varlong(prefix + encoded + suffix, len(prefix)) == (value, len(prefix) + len(encoded))


@pytest.mark.parametrize("encode,decode,value", [
    (uvarint, read_uvarint, 0), (uvarint, read_uvarint, 2**32 - 1),
    (varint, read_varint, -(2**31)), (varint, read_varint, 2**31 - 1),
    (varlong, read_varlong, -(2**63)), (varlong, read_varlong, 2**63 - 1),
])
def test_range_ends_round_trip(encode, decode, value):
    encoded = encode(value)
    assert decode(encoded, 0) == (value, len(encoded))


@settings(max_examples=200)
@given(value=I32)
def test_varint_and_varlong_agree_on_32_bit_values(value):
    assert varint(value) == varlong(value)


@settings(max_examples=200)
@given(value=U32)
def test_uvarint_length_grows_with_every_7_bits(value):
    assert len(uvarint(value)) == max(1, -(-value.bit_length() // 7))


@pytest.mark.parametrize("value,encoded", [
    (0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
    (16383, b"\xff\x7f"), (16384, b"\x80\x80\x01"), (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
])
def test_known_uvarint_encodings(value, encoded):
    assert uvarint(value) == encoded
    assert read_uvarint(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize("value,encoded", [
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (2, b"\x04"), (-64, b"\x7f"),
    (64, b"\x80\x01"), (150, b"\xac\x02"), (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    (-(2**31), b"\xff\xff\xff\xff\x0f"),
])
def test_known_varint_encodings(value, encoded):
    assert varint(value) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize("value,encoded", [
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"),
    (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"), (-(2**63), b"\xff" * 9 + b"\x01"),
])
def test_known_varlong_encodings(value, encoded):
    assert varlong(value) == encoded
    assert read_varlong(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize("encode,value", [
    (uvarint, -1), (uvarint, -(2**40)), (uvarint, 2**32), (uvarint, 2**64),
    (varint, 2**31), (varint, -(2**31) - 1), (varint, 2**40),
    (varlong, 2**63), (varlong, -(2**63) - 1), (varlong, 2**100),
])
def test_out_of_range_values_are_refused_on_encode(encode, value):
    with pytest.raises(ValueError):
        encode(value)


@pytest.mark.parametrize("data", [
    b"", b"\x80", b"\xff\xff", b"\x80\x80\x80\x80",  # truncated
    b"\x80\x80\x80\x80\x80\x00", b"\xff" * 5 + b"\x01", b"\x80" * 20,  # over 5 bytes
    b"\xff\xff\xff\xff\x10", b"\x80\x80\x80\x80\x7f",  # five bytes, over 32 bits
])
@pytest.mark.parametrize("decode", [read_uvarint, read_varint], ids=["uvarint", "varint"])
def test_malformed_32_bit_varints_are_decode_errors(decode, data):
    with pytest.raises(DecodeError):
        decode(data, 0)


@pytest.mark.parametrize("data", [
    b"", b"\x80", b"\xff" * 9,  # truncated
    b"\x80" * 10 + b"\x00", b"\xff" * 11,  # over 10 bytes
    b"\xff" * 9 + b"\x02", b"\x80" * 9 + b"\x7f",  # ten bytes, over 64 bits
])
def test_malformed_varlongs_are_decode_errors(data):
    with pytest.raises(DecodeError):
        read_varlong(data, 0)


def test_reading_past_the_end_is_a_decode_error():
    with pytest.raises(DecodeError):
        read_uvarint(b"\x05", 1)
    with pytest.raises(DecodeError):
        read_varint(b"\x05\x80", 1)


@settings(max_examples=300)
@given(data=st.binary(max_size=12), pos=st.integers(0, 12))
def test_arbitrary_bytes_decode_or_raise_decode_error(data, pos):
    for decode, bits in ((read_uvarint, 32), (read_varint, 32), (read_varlong, 64)):
        try:
            value, end = decode(data, pos)
        except DecodeError:
            continue
        assert pos < end <= min(len(data), pos + (bits + 6) // 7)
        if decode is read_uvarint:
            assert 0 <= value < 2**32
        else:
            assert -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)
