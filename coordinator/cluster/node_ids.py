"""How coordinator instances are named among a cluster's brokers (in Metadata and
FindCoordinator answers): node ids that are never a broker's. Imports nothing, so that
tools can read it without loading the server."""

INSTANCE_NODE_BASE = 1_000_000_000  # coordinator node ids: never a broker's


def node_id(instance) -> int:
    """The node id of `instance` (a `membership.Instance`)."""
    return INSTANCE_NODE_BASE + instance.id
