"""Who is on the other end of a connection: its address, the listener it came in on (and,
through the gateway, the broker node whose port it came in on), and its principal, which
the ACLs are checked against."""

from __future__ import annotations

from ..listeners import Listener

ANONYMOUS = "User:ANONYMOUS"  # Kafka's principal for a client that did not authenticate


class Client:
    __slots__ = ("host", "listener", "node", "principal")

    def __init__(self, host: str, listener: Listener, principal: str = ANONYMOUS, node: int | None = None):
        self.host = host
        self.listener = listener
        self.principal = principal
        self.node = node  # the broker node whose gateway port it came in on; None: this instance itself
