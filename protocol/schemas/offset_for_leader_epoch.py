"""OffsetForLeaderEpoch (key 23): where a leader epoch ended, asked of the partition's
leader (a consumer checks its position after a leader change). A coordinator never leads,
and answers every partition NOT_LEADER_OR_FOLLOWER.
"""

from ..schema import INT16, INT32, INT64, STRING, Array, F, S, api

OFFSET_FOR_LEADER_EPOCH = api(23, "OffsetForLeaderEpoch", "2-4", "4+", request=[
    F("replica_id", INT32, "3+", default=-2),  # -1: a client; -2 (the default): a client of v0-2
    F("topics", Array(S("OffsetForLeaderTopic",
        F("topic", STRING),
        F("partitions", Array(S("OffsetForLeaderPartition",
            F("partition", INT32),
            F("current_leader_epoch", INT32, "2+", default=-1),
            F("leader_epoch", INT32),
        ))),
    ))),
], response=[
    F("throttle_time_ms", INT32, "2+"),
    F("topics", Array(S("OffsetForLeaderTopicResult",
        F("topic", STRING),
        F("partitions", Array(S("EpochEndOffset",
            F("error_code", INT16),
            F("partition", INT32),
            F("leader_epoch", INT32, "1+", default=-1),
            F("end_offset", INT64, default=-1),
        ))),
    ))),
])
