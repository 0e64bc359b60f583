"""Size-prefixed frames: an int32 length, then that many bytes.

`FrameReader` is incremental, as h11's receive buffer is: feed it bytes in chunks of any
size (one byte at a time works) and take complete frames out. A negative size or one over
the limit is refused as soon as its four bytes arrive, before anything is buffered for it.
"""

from __future__ import annotations

import ctypes
import struct

from .exceptions import FrameError

_SIZE = struct.Struct(">i")
DEFAULT_MAX_FRAME = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default


LARGE_FRAME = 64 * 1024  # a frame at least this large gets a buffer of its own, filled in place


def _unfilled_bytearray():
    """A maker of bytearrays whose bytes are not set: `bytearray(n)` writes n zeros, which for
    a large frame that the socket then fills whole cost as much as the kernel's copy into it
    (perf: memset 11 % of the gateway's CPU relaying Produce requests of about 1 MB, beside
    13 % for each of the kernel's two copies). CPython's PyByteArray_FromStringAndSize with no
    source leaves them as allocated; the standard library offers no other way. A frame is
    handed out only once every byte of it has been read in, so nothing unset is ever seen.
    Elsewhere than CPython: zeros, as before."""
    try:
        make = ctypes.pythonapi.PyByteArray_FromStringAndSize
    except (AttributeError, ValueError):
        return bytearray
    make.restype = ctypes.py_object
    make.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
    return lambda size: make(None, size)


unfilled_bytearray = _unfilled_bytearray()


class FrameReader:
    """A frame of at least `LARGE_FRAME` bytes is not gathered in the shared buffer: once its
    size is known it gets a bytearray of exactly that size, which a socket can fill in place
    (`into`, then `filled`: one copy, the kernel's) and which is handed out as the frame
    itself (a bytearray, never written again). Smaller frames come out as bytes."""
    __slots__ = ("_buf", "_large", "_have", "_pos", "max_frame")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME):
        self._buf = bytearray()
        self._pos = 0
        self._large: bytearray | None = None  # the large frame being read, if one is
        self._have = 0  # its bytes so far
        self.max_frame = max_frame

    def feed(self, data: bytes) -> None:
        large = self._large
        if large is not None:  # into the large frame first, the rest after it
            take = min(len(large) - self._have, len(data))
            large[self._have:self._have + take] = data[:take] if take < len(data) else data
            self._have += take
            data = data[take:]
        self._buf += data  # `frames` empties the buffer once it has taken everything out

    def into(self) -> memoryview | None:
        """Where the large frame being read wants its next bytes (for `recv_into`), or None
        if none is: then `feed` what is read."""
        if self._large is None:
            return None
        return memoryview(self._large)[self._have:]

    def filled(self, n: int) -> None:
        """`n` bytes were read into `into()`'s view."""
        self._have += n

    def begun(self) -> tuple[int, int] | None:
        """The large frame being read, if one is: its size, and how many of its bytes came."""
        return None if self._large is None else (len(self._large), self._have)

    def head(self) -> bytes:
        """The bytes of the large frame being read that came so far."""
        with memoryview(self._large) as view:
            return bytes(view[:self._have])

    def drop(self) -> None:
        """Forget the large frame being read: its caller takes the rest of it from the stream
        itself (a relay passing it on as it comes), and feeds what follows it here as usual.
        Only while nothing after it has been fed: its bytes are read into it alone (`into`)."""
        if self._buf or self._large is None:
            raise ValueError("drop(): no large frame being read alone")
        self._large = None
        self._have = 0

    def frames(self) -> list[bytes]:
        """Every complete frame buffered now, in order (the payloads, without their sizes)."""
        out = []
        large = self._large
        if large is not None:
            if self._have < len(large):
                return out
            out.append(large)
            self._large = None
        buf, pos = self._buf, self._pos
        end_of_buf = len(buf)
        while end_of_buf - pos >= 4:
            size, = _SIZE.unpack_from(buf, pos)
            if size < 0:
                raise FrameError(f"negative frame size {size}")
            if size > self.max_frame:
                raise FrameError(f"frame of {size} bytes is over the limit of {self.max_frame}")
            end = pos + 4 + size
            if end > end_of_buf:
                if size >= LARGE_FRAME:  # read on into a buffer of its own
                    self._large = unfilled_bytearray(size)  # filled below and by the socket
                    self._have = end_of_buf - pos - 4
                    with memoryview(buf) as view:
                        self._large[:self._have] = view[pos + 4:end_of_buf]
                    pos = end_of_buf
                break
            with memoryview(buf) as view:  # one copy, not a bytearray's slice and then bytes
                out.append(bytes(view[pos + 4:end]))
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
        return len(self._buf) - self._pos + (4 + self._have if self._large is not None else 0)


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
