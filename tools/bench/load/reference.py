"""The reference of `bench load`: a trio server that only frames. It reads requests, and
answers every Heartbeat with a canned "no error", every frame of one read in one write. No
decoding, no groups, no metrics: what trio and the kernel cost on this machine, which the
coordinator's figures are divided by.

Run as `python -m tools.bench.load.reference PORT`; it prints "ready" once listening.
"""

from __future__ import annotations

import struct
import sys

import trio

_I32 = struct.Struct(">i")
_HEARTBEAT = 12
_ANSWER_BODY = b"\x00" + bytes(4) + bytes(2) + b"\x00"  # v4: tagged fields, throttle, error, tagged fields


async def _answer(stream: trio.SocketStream) -> None:
    try:
        await _frames(stream)
    except trio.BrokenResourceError:
        pass  # the generator went away


async def _frames(stream: trio.SocketStream) -> None:
    buf = bytearray()
    async with stream:
        while data := await stream.receive_some(65536):
            buf += data
            out, pos = [], 0
            while len(buf) - pos >= 4:
                size, = _I32.unpack_from(buf, pos)
                if len(buf) - pos - 4 < size:
                    break
                if buf[pos + 5] != _HEARTBEAT:
                    return
                out.append(_I32.pack(4 + len(_ANSWER_BODY)) + bytes(buf[pos + 8:pos + 12]) + _ANSWER_BODY)
                pos += 4 + size
            del buf[:pos]
            if out:
                await stream.send_all(b"".join(out))


async def main(port: int) -> None:
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    print("ready", flush=True)
    await trio.serve_listeners(_answer, listeners)


if __name__ == "__main__":
    try:
        trio.run(main, int(sys.argv[1]))
    except KeyboardInterrupt:
        pass
