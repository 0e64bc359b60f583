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
