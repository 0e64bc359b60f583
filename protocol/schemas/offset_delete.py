"""OffsetDelete (key 47, KIP-496): delete a group's committed offsets of some partitions,
refused (GROUP_SUBSCRIBED_TO_TOPIC) for topics its members consume."""

from ..schema import INT16, INT32, STRING, Array, F, S, api

OFFSET_DELETE = api(47, "OffsetDelete", "0", "none", request=[
    F("group_id", STRING),
    F("topics", Array(S("OffsetDeleteRequestTopic",
        F("name", STRING),
        F("partitions", Array(S("OffsetDeleteRequestPartition",
            F("partition_index", INT32),
        ))),
    ))),
], response=[
    F("error_code", INT16),
    F("throttle_time_ms", INT32),
    F("topics", Array(S("OffsetDeleteResponseTopic",
        F("name", STRING),
        F("partitions", Array(S("OffsetDeleteResponsePartition",
            F("partition_index", INT32),
            F("error_code", INT16),
        ))),
    ))),
])
