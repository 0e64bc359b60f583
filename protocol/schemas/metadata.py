"""Metadata (key 3): brokers and topics. Clients bootstrap from it and find partition counts.

A null topic list (v1+) asks for every topic; v0 asks for every topic with an empty list.
"""

from ..schema import BOOL, INT16, INT32, NULL, STRING, UUID, Array, F, S, api

_UNKNOWN_OPERATIONS = -(2**31)

METADATA = api(3, "Metadata", "0-13", "9+", request=[
    F("topics", Array(S("MetadataRequestTopic",
        F("topic_id", UUID, "10+"),
        F("name", STRING, nullable="10+"),
    )), nullable="1+"),
    F("allow_auto_topic_creation", BOOL, "4+", default=True),
    F("include_cluster_authorized_operations", BOOL, "8-10"),
    F("include_topic_authorized_operations", BOOL, "8+"),
], response=[
    F("throttle_time_ms", INT32, "3+"),
    F("brokers", Array(S("MetadataResponseBroker",
        F("node_id", INT32),
        F("host", STRING),
        F("port", INT32),
        F("rack", STRING, "1+", nullable="1+", default=NULL),
    ))),
    F("cluster_id", STRING, "2+", nullable="2+", default=NULL),
    F("controller_id", INT32, "1+", default=-1),
    F("topics", Array(S("MetadataResponseTopic",
        F("error_code", INT16),
        F("name", STRING, nullable="12+"),
        F("topic_id", UUID, "10+"),
        F("is_internal", BOOL, "1+"),
        F("partitions", Array(S("MetadataResponsePartition",
            F("error_code", INT16),
            F("partition_index", INT32),
            F("leader_id", INT32),
            F("leader_epoch", INT32, "7+", default=-1),
            F("replica_nodes", Array(INT32)),
            F("isr_nodes", Array(INT32)),
            F("offline_replicas", Array(INT32), "5+"),
        ))),
        F("topic_authorized_operations", INT32, "8+", default=_UNKNOWN_OPERATIONS),
    ))),
    F("cluster_authorized_operations", INT32, "8-10", default=_UNKNOWN_OPERATIONS),
    F("error_code", INT16, "13+"),
])
