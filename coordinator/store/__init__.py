"""Everything groupkeeper keeps in ZooKeeper, and the ZooKeeper server itself.

| Module | Holds |
| --- | --- |
| `layout.py` | where everything lives in ZooKeeper, and its encodings |
| `bridge.py` | `ZooKeeperBridge`: the one adapter that hides kazoo's threads from trio |
| `session.py` | `SessionGuard`: SUSPENDED stops acknowledging writes, LOST fences |
| `fence.py` | ownership epochs and fenced writes |
| `partition.py` | `PartitionStore`: one group-partition's groups and committed offsets |
| `writer.py` | `OffsetWriter`: group commit across group-partitions (it knows stores as `Batches`) |
| `errors.py` | the store's failures and what each tells a Kafka client: the store's boundary |
| `budget.py` | the ZooKeeper data budget: what the groups hold in ZooKeeper's heap, and who made it grow |
| `pending.py` | transactional offsets pending their transaction's outcome |
| `transactions.py` | each transactional id's latest state, as the gateway saw it |
| `turns.py` | writes of one key one after the other |
| `multiread.py` | many reads in one request |
| `protection.py` | our znodes protected by ZooKeeper ACLs (digest) |
| `blocking.py` | synchronous kazoo for short-lived processes (the CLIs), never on trio's thread |
| `zkserver.py` | the embedded ZooKeeper (Debian's), started and stopped |

May import: `logs`, `metrics` and `protocol` (error codes).
"""
