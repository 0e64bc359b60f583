"""Declarations of every API groupkeeper speaks, one module per API, and the registry by key."""

from ..schema import Api
from .add_offsets_to_txn import ADD_OFFSETS_TO_TXN
from .add_partitions_to_txn import ADD_PARTITIONS_TO_TXN
from .alter_configs import ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from .api_versions import API_VERSIONS
from .consumer import ASSIGNMENT, SUBSCRIPTION
from .consumer_group_describe import CONSUMER_GROUP_DESCRIBE
from .consumer_group_heartbeat import CONSUMER_GROUP_HEARTBEAT
from .create_partitions import CREATE_PARTITIONS
from .create_topics import CREATE_TOPICS
from .delete_groups import DELETE_GROUPS
from .delete_topics import DELETE_TOPICS
from .describe_cluster import DESCRIBE_CLUSTER
from .describe_configs import DESCRIBE_CONFIGS
from .end_txn import END_TXN
from .fetch import FETCH
from .describe_groups import DESCRIBE_GROUPS
from .find_coordinator import FIND_COORDINATOR
from .heartbeat import HEARTBEAT
from .init_producer_id import INIT_PRODUCER_ID
from .join_group import JOIN_GROUP
from .leave_group import LEAVE_GROUP
from .list_groups import LIST_GROUPS
from .list_offsets import LIST_OFFSETS
from .metadata import METADATA
from .offset_commit import OFFSET_COMMIT
from .offset_fetch import OFFSET_FETCH
from .offset_for_leader_epoch import OFFSET_FOR_LEADER_EPOCH
from .produce import PRODUCE
from .sasl_authenticate import SASL_AUTHENTICATE
from .sasl_handshake import SASL_HANDSHAKE
from .sync_group import SYNC_GROUP

APIS: dict[int, Api] = {a.key: a for a in (
    API_VERSIONS, METADATA, FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP,
    OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, LIST_OFFSETS,
    PRODUCE, FETCH, OFFSET_FOR_LEADER_EPOCH, SASL_HANDSHAKE, SASL_AUTHENTICATE, CONSUMER_GROUP_HEARTBEAT,
    CONSUMER_GROUP_DESCRIBE, DESCRIBE_CLUSTER, CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID,
    ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS,
    CREATE_PARTITIONS,
)}

__all__ = [
    "ADD_OFFSETS_TO_TXN", "ADD_PARTITIONS_TO_TXN", "ALTER_CONFIGS", "APIS", "API_VERSIONS", "ASSIGNMENT", "CONSUMER_GROUP_DESCRIBE", "CONSUMER_GROUP_HEARTBEAT", "CREATE_PARTITIONS", "CREATE_TOPICS", "DELETE_GROUPS", "DELETE_TOPICS", "DESCRIBE_CLUSTER", "DESCRIBE_CONFIGS", "DESCRIBE_GROUPS", "END_TXN", "FETCH", "FIND_COORDINATOR",
    "HEARTBEAT", "INCREMENTAL_ALTER_CONFIGS", "INIT_PRODUCER_ID", "JOIN_GROUP", "LEAVE_GROUP", "LIST_GROUPS", "LIST_OFFSETS", "METADATA", "OFFSET_COMMIT",
    "OFFSET_FETCH", "OFFSET_FOR_LEADER_EPOCH", "PRODUCE", "SASL_AUTHENTICATE", "SASL_HANDSHAKE", "SUBSCRIPTION",
    "SYNC_GROUP",
]
