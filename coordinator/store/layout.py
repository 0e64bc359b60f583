"""Where groupkeeper keeps things in ZooKeeper, and how each znode's data is encoded.

```
/brokers/ids/<id>                                   Kafka's broker registry (read)
/brokers/topics/<topic>                             Kafka's topic registry (read)
/groupkeeper/config                                 cluster settings fixed at creation
/groupkeeper/instances/<id>                         ephemeral: host, port, started
/groupkeeper/partitions/<n>/owner                   ephemeral: instance and epoch
/groupkeeper/partitions/<n>/epoch                   persistent; its version is the epoch
/groupkeeper/partitions/<n>/groups/<group>          group metadata, one write per generation
/groupkeeper/partitions/<n>/groups/<group>/offsets/<topic>/<shard>
                                                    committed offsets of SHARD_PARTITIONS
                                                    partitions of one topic
```

Group and topic names are escaped into single znode names (`escape`), since a Kafka group
id may contain "/" or be ".".
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, unquote

ROOT = "/groupkeeper"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"

# ZooKeeper refuses requests over jute.maxbuffer (about 1 MB) by dropping the connection;
# no znode and no multi() of ours goes over this.
MAX_REQUEST_BYTES = 256 * 1024
# Offset metadata is at most 4096 characters (Kafka's offset.metadata.max.bytes); escaped
# as JSON a character takes at most 6 bytes, so one partition's entry is under 25 KB and a
# shard of 8 stays under 200 KB, within MAX_REQUEST_BYTES whatever the metadata.
MAX_METADATA_CHARS = 4096
SHARD_PARTITIONS = 8
# Bytes a multi() op costs beyond its path and data (headers, version, flags), with margin.
OP_OVERHEAD = 64


def escape(name: str) -> str:
    """A group or topic name as one znode name: no "/", never "." or ".."."""
    return quote(name, safe="").replace(".", "%2E")


def unescape(node: str) -> str:
    return unquote(node)


def config_path() -> str:
    return f"{ROOT}/config"


def instance_path(instance_id: int) -> str:
    return f"{ROOT}/instances/{instance_id}"


def partition_path(partition: int) -> str:
    return f"{ROOT}/partitions/{partition}"


def owner_path(partition: int) -> str:
    return f"{partition_path(partition)}/owner"


def epoch_path(partition: int) -> str:
    return f"{partition_path(partition)}/epoch"


def groups_path(partition: int) -> str:
    return f"{partition_path(partition)}/groups"


def group_path(partition: int, group: str) -> str:
    return f"{groups_path(partition)}/{escape(group)}"


def offsets_path(partition: int, group: str) -> str:
    return f"{group_path(partition, group)}/offsets"


def topic_offsets_path(partition: int, group: str, topic: str) -> str:
    return f"{offsets_path(partition, group)}/{escape(topic)}"


def shard_path(partition: int, group: str, topic: str, shard: int) -> str:
    return f"{topic_offsets_path(partition, group, topic)}/{shard}"


def shard_of(topic_partition: int) -> int:
    return topic_partition // SHARD_PARTITIONS


def encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def decode(data: bytes) -> Any:
    return json.loads(data.decode())
