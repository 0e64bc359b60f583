"""The gateway: groupkeeper as the cluster's front door (issue 28). Each broker node is
reached through a port of this instance; what clients send to the brokers is relayed as
bytes, and every answer that names a broker address is rewritten to name this instance's
node ports instead.

| Module | Holds |
| --- | --- |
| `rewrite.py` | the answers that name brokers (Metadata, FindCoordinator, DescribeCluster, KIP-951's node endpoints of Produce and Fetch) rewritten, sans I/O |

May import: everything in coordinator below daemon, and protocol.
"""
