"""OffsetFetch (key 9): read committed positions.

v2+: a null topic list asks for every committed partition of the group, and a top-level
error code appears. v8+: several groups in one request. v9+: member id and epoch
(KIP-848). v10+: topics by id.
"""

from ..schema import BOOL, INT16, INT32, INT64, NULL, STRING, UUID, Array, F, S, api

OFFSET_FETCH = api(9, "OffsetFetch", "0-10", "6+", request=[
    F("group_id", STRING, "0-7"),
    F("topics", Array(S("OffsetFetchRequestTopic",
        F("name", STRING, "0-7"),
        F("partition_indexes", Array(INT32), "0-7"),
    )), "0-7", nullable="2-7"),
    F("groups", Array(S("OffsetFetchRequestGroup",
        F("group_id", STRING, "8+"),
        F("member_id", STRING, "9+", nullable="9+", default=NULL),
        F("member_epoch", INT32, "9+", default=-1),
        F("topics", Array(S("OffsetFetchRequestTopics",
            F("name", STRING, "8-9"),
            F("topic_id", UUID, "10+"),
            F("partition_indexes", Array(INT32), "8+"),
        )), "8+", nullable="8+"),
    )), "8+"),
    F("require_stable", BOOL, "7+"),
], response=[
    F("throttle_time_ms", INT32, "3+"),
    F("topics", Array(S("OffsetFetchResponseTopic",
        F("name", STRING, "0-7"),
        F("partitions", Array(S("OffsetFetchResponsePartition",
            F("partition_index", INT32, "0-7"),
            F("committed_offset", INT64, "0-7"),
            F("committed_leader_epoch", INT32, "5-7", default=-1),
            F("metadata", STRING, "0-7", nullable="0-7"),
            F("error_code", INT16, "0-7"),
        )), "0-7"),
    )), "0-7"),
    F("error_code", INT16, "2-7"),
    F("groups", Array(S("OffsetFetchResponseGroup",
        F("group_id", STRING, "8+"),
        F("topics", Array(S("OffsetFetchResponseTopics",
            F("name", STRING, "8-9"),
            F("topic_id", UUID, "10+"),
            F("partitions", Array(S("OffsetFetchResponsePartitions",
                F("partition_index", INT32, "8+"),
                F("committed_offset", INT64, "8+"),
                F("committed_leader_epoch", INT32, "8+", default=-1),
                F("metadata", STRING, "8+", nullable="8+"),
                F("error_code", INT16, "8+"),
            )), "8+"),
        )), "8+"),
        F("error_code", INT16, "8+"),
    )), "8+"),
])
