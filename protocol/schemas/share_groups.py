"""Share groups (KIP-932, "queues for Kafka"): the APIs a share consumer and an admin client
send, which groupkeeper never serves itself; through the gateway they are relayed to the
brokers (docs/architecture.md, "Share groups through the gateway").

- ShareGroupHeartbeat (76), ShareGroupDescribe (77): to the group's coordinator;
- ShareFetch (78), ShareAcknowledge (79): to partition leaders; their answers end in the
  leaders' `node_endpoints` (a regular field, not tagged), which the gateway rewrites;
- DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92):
  to the group's coordinator.

Version 0 of 76-79 was Kafka 4.0's early access, removed in 4.1 (v1 is the first stable);
ShareFetch and ShareAcknowledge v2 are Kafka 4.2's (KIP-1206, KIP-1222). Flexible in every
version. Field layouts as Kafka's message definitions give them.
"""

from ..schema import BOOL, BYTES, INT8, INT16, INT32, INT64, NULL, STRING, UUID, Array, F, S, api
from .produce import NODE_ENDPOINT

_LEADER = S("ShareLeaderIdAndEpoch",
    F("leader_id", INT32),
    F("leader_epoch", INT32),
)
_ACKNOWLEDGEMENTS = S("ShareAcknowledgementBatch",
    F("first_offset", INT64),
    F("last_offset", INT64),
    F("acknowledge_types", Array(INT8)),
)

SHARE_GROUP_HEARTBEAT = api(76, "ShareGroupHeartbeat", "0-1", "0+", request=[
    F("group_id", STRING),
    F("member_id", STRING),
    F("member_epoch", INT32),
    F("rack_id", STRING, nullable="0+", default=NULL),
    F("subscribed_topic_names", Array(STRING), nullable="0+", default=NULL),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=NULL),
    F("member_id", STRING, nullable="0+", default=NULL),
    F("member_epoch", INT32),
    F("heartbeat_interval_ms", INT32),
    F("assignment", S("ShareGroupHeartbeatAssignment",
        F("topic_partitions", Array(S("ShareGroupHeartbeatTopicPartitions",
            F("topic_id", UUID),
            F("partitions", Array(INT32)),
        ))),
    ), nullable="0+", default=NULL),
])

SHARE_GROUP_DESCRIBE = api(77, "ShareGroupDescribe", "0-1", "0+", request=[
    F("group_ids", Array(STRING)),
    F("include_authorized_operations", BOOL),
], response=[
    F("throttle_time_ms", INT32),
    F("groups", Array(S("DescribedShareGroup",
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=NULL),
        F("group_id", STRING),
        F("group_state", STRING),
        F("group_epoch", INT32),
        F("assignment_epoch", INT32),
        F("assignor_name", STRING),
        F("members", Array(S("ShareGroupMember",
            F("member_id", STRING),
            F("rack_id", STRING, nullable="0+", default=NULL),
            F("member_epoch", INT32),
            F("client_id", STRING),
            F("client_host", STRING),
            F("subscribed_topic_names", Array(STRING)),
            F("assignment", S("ShareGroupDescribeAssignment",
                F("topic_partitions", Array(S("ShareGroupDescribeTopicPartitions",
                    F("topic_id", UUID),
                    F("topic_name", STRING),
                    F("partitions", Array(INT32)),
                ))),
            )),
        ))),
        F("authorized_operations", INT32, default=-(2**31)),
    ))),
])

SHARE_FETCH = api(78, "ShareFetch", "0-2", "0+", request=[
    F("group_id", STRING, nullable="0+", default=NULL),
    F("member_id", STRING, nullable="0+", default=NULL),
    F("share_session_epoch", INT32),
    F("max_wait_ms", INT32),
    F("min_bytes", INT32),
    F("max_bytes", INT32, default=0x7FFFFFFF),
    F("max_records", INT32, "1+"),
    F("batch_size", INT32, "1+"),
    F("share_acquire_mode", INT8, "2+"),
    F("is_renew_ack", BOOL, "2+"),
    F("topics", Array(S("ShareFetchTopic",
        F("topic_id", UUID),
        F("partitions", Array(S("ShareFetchPartition",
            F("partition_index", INT32),
            F("partition_max_bytes", INT32, "0"),
            F("acknowledgement_batches", Array(_ACKNOWLEDGEMENTS)),
        ))),
    ))),
    F("forgotten_topics_data", Array(S("ShareForgottenTopic",
        F("topic_id", UUID),
        F("partitions", Array(INT32)),
    ))),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=NULL),
    F("acquisition_lock_timeout_ms", INT32, "1+"),
    F("responses", Array(S("ShareFetchableTopicResponse",
        F("topic_id", UUID),
        F("partitions", Array(S("ShareFetchPartitionData",
            F("partition_index", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=NULL),
            F("acknowledge_error_code", INT16),
            F("acknowledge_error_message", STRING, nullable="0+", default=NULL),
            F("current_leader", _LEADER),
            F("records", BYTES, nullable="0"),  # null in the early access only
            F("acquired_records", Array(S("ShareAcquiredRecords",
                F("first_offset", INT64),
                F("last_offset", INT64),
                F("delivery_count", INT16),
            ))),
        ))),
    ))),
    F("node_endpoints", Array(NODE_ENDPOINT)),
])

