"""Who is on the other end of a connection: its address, the listener it came in on, and
its principal, which the ACLs are checked against."""

from __future__ import annotations

from ..listeners import Listener

ANONYMOUS = "User:ANONYMOUS"  # Kafka's principal for a client that did not authenticate


class Client:
    __slots__ = ("host", "listener", "principal")

    def __init__(self, host: str, listener: Listener, principal: str = ANONYMOUS):
        self.host = host
        self.listener = listener
        self.principal = principal
