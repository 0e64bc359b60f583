"""Where each broker node is reached through a gateway instance: the port scheme.

Node N of the cluster is reached on listener i (of n, in configuration order) at

    first listener's port + gateway_node_port_offset + N * n + i

bound on that listener's host, and advertised the same way from the first advertised
listener's port (so that an instance behind a port mapping advertises what clients reach).
Every instance of a deployment computes the same ports from the same configuration, so any
instance's answers agree, and two listeners never share a port. With one listener and the
default offset of 1 this is Kroxylicious's "port identifies node": 9092 bootstraps, node 0
is 9093, node 1 is 9094. Pure: no sockets here.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_PORT = 65535


@dataclass(frozen=True)
class PortScheme:
    bound_base: int  # the first listener's bound port
    advertised_base: int  # the first listener's advertised port
    listeners: int  # how many listeners there are
    offset: int = 1  # gateway_node_port_offset
    max_node_id: int = 1000  # gateway_max_node_id: a node above it gets no port

    def bound(self, node: int, listener: int) -> int:
        return self.bound_base + self.offset + node * self.listeners + listener

    def advertised(self, node: int, listener: int) -> int:
        return self.advertised_base + self.offset + node * self.listeners + listener

    def problem(self) -> str | None:
        """What makes the scheme unusable (one line for start-up), or None."""
        if self.offset < 1:
            return f"gateway_node_port_offset must be at least 1, not {self.offset}"
        if self.max_node_id < 0:
            return f"gateway_max_node_id must not be negative, not {self.max_node_id}"
        top = max(self.bound(self.max_node_id, self.listeners - 1), self.advertised(self.max_node_id, self.listeners - 1))
        if top > MAX_PORT:
            return (f"node ports would run to {top}, past {MAX_PORT}: lower gateway_max_node_id "
                    f"({self.max_node_id}) or gateway_node_port_offset ({self.offset}), or listen on a lower port")
        return None

    def refusal(self, node: int, taken: set[int]) -> str | None:
        """Why `node` gets no ports (a node id out of range, or a port already taken by a
        listener or the metrics endpoint), or None."""
        if not 0 <= node <= self.max_node_id:
            return f"node id {node} is outside 0-{self.max_node_id} (gateway_max_node_id)"
        clash = sorted({self.bound(node, i) for i in range(self.listeners)} & taken)
        if clash:
            return f"its port {clash[0]} is taken by a listener or the metrics endpoint"
        return None
