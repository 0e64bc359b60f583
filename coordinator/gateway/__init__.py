"""The gateway: groupkeeper as the cluster's front door (issue 28). Each broker node is
reached through a port of this instance; what clients send to the brokers is relayed as
bytes, and every answer that names a broker address is rewritten to name this instance's
node ports instead.

| Module | Holds |
| --- | --- |
| `ports.py` | the port scheme: which port of this instance stands for which broker node, on which listener |
| `nodes.py` | `Gateway`: node ports opened and closed as brokers come and go; `relay`, and `express` for a whole Produce or Fetch read in one read |
| `links.py` | `BrokerLink`: a client connection's own connection to its broker, in the poll loop, through TLS and SASL first if `BrokerSecurity` says so; `FetchReading`: how a relayed Fetch answer is read |
| `cluster.py` | `GatewayClusterApi`: ApiVersions, FindCoordinator and the relayed APIs, through the gateway |
| `embedded.py` | `EmbeddedBroker`: Tansu beside the instance, for development (`make run`) |
| `rewrite.py` | the answers that name brokers (Metadata, FindCoordinator, DescribeCluster, KIP-951's node endpoints of Produce and Fetch) rewritten, sans I/O |

May import: everything in coordinator below daemon, and protocol.
"""