SHARE_ACKNOWLEDGE = api(79, "ShareAcknowledge", "0-2", "0+", request=[
    F("group_id", STRING, nullable="0+", default=NULL),
    F("member_id", STRING, nullable="0+", default=NULL),
    F("share_session_epoch", INT32),
    F("is_renew_ack", BOOL, "2+"),
    F("topics", Array(S("ShareAcknowledgeTopic",
        F("topic_id", UUID),
        F("partitions", Array(S("ShareAcknowledgePartition",
            F("partition_index", INT32),
            F("acknowledgement_batches", Array(_ACKNOWLEDGEMENTS)),
        ))),
    ))),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=NULL),
    F("acquisition_lock_timeout_ms", INT32, "2+"),
    F("responses", Array(S("ShareAcknowledgeTopicResponse",
        F("topic_id", UUID),
        F("partitions", Array(S("ShareAcknowledgePartitionData",
            F("partition_index", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=NULL),
            F("current_leader", _LEADER),
        ))),
    ))),
    F("node_endpoints", Array(NODE_ENDPOINT)),
])

_GROUP_ERROR = (F("error_code", INT16), F("error_message", STRING, nullable="0+", default=NULL))

DESCRIBE_SHARE_GROUP_OFFSETS = api(90, "DescribeShareGroupOffsets", "0-1", "0+", request=[
    F("groups", Array(S("DescribeShareGroupOffsetsGroup",
        F("group_id", STRING),
        F("topics", Array(S("DescribeShareGroupOffsetsTopic",
            F("topic_name", STRING),
            F("partitions", Array(INT32)),
        )), nullable="0+", default=NULL),
    ))),
], response=[
    F("throttle_time_ms", INT32),
    F("groups", Array(S("DescribeShareGroupOffsetsGroupResult",
        F("group_id", STRING),
        F("topics", Array(S("DescribeShareGroupOffsetsTopicResult",
            F("topic_name", STRING),
            F("topic_id", UUID),
            F("partitions", Array(S("DescribeShareGroupOffsetsPartitionResult",
                F("partition_index", INT32),
                F("start_offset", INT64),
                F("leader_epoch", INT32),
                F("lag", INT64, "1+", default=-1),  # KIP-1226 (Kafka 4.3): v1
                *_GROUP_ERROR,
            ))),
        ))),
        *_GROUP_ERROR,
    ))),
])

ALTER_SHARE_GROUP_OFFSETS = api(91, "AlterShareGroupOffsets", "0", "0+", request=[
    F("group_id", STRING),
    F("topics", Array(S("AlterShareGroupOffsetsTopic",
        F("topic_name", STRING),
        F("partitions", Array(S("AlterShareGroupOffsetsPartition",
            F("partition_index", INT32),
            F("start_offset", INT64),
        ))),
    ))),
], response=[
    F("throttle_time_ms", INT32),
    *_GROUP_ERROR,
    F("responses", Array(S("AlterShareGroupOffsetsTopicResult",
        F("topic_name", STRING),
        F("topic_id", UUID),
        F("partitions", Array(S("AlterShareGroupOffsetsPartitionResult",
            F("partition_index", INT32),
            *_GROUP_ERROR,
        ))),
    ))),
])

DELETE_SHARE_GROUP_OFFSETS = api(92, "DeleteShareGroupOffsets", "0", "0+", request=[
    F("group_id", STRING),
    F("topics", Array(S("DeleteShareGroupOffsetsTopic",
        F("topic_name", STRING),
    ))),
], response=[
    F("throttle_time_ms", INT32),
    *_GROUP_ERROR,
    F("responses", Array(S("DeleteShareGroupOffsetsTopicResult",
        F("topic_name", STRING),
        F("topic_id", UUID),
        *_GROUP_ERROR,
    ))),
])

# the share-group APIs that go to a group's coordinator (by group id), and those that go to leaders
BY_GROUP = (SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE, DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS,
            DELETE_SHARE_GROUP_OFFSETS)
BY_LEADER = (SHARE_FETCH, SHARE_ACKNOWLEDGE)
