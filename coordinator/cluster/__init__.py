"""Several instances, one owner per group-partition.

| Module | Holds |
| --- | --- |
| `membership.py` | the live instances: ephemeral registrations with their advertised addresses |
| `balancing.py` | the pure placement function: balanced, least movement |
| `placement.py` | groups to group-partitions, and the placement record every instance agrees on |
| `handover.py` | taking a group-partition from a previous owner that releases it or dies |
| `node_ids.py` | how instances are named among the brokers: node ids never a broker's |
| `ownership.py` | `Coordinator`: the group-partitions held here, routing, session loss and shutdown |
| `pending_check.py` | the ends of pending transactions that were not recorded, read from the brokers |
| `lag.py` | consumer lag of the groups served here: committed offsets against the logs' ends |

May import: `groups`, `topics`, `store`, `assignors`, `events`, `logs`, `metrics`.
"""
