"""systemd's notification protocol (sd_notify(3)), without libsystemd.

Under `Type=notify` systemd passes a datagram socket in `$NOTIFY_SOCKET` and waits for
`READY=1` before it counts the service as started (and before units ordered after it
start); `STOPPING=1` tells it that the shutdown it sees is the one it asked for. Outside
systemd the variable is unset and every call does nothing, so the daemon never needs to
know how it was started.
"""

from __future__ import annotations

import os
import socket

from . import logs

# A notification is one small datagram; systemd reads them promptly, so a send that blocks
# longer than this means something is wrong and start-up must not hang on it.
_SEND_TIMEOUT = 1.0


def notify(*fields: str) -> bool:
    """Send `fields` ("READY=1", "STATUS=...") as one message to $NOTIFY_SOCKET. True if it was
    sent; False when there is no socket or sending failed (logged: the service keeps running,
    it is systemd that will notice the missing READY=1)."""
    target = os.environ.get("NOTIFY_SOCKET", "")
    if not target:
        return False
    if target.startswith("@"):  # Linux abstract namespace: a leading NUL instead of '@'
        address = "\0" + target[1:]
    elif target.startswith("/"):
        address = target
    else:  # e.g. systemd's vsock: form, for VMs; not ours to support
        logs.get("groupkeeper.systemd").warning("unsupported NOTIFY_SOCKET", socket=target)
        return False
    message = "\n".join(fields).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.settimeout(_SEND_TIMEOUT)
            sock.sendto(message, address)
    except OSError as exc:
        logs.get("groupkeeper.systemd").warning("systemd notification failed", socket=target,
                                                fields=list(fields), error=str(exc))
        return False
    return True
