"""Variable-length integers (protobuf style): unsigned ones for compact lengths and tagged
fields, zig-zag signed VARINT and VARLONG as the protocol guide lists them."""

from __future__ import annotations

from .exceptions import DecodeError

ONE_BYTE_UVARINTS = [bytes([i]) for i in range(128)]  # 0-127 encode as themselves


def _encode(value: int, bits: int) -> bytes:
    if 0 <= value < 128:
        return ONE_BYTE_UVARINTS[value]
    if value < 0 or value >= 1 << bits:
        raise ValueError(f"unsigned {bits}-bit varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _decode(data: bytes, pos: int, bits: int) -> tuple[int, int]:
    longest = (bits + 6) // 7
    value = shift = 0
    for i in range(pos, min(pos + longest, len(data))):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if value >= 1 << bits:
                raise DecodeError(f"varint over {bits} bits")
            return value, i + 1
        shift += 7
    if pos + longest <= len(data):
        raise DecodeError(f"varint longer than {longest} bytes")
    raise DecodeError("truncated varint")


def uvarint(value: int) -> bytes:
    """Unsigned 32-bit varint: compact lengths, tag numbers and tagged-field sizes."""
    return _encode(value, 32)


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the unsigned 32-bit varint at `pos`; at most 5 bytes."""
    if pos < len(data) and data[pos] < 128:  # one byte, as nearly always
        return data[pos], pos + 1
    return _decode(data, pos, 32)


def varint(value: int) -> bytes:
    """Signed 32-bit zig-zag VARINT."""
    if not -(1 << 31) <= value < 1 << 31:
        raise ValueError(f"VARINT out of range: {value}")
    return _encode((value << 1) ^ (value >> 31), 32)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    raw, pos = _decode(data, pos, 32)
    return (raw >> 1) ^ -(raw & 1), pos


def varlong(value: int) -> bytes:
    """Signed 64-bit zig-zag VARLONG."""
    if not -(1 << 63) <= value < 1 << 63:
        raise ValueError(f"VARLONG out of range: {value}")
    return _encode((value << 1) ^ (value >> 63), 64)


def read_varlong(data: bytes, pos: int) -> tuple[int, int]:
    raw, pos = _decode(data, pos, 64)
    return (raw >> 1) ^ -(raw & 1), pos
