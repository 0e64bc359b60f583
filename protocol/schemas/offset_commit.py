"""OffsetCommit (key 8): a member, or a standalone consumer, stores its positions.

v1 carries a per-partition commit timestamp; v2-4 a retention time; v6+ the leader
epoch; v7+ the static member id; v9+ means a member epoch where generation_id was
(KIP-848 groups); v10+ names topics by id.
"""

from ..schema import INT16, INT32, INT64, NULL, STRING, UUID, Array, F, S, api

OFFSET_COMMIT = api(8, "OffsetCommit", "0-10", "8+", request=[
    F("group_id", STRING),
    F("generation_id_or_member_epoch", INT32, "1+", default=-1),
    F("member_id", STRING, "1+"),
    F("group_instance_id", STRING, "7+", nullable="7+", default=NULL),
    F("retention_time_ms", INT64, "2-4", default=-1),
    F("topics", Array(S("OffsetCommitRequestTopic",
        F("name", STRING, "0-9"),
        F("topic_id", UUID, "10+"),
        F("partitions", Array(S("OffsetCommitRequestPartition",
            F("partition_index", INT32),
            F("committed_offset", INT64),
            F("committed_leader_epoch", INT32, "6+", default=-1),
            F("commit_timestamp", INT64, "1", default=-1),
            F("committed_metadata", STRING, nullable="0+"),
        ))),
    ))),
], response=[
    F("throttle_time_ms", INT32, "3+"),
    F("topics", Array(S("OffsetCommitResponseTopic",
        F("name", STRING, "0-9"),
        F("topic_id", UUID, "10+"),
        F("partitions", Array(S("OffsetCommitResponsePartition",
            F("partition_index", INT32),
            F("error_code", INT16),
        ))),
    ))),
])
