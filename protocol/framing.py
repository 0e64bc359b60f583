"""Size-prefixed frames: an int32 length, then that many bytes.

`FrameReader` is incremental, as h11's receive buffer is: feed it bytes in chunks of any
size (one byte at a time works) and take complete frames out. A negative size or one over
the limit is refused as soon as its four bytes arrive, before anything is buffered for it.
"""

from __future__ import annotations

import struct

from .exceptions import FrameError

_SIZE = struct.Struct(">i")
DEFAULT_MAX_FRAME = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default


class FrameReader:
    __slots__ = ("_buf", "_pos", "max_frame")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME):
        self._buf = bytearray()
        self._pos = 0
        self.max_frame = max_frame

    def feed(self, data: bytes) -> None:
        self._buf += data  # `frames` empties the buffer once it has taken everything out

    def frames(self) -> list[bytes]:
        """Every complete frame buffered now, in order (the payloads, without their sizes)."""
        buf, pos = self._buf, self._pos
        end_of_buf = len(buf)
        out = []
        while end_of_buf - pos >= 4:
            size, = _SIZE.unpack_from(buf, pos)
            if size < 0:
                raise FrameError(f"negative frame size {size}")
            if size > self.max_frame:
                raise FrameError(f"frame of {size} bytes is over the limit of {self.max_frame}")
            end = pos + 4 + size
            if end > end_of_buf:
                break
            out.append(bytes(buf[pos + 4:end]))
            pos = end
        if pos == end_of_buf:
            buf.clear()
            pos = 0
        elif pos > 65536 and pos > end_of_buf // 2:  # keep the buffer from growing without bound
            del buf[:pos]
            pos = 0
        self._pos = pos
        return out

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame (a partial frame)."""
        return len(self._buf) - self._pos


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


class WholeFrames:
    """Frames with their size prefix, for a relay that passes them on as they came: at most
    one copy per frame. A frame that lies within one fed chunk is sliced from it (or is the
    chunk itself, not copied at all); a frame spread over chunks is joined once, when its
    last byte arrives. `FrameReader` copies each byte twice and strips the size, which a
    relay would have to put back: a third copy. Sizes are checked as `FrameReader` checks them."""
    __slots__ = ("_have", "_need", "_parts", "max_frame")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME):
        self._parts: list = []  # the frame begun, in pieces (views of the chunks fed)
        self._have = 0  # its bytes so far, size included
        self._need = -1  # its whole length, size included; -1 while its size is incomplete
        self.max_frame = max_frame

    def feed(self, data: bytes) -> list[bytes]:
        """The frames that `data` completes, in order, each with its size prefix."""
        out = []
        n, pos = len(data), 0
        view = None
        while pos < n:
            if self._parts:  # a frame begun in an earlier chunk
                if view is None:
                    view = memoryview(data)
                want = (4 if self._need < 0 else self._need) - self._have
                take = min(want, n - pos)
                self._parts.append(view[pos:pos + take])
                self._have += take
                pos += take
                if self._need < 0 and self._have == 4:
                    self._need = 4 + self._size(b"".join(self._parts))
                if self._have == self._need:
                    out.append(b"".join(self._parts))
                    self._parts, self._have, self._need = [], 0, -1
                continue
            if n - pos < 4:
                self._parts, self._have = [data[pos:]], n - pos
                break
            end = pos + 4 + self._size(data, pos)
            if end <= n:
                out.append(data if pos == 0 and end == n else data[pos:end])
                pos = end
            else:
                if view is None:
                    view = memoryview(data)
                self._parts, self._have, self._need = [view[pos:]], n - pos, end - pos
                break
        return out

    def _size(self, data, pos: int = 0) -> int:
        size, = _SIZE.unpack_from(data, pos)
        if size < 0:
            raise FrameError(f"negative frame size {size}")
        if size > self.max_frame:
            raise FrameError(f"frame of {size} bytes is over the limit of {self.max_frame}")
        return size

    @property
    def buffered(self) -> int:
        return self._have
