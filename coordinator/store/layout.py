"""Where groupkeeper keeps things in ZooKeeper, and how each znode's data is encoded.

```
/brokers/ids/<id>                                   Kafka's broker registry (read)
/brokers/topics/<topic>                             Kafka's topic registry (read)
/brokers/topics/<topic>/partitions/<p>/state        a partition's leader and ISR (read)
/groupkeeper/config                                 cluster settings fixed at creation
/groupkeeper/instances/<id>                         ephemeral: advertised host and port, started
/groupkeeper/placement                              which instance each group-partition belongs on
/groupkeeper/partitions/<n>/owner                   ephemeral: instance and epoch
/groupkeeper/partitions/<n>/epoch                   persistent; its version is the epoch, its
                                                    data the last owner and how it let go
/groupkeeper/partitions/<n>/groups/<group>          group metadata, one write per generation
                                                    (zlib-compressed JSON), or the names of
                                                    the chunks holding it when it is larger
/groupkeeper/partitions/<n>/groups/<group>/record/<seq>-<i>
                                                    chunk i of a large group record
/groupkeeper/partitions/<n>/groups/<group>/members/<member>
                                                    a consumer-protocol group's member: its
                                                    own record (JSON), written alone when
                                                    only it changed; the group's record names
                                                    its members and holds the target
/groupkeeper/partitions/<n>/pending/<group>@<transactional id>@<producer id>@<epoch>
                                                    offsets of a transaction of that
                                                    producer epoch pending its outcome
                                                    (TxnOffsetCommit; store/pending.py)
/groupkeeper/partitions/<n>/groups/<group>/offsets/<topic>/<shard>
                                                    committed offsets of SHARD_PARTITIONS
                                                    partitions of one topic
/groupkeeper/transactions/<transactional id>        the latest known state of a transactional
                                                    id, as the gateways saw its transaction
                                                    coordinator answer (JSON: producer id and
                                                    epoch, begun, committed or aborted, when;
                                                    store/transactions.py)
```

Group and topic names are escaped into single znode names (`escape`), since a Kafka group
id may contain "/" or be ".".
"""

from __future__ import annotations

import functools
import json
import zlib
from typing import Any
from urllib.parse import quote, unquote

import orjson

ROOT = "/groupkeeper"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
KAFKA_CLUSTER_ID = "/cluster/id"  # {"version":"1","id":"<the cluster id>"}, written once
KAFKA_CONTROLLER = "/controller"  # {"version":1,"brokerid":1,...}, while a broker is controller

# ZooKeeper refuses requests over jute.maxbuffer (about 1 MB) by dropping the connection;
# no znode and no multi() of ours goes over this.
MAX_REQUEST_BYTES = 256 * 1024
# Offsets of SHARD_PARTITIONS partitions share a znode. Kafka allows 4096 characters of
# metadata per partition (offset.metadata.max.bytes, refused above it before the store); in
# JSON a character takes at most 6 bytes (a control character, escaped), so a partition at
# most about 24.6 KB and a shard of 8 at most about 197 KB: under MAX_REQUEST_BYTES with room
# for its path, its parents and the fence check, whatever the characters.
SHARD_PARTITIONS = 8
# Bytes a multi() op costs beyond its path and data (headers, version, flags), with margin.
OP_OVERHEAD = 64
# A compressed group record larger than this is written as chunks of this size, each in a
# fenced multi() of its own, and the group znode then names them (see PartitionStore).
RECORD_CHUNK_BYTES = MAX_REQUEST_BYTES - 8192


EMPTY = "%"  # the znode name of an empty group id or topic name (a lone "%" is no escape's output)
CACHED_NAME = 256  # characters: names up to this long are escaped once and remembered


def escape(name: str) -> str:
    """A group or topic name as one znode name: no "/", never "." or "..", never empty
    (Kafka accepts empty group ids and topic names in the offset APIs). Short names, the
    common case on the commit path, come from a bounded cache; long ones are escaped each
    time, so the cache never holds more than CACHED_NAME characters a name."""
    return _escape_cached(name) if len(name) <= CACHED_NAME else _escape(name)


def _escape(name: str) -> str:
    return quote(name, safe="").replace(".", "%2E") or EMPTY


_escape_cached = functools.lru_cache(maxsize=65536)(_escape)


def unescape(node: str) -> str:
    return "" if node == EMPTY else unquote(node)


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def config_path() -> str:
    return f"{ROOT}/config"


INSTANCES = f"{ROOT}/instances"
# operators' changes made straight in ZooKeeper (ACLs, users), one sequential znode each:
# {"by", "host", "kind", "what", "at_ms"}, written by the CLIs, the newest AUDIT_KEEP kept
AUDIT = f"{ROOT}/audit"
AUDIT_KEEP = 1000


def instance_path(instance_id: int) -> str:
    return f"{INSTANCES}/{instance_id}"


TRANSACTIONS = f"{ROOT}/transactions"


def transaction_path(transactional_id: str) -> str:
    """The record of a transactional id's latest known state (store/transactions.py)."""
    return f"{TRANSACTIONS}/{escape(transactional_id)}"


def placement_path() -> str:
    return f"{ROOT}/placement"


def partition_path(partition: int) -> str:
    return f"{ROOT}/partitions/{partition}"


def owner_path(partition: int) -> str:
    return f"{partition_path(partition)}/owner"


def epoch_path(partition: int) -> str:
    return f"{partition_path(partition)}/epoch"


def pending_path(partition: int) -> str:
    """The folder of a group-partition's pending transactional offsets (store/pending.py)."""
    return f"{partition_path(partition)}/pending"


def groups_path(partition: int) -> str:
    return f"{partition_path(partition)}/groups"


def group_path(partition: int, group: str) -> str:
    return f"{groups_path(partition)}/{escape(group)}"


def record_path(partition: int, group: str) -> str:
    return f"{group_path(partition, group)}/record"


def members_path(partition: int, group: str) -> str:
    return f"{group_path(partition, group)}/members"


def member_path(partition: int, group: str, member: str) -> str:
    return f"{members_path(partition, group)}/{escape(member)}"


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


def encode_shard(entries: dict[int, tuple]) -> bytes:
    """`{"<partition>":[offset,leader_epoch,metadata,commit_ms],...}`: the offset path's
    hottest line, by orjson (0.5 us for eight entries; 3.7 by hand, more by json.dumps)."""
    return orjson.dumps(entries, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS)


def decode_shard(data: bytes) -> dict[int, tuple]:
    """A shard's entries, as `encode_shard` wrote them."""
    return {int(p): tuple(entry) for p, entry in decode(data).items()}


def decode(data: bytes) -> Any:
    return json.loads(data.decode())


def encode_record(value: Any) -> bytes:
    """A group record as stored: JSON, zlib-compressed (member ids, client ids, hosts and
    subscriptions repeat from member to member; a 10,000-member group shrinks about tenfold)."""
    return zlib.compress(encode(value), 1)


def encode_chunk_names(names: list[str]) -> bytes:
    """A group znode's data when its record is in chunks: their names, in order."""
    return encode({"chunks": names})


def decode_group(data: bytes) -> Any | list[str]:
    """A group znode's data: the record, or (a list) the names of the chunks that hold it.
    Plain JSON without "chunks" is a record as written before records were compressed."""
    if data[:1] == b"{":
        value = decode(data)
        return value.get("chunks", value)
    return decode_record(data)


def decode_record(data: bytes) -> Any:
    return decode(zlib.decompress(data))
