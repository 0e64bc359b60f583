"""Declarations of every API groupkeeper speaks, one module per API, and the registry by key."""

from ..schema import Api
from .api_versions import API_VERSIONS
from .consumer import ASSIGNMENT, SUBSCRIPTION
from .consumer_group_describe import CONSUMER_GROUP_DESCRIBE
from .consumer_group_heartbeat import CONSUMER_GROUP_HEARTBEAT
from .delete_groups import DELETE_GROUPS
from .describe_cluster import DESCRIBE_CLUSTER
from .fetch import FETCH
from .describe_groups import DESCRIBE_GROUPS
from .find_coordinator import FIND_COORDINATOR
from .heartbeat import HEARTBEAT
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
    CONSUMER_GROUP_DESCRIBE, DESCRIBE_CLUSTER,
)}

__all__ = [
    "APIS", "API_VERSIONS", "ASSIGNMENT", "CONSUMER_GROUP_DESCRIBE", "CONSUMER_GROUP_HEARTBEAT", "DELETE_GROUPS", "DESCRIBE_CLUSTER", "DESCRIBE_GROUPS", "FETCH", "FIND_COORDINATOR",
    "HEARTBEAT", "JOIN_GROUP", "LEAVE_GROUP", "LIST_GROUPS", "LIST_OFFSETS", "METADATA", "OFFSET_COMMIT",
    "OFFSET_FETCH", "OFFSET_FOR_LEADER_EPOCH", "PRODUCE", "SASL_AUTHENTICATE", "SASL_HANDSHAKE", "SUBSCRIPTION",
    "SYNC_GROUP",
]
