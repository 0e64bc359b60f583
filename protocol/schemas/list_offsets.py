"""ListOffsets (key 2): a partition leader's offsets for a timestamp.

Timestamp -1 asks for the log end (the next offset to be written), -2 for the log start;
a real timestamp for the earliest offset whose record timestamp is at least that (offset
-1 when there is none). v0 answered a list of offsets (`old_style_offsets`); v1+ one offset
with its timestamp. Brokers answer it; groupkeeper only asks (the `groups` CLI).
"""

from ..schema import INT8, INT16, INT32, INT64, STRING, Array, F, S, api

LIST_OFFSETS = api(2, "ListOffsets", "0-11", "6+", request=[
    F("replica_id", INT32, default=-1),  # -1: a client, not a follower
    F("isolation_level", INT8, "2+"),
    F("topics", Array(S("ListOffsetsTopic",
        F("name", STRING),
        F("partitions", Array(S("ListOffsetsPartition",
            F("partition_index", INT32),
            F("current_leader_epoch", INT32, "4+", default=-1),
            F("timestamp", INT64),
            F("max_num_offsets", INT32, "0", default=1),
        ))),
    ))),
    F("timeout_ms", INT32, "10+"),
], response=[
    F("throttle_time_ms", INT32, "2+"),
    F("topics", Array(S("ListOffsetsTopicResponse",
        F("name", STRING),
        F("partitions", Array(S("ListOffsetsPartitionResponse",
            F("partition_index", INT32),
            F("error_code", INT16),
            F("old_style_offsets", Array(INT64), "0"),
            F("timestamp", INT64, "1+", default=-1),
            F("offset", INT64, "1+", default=-1),
            F("leader_epoch", INT32, "4+", default=-1),
        ))),
    ))),
])
