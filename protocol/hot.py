"""The heartbeat of a dynamic member, read and answered without message objects.

Every member sends one every few seconds, so it is most of what a coordinator reads; it is
small and its shape is fixed, so reading its fields straight out of the frame costs a
fraction of `decode_request`'s header tuple and message object. `read_heartbeat` gives
None for anything it is not sure of (a group instance id, a tagged field, a long string,
bytes over or under), and the caller then takes the general path, which answers or
refuses it; tests check that whatever it reads, `decode_request` reads the same. The
layout is the one declared in `schemas.heartbeat` (versions 0-4, flexible from 4).
"""

from __future__ import annotations

import struct

from .schemas import HEARTBEAT

_HEAD = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_GENERATION_AND_LENGTH = struct.Struct(">ih")
_FLEXIBLE = HEARTBEAT.request.flexible.low
_INSTANCE_ID = 3  # the version that added group_instance_id
# version -> the answer's layout: size, correlation id, [tagged fields,] [throttle,] error[, tagged fields]
_ANSWERS = {v: struct.Struct(">iih") if v == 0 else struct.Struct(">iiih") if v < _FLEXIBLE else
            struct.Struct(">iibihb")
            for v in range(HEARTBEAT.versions.low, HEARTBEAT.versions.high + 1)}


def read_heartbeat(frame: bytes) -> tuple[int, int, str, int, str] | None:
    """(version, correlation id, group id, generation, member id) of a heartbeat frame
    (without its size prefix) that carries no group instance id; None for anything else."""
    try:
        api_key, version, correlation_id, n = _HEAD.unpack_from(frame)
        if api_key != HEARTBEAT.key or version not in _ANSWERS or n < -1:
            return None
        p = 10
        if n > 0:
            p += n
            frame[10:p].decode()  # a client id that is not UTF-8 is refused on the general path
        if version < _FLEXIBLE:
            n, = _I16.unpack_from(frame, p)
            if n < 0:
                return None
            p += 2
            group_id = frame[p:p + n].decode()
            p += n
            generation, n = _GENERATION_AND_LENGTH.unpack_from(frame, p)
            if n < 0:
                return None
            p += 6
            member_id = frame[p:p + n].decode()
            p += n
            if version >= _INSTANCE_ID:
                if frame[p:p + 2] != b"\xff\xff":  # not null: a static member's
                    return None
                p += 2
            if p != len(frame):
                return None
        else:
            if frame[p]:  # the header's tagged fields
                return None
            n = frame[p + 1] - 1  # compact lengths of one byte: under 127 bytes
            if not 0 <= n < 127:
                return None
            p += 2
            group_id = frame[p:p + n].decode()
            p += n
            generation, = _I32.unpack_from(frame, p)
            n = frame[p + 4] - 1
            if not 0 <= n < 127:
                return None
            p += 5
            member_id = frame[p:p + n].decode()
            p += n + 2
            if frame[p - 2:p] != b"\x00\x00" or p != len(frame):  # null instance id, no tagged fields
                return None
    except (IndexError, struct.error, UnicodeDecodeError):
        return None
    return version, correlation_id, group_id, generation, member_id


def heartbeat_answer(version: int, correlation_id: int) -> bytes:
    """The whole frame (size prefix included) of a heartbeat's NONE answer at `version`."""
    layout = _ANSWERS[version]
    if version == 0:
        return layout.pack(6, correlation_id, 0)
    if version < _FLEXIBLE:
        return layout.pack(10, correlation_id, 0, 0)
    return layout.pack(12, correlation_id, 0, 0, 0, 0)
