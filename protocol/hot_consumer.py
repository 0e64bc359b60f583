"""The steady ConsumerGroupHeartbeat (KIP-848), read and answered without message objects.

A consumer-protocol member heartbeats every few seconds and, once its assignment is
reconciled, sends only its group, member id, epoch (and perhaps its rebalance timeout):
every other field null, "unchanged". `read_consumer_heartbeat` reads such a frame straight
from the bytes and gives None for anything else (a field that is not null, a header's or
the body's tagged field, a string of 127 bytes or more, bytes over or under); the caller
then takes the general path, which answers or refuses it. Its answer (error 0, the member
id, the same epoch, the interval, no assignment) is one `pack`.

The layout is derived from `schemas.consumer_group_heartbeat`, not written out here: after
the member epoch, each version's request has nullable fields and one INT32 (the rebalance
timeout), so a steady frame's tail is a run of null markers, four bytes, null markers and
the empty tagged fields; and the answer's format is made from the response's fields. Import
fails if the declaration stops having that shape. Tests check that whatever this reads,
`decode_request` reads the same, and that the answers are the bytes `encode_response` writes.
"""

from __future__ import annotations

import struct

from .schema import INT16, INT32, STRING, Array, Struct
from .schemas import CONSUMER_GROUP_HEARTBEAT

_API = CONSUMER_GROUP_HEARTBEAT
_HEAD = struct.Struct(">hhih")  # api key, api version, correlation id, client id length (header v2)
_I32 = struct.Struct(">i")
_VERSIONS = range(_API.versions.low, _API.versions.high + 1)
# every version is flexible (compact strings, tagged fields): the reading below assumes it
assert all(v in _API.request.flexible for v in _VERSIONS), "ConsumerGroupHeartbeat is flexible in every version"


def _tail(version: int) -> tuple[int, int]:
    """(null markers before the INT32, null markers after it) of a steady request's fields
    after `member_epoch` at `version`; the body's empty tagged fields (one zero byte) follow."""
    fields = [f.name for f in _API.request.struct.present(version)]
    assert fields[:3] == ["group_id", "member_id", "member_epoch"], fields
    before = after = 0
    timeout = None
    for f in _API.request.struct.present(version)[3:]:
        if f.type is INT32 and version not in f.nullable:
            assert timeout is None, "one INT32 after the epoch"
            timeout = f.name
        else:
            assert version in f.nullable, f"{f.name} must be nullable for a steady heartbeat to leave it out"
            if timeout is None:
                before += 1
            else:
                after += 1
    assert timeout == "rebalance_timeout_ms", timeout
    return before, after


# version -> (zeros before the rebalance timeout, zeros after it, tagged fields included)
_TAILS = {v: (b"\x00" * b, b"\x00" * (a + 1)) for v in _VERSIONS for b, a in [_tail(v)]}


def _answer_format(version: int) -> str:
    """The struct format of a steady answer's body at `version` with `{}` where the member
    id's bytes go: each response field as the codec writes it, nulls as their marker byte."""
    parts = []
    for f in _API.response.struct.present(version):
        if f.type is INT32:
            parts.append("i")
        elif f.type is INT16:
            parts.append("h")
        elif f.type is STRING and f.name == "member_id":
            parts.append("B{}s")  # compact length (n + 1, one byte under 127), then the bytes
        elif f.type is STRING and version in f.nullable:
            parts.append("B")  # null: compact length 0
        elif isinstance(f.type, Struct) and version in f.nullable:
            parts.append("b")  # a nullable struct's marker: -1 for null
        else:
            raise AssertionError(f"{f.name}: not in a steady answer's shape")
    return "".join(parts)


# the whole frame: size, correlation id, the header's tagged fields (response header v1), the
# body, its tagged fields
_ANSWER_FORMATS = {v: ">iiB" + _answer_format(v) + "B" for v in _VERSIONS}
_ANSWERS: dict[tuple[int, int], struct.Struct] = {}  # (version, member id length) -> layout
assert [f.name for f in _API.response.struct.present(0)] == [
    "throttle_time_ms", "error_code", "error_message", "member_id", "member_epoch", "heartbeat_interval_ms",
    "assignment"], "consumer_heartbeat_answer's arguments follow the response's fields"
assert not any(isinstance(f.type, Array) for f in _API.response.struct.present(0))


def read_consumer_heartbeat(frame: bytes) -> tuple[int, int, str, bytes, int, int] | None:
    """(version, correlation id, group id, member id as its bytes, member epoch, rebalance
    timeout ms) of a ConsumerGroupHeartbeat frame (without its size prefix) whose other
    fields are all null; None for anything else. The member id stays bytes: the answer
    repeats them, and the caller decodes them only to look the member up."""
    try:
        api_key, version, correlation_id, n = _HEAD.unpack_from(frame)
        if api_key != _API.key or n < -1:
            return None
        tail = _TAILS.get(version)
        if tail is None:
            return None
        p = 10
        if n > 0:
            p += n
            frame[10:p].decode()  # a client id that is not UTF-8 is refused on the general path
        if frame[p]:  # the header's tagged fields
            return None
        n = frame[p + 1] - 1  # compact lengths of one byte: under 127 bytes
        if not 0 <= n < 127:
            return None
        p += 2
        group_id = frame[p:p + n].decode()
        p += n
        n = frame[p] - 1
        if not 0 <= n < 127:
            return None
        p += 1
        member_id = frame[p:p + n]
        member_id.decode()  # not UTF-8: the general path refuses it
        p += n
        epoch, = _I32.unpack_from(frame, p)
        p += 4
        before, after = tail
        q = p + len(before)
        if frame[p:q] != before:
            return None
        timeout, = _I32.unpack_from(frame, q)
        q += 4
        if frame[q:] != after:  # the rest null, no tagged fields, nothing more
            return None
    except (IndexError, struct.error, UnicodeDecodeError):
        return None
    return version, correlation_id, group_id, member_id, epoch, timeout


def consumer_heartbeat_answer(version: int, correlation_id: int, member_id: bytes, epoch: int,
                              interval_ms: int) -> bytes:
    """The whole frame (size prefix included) of a steady heartbeat's answer at `version`:
    error 0, no message, `member_id` (under 127 bytes), `epoch`, `interval_ms`, no assignment."""
    n = len(member_id)
    layout = _ANSWERS.get((version, n))
    if layout is None:  # at most 127 per version: member ids of one byte's compact length
        layout = _ANSWERS[(version, n)] = struct.Struct(_ANSWER_FORMATS[version].format(n))
    return layout.pack(layout.size - 4, correlation_id, 0, 0, 0, 0, n + 1, member_id, epoch, interval_ms, -1, 0)
