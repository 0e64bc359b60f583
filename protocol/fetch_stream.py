"""A Fetch answer read as it streams past, without holding it: sans I/O.

A relay passes a large Fetch answer on part by part as it arrives (cut through), so it
never has the whole frame to decode. `FetchWalk` is fed those parts in order and follows
the answer's structure as they pass: it reads each partition's index, error code and high
watermark (handed to `on_partition`, with the topic's name or id), and skips the records
without looking at them (their lengths lead them). What is walked costs the structure, not
the bytes: a 5 MB batch is one skip.

From version 16 the answer ends in top-level tagged fields that can name brokers (KIP-951's
`node_endpoints`, tag 0). A relay must rewrite them, but the answer's size went out with its
first part. So the walk holds the answer's last bytes back from where those tagged fields
begin (`feed` says how much of each part may go now) and gives them, once complete, to the
relay's `tail`, which must return as many bytes as it was given.

Versions 4-18, as `protocol.schemas.FETCH` declares them: flexible (compact lengths, tagged
fields) from 12, topics named by id from 13.

An answer that came whole in one read is cheaper decoded at once by the generated decoder
than walked a step at a time (`read_whole`: 15-28 against 39-41 us for answers of 1-256 KiB,
hot; docs/benchmarks.md): a relay reads such answers so and walks the others.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Union

from .exceptions import DecodeError, ProtocolError
from .requests import decode_broker_response
from .schemas import FETCH

Topic = Union[str, bytes]  # a topic's name (v4-12) or its 16-byte id (v13+)
OnPartition = Callable[[Topic, int, int, int], None]  # topic, partition, error code, high watermark

_HOLD = 0  # what the walk yields where the bytes from here on are to be held
# A walk's steps: yield n > 0 for the next n bytes (sent back), -n to skip n bytes, _HOLD.
Steps = Generator[int, "bytes | None", None]


def _uvarint() -> Generator[int, "bytes | None", int]:
    value = shift = 0
    for _ in range(5):
        byte = (yield 1)[0]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    raise DecodeError("Fetch answer: a varint longer than 5 bytes")


def _length(flexible: bool, width: int = 4) -> Generator[int, "bytes | None", int]:
    """A length or count: compact (n + 1, 0 null) or of `width` bytes (INT32 for arrays and
    bytes, INT16 for strings; -1 null); null and empty are 0."""
    if flexible:
        n = (yield from _uvarint()) - 1
    else:
        n = int.from_bytes((yield width), "big", signed=True)
    if n < -1:
        raise DecodeError(f"Fetch answer: a length of {n}")
    return max(n, 0)


def _skip_tags() -> Generator[int, "bytes | None", None]:
    for _ in range((yield from _uvarint())):
        yield from _uvarint()
        size = yield from _uvarint()
        if size:
            yield -size


def _answer(version: int, on_partition: OnPartition | None) -> Steps:
    """The steps of one Fetch answer of `version`, from its size prefix to its end."""
    flexible = version >= 12
    yield -8  # size and correlation id
    if flexible:
        yield from _skip_tags()  # response header v1
    yield -(4 + (6 if version >= 7 else 0))  # throttle_time_ms; error_code, session_id (7+)
    # a partition's fixed head: index, error code, high watermark, last stable offset,
    # log start offset (5+)
    head = 30 if version >= 5 else 22
    for _ in range((yield from _length(flexible))):
        if version >= 13:
            topic: Topic = yield 16
        else:
            n = yield from _length(flexible, 2)
            topic = (yield n).decode("utf-8", "replace") if n else ""
        for _ in range((yield from _length(flexible))):
            fixed = yield head
            if on_partition is not None:
                on_partition(topic, int.from_bytes(fixed[0:4], "big", signed=True),
                             int.from_bytes(fixed[4:6], "big", signed=True),
                             int.from_bytes(fixed[6:14], "big", signed=True))
            aborted = yield from _length(flexible)  # aborted transactions: 16 bytes each,
            if aborted and not flexible:
                yield -16 * aborted
            for _ in range(aborted if flexible else 0):  # and their tagged fields
                yield -16
                yield from _skip_tags()
            if version >= 11:
                yield -4  # preferred_read_replica
            records = yield from _length(flexible)
            if records:
                yield -records
            if flexible:
                yield from _skip_tags()
        if flexible:
            yield from _skip_tags()
    if version >= 16:
        yield _HOLD  # the answer's own tagged fields, where node_endpoints may be
    elif flexible:
        yield from _skip_tags()


class FetchWalk:
    """One Fetch answer of `version` and `size` (its size prefix's value), walked as its
    parts are fed in order (size prefix included).

    `feed(part)` returns how many leading bytes of `part` may go on now; the rest is held
    (v16+: the top-level tagged fields). Where it is skipping (`skipping` bytes of records
    ahead), a relay may move those bytes itself and say so with `skipped(n)`. When the answer's last byte has been fed, `done` is
    true and `tail()` returns the held bytes as `fix` makes them (given the tagged-field
    section, it must return bytes of the same length; by default, as they came).
    Raises `DecodeError` for an answer that does not end where its size says."""

    __slots__ = ("_buffer", "_fix", "_held", "_left", "_need", "_over", "_skip", "_steps", "done", "holding")

    def __init__(self, version: int, size: int, on_partition: OnPartition | None = None,
                 fix: Callable[[bytes], bytes] | None = None):
        self._steps = _answer(version, on_partition)
        self._left = 4 + size  # bytes of the answer not fed yet
        self._fix = fix
        self._need = 0  # bytes the walk waits for, gathered in `_buffer`
        self._buffer = bytearray()
        self._skip = 0  # bytes the walk skips, not looked at
        self._held: list[bytes] = []
        self._over = False  # the walk has ended (v4-15)
        self.holding = False
        self.done = False
        self._next(None)

    def _next(self, value: bytes | None) -> None:
        """Run the walk to its next wait; when it ends, what is left is held or wrong."""
        self._need = self._skip = 0
        try:
            step = self._steps.send(value)
        except StopIteration:  # the end of a v4-15 answer: nothing may follow (`_end` checks)
            self._over = self.holding = True
            return
        if step > 0:
            self._need = step
        elif step < 0:
            self._skip = -step
        else:
            self.holding = True

    @property
    def fixes(self) -> bool:
        """Whether its held tail is fixed (`fix` given: the answer may name brokers)."""
        return self._fix is not None

    def unsent(self) -> bytes:
        """The bytes held back so far; after a `feed` that raised, those before its part (a
        relay that passes on what it cannot walk passes these, then that part)."""
        return b"".join(self._held)

    def feed(self, part: bytes | memoryview) -> int:
        n = len(part)
        if n > self._left:
            raise DecodeError("Fetch answer: more bytes than its size")
        held = len(self._held)
        try:
            return self._feed(part, n)
        except DecodeError:
            del self._held[held:]
            raise

    def _feed(self, part: bytes | memoryview, n: int) -> int:
        self._left -= n
        pos = 0
        while pos < n and not self.holding:
            if self._skip:
                take = min(self._skip, n - pos)
                pos += take
                self._skip -= take
                if not self._skip:
                    self._next(None)
            else:
                take = min(self._need - len(self._buffer), n - pos)
                if not self._buffer and take == self._need:  # all in this part: no copy to gather
                    value = bytes(part[pos:pos + take])
                else:
                    self._buffer += part[pos:pos + take]
                    if len(self._buffer) < self._need:
                        pos += take
                        continue
                    value, self._buffer = bytes(self._buffer), bytearray()
                pos += take
                self._next(value)
        if pos < n:
            self._held.append(bytes(part[pos:]))
        if not self._left:
            self._end()
        return pos

    @property
    def skipping(self) -> int:
        """Bytes from here that the walk skips without looking at them (a record set's
        rest): a relay may pass them on around the walk (`skipped`)."""
        return self._skip

    def skipped(self, n: int) -> None:
        """`n` bytes (at most `skipping`) passed on without being fed: the walk goes on
        after them. Raises `DecodeError` as `feed` does."""
        if not 0 < n <= self._skip:
            raise ValueError(f"{n} bytes skipped where {self._skip} are to be")
        self._left -= n
        self._skip -= n
        if not self._skip:
            self._next(None)
        if not self._left:
            self._end()

    def _end(self) -> None:
        self.done = True
        if self._need or self._skip or not self.holding:
            raise DecodeError("Fetch answer: shorter than its fields")
        if self._over and self._held:
            raise DecodeError(f"Fetch answer: {sum(map(len, self._held))} bytes after its fields")

    def tail(self) -> bytes:
        held = b"".join(self._held)
        if self._fix is None or not held:
            return held
        fixed = self._fix(held)
        if len(fixed) != len(held):
            raise ValueError(f"a tail of {len(held)} bytes fixed into {len(fixed)}")
        return fixed


def read_whole(version: int, frame: bytes, on_partition: OnPartition | None = None) -> bool:
    """A Fetch answer of `version` that came whole (`frame`, its size prefix included), read
    at once rather than walked: its partitions handed to `on_partition` as `FetchWalk` hands
    them. False, with nothing handed, where it must be walked instead: it names brokers
    (v16+'s node_endpoints, which the relay rewrites), has bytes past its schema, or does not
    read (the walk then says why)."""
    try:
        _, body, past = decode_broker_response(FETCH.key, version, frame[4:])
    except ProtocolError:
        return False
    if past or (version >= 16 and body.node_endpoints):
        return False
    if on_partition is not None:
        by_id = version >= 13
        for topic in body.responses:
            name = topic.topic_id.bytes if by_id else topic.topic
            for partition in topic.partitions:
                on_partition(name, partition.partition_index, partition.error_code, partition.high_watermark)
    return True
