"""Fetch (key 1): records from a partition leader. Clients send it only to leaders; a
coordinator never leads, and answers every partition NOT_LEADER_OR_FOLLOWER so that the
client looks its leader up again. Topics are named by id from v13. The partitions' tagged
fields (diverging_epoch, current_leader, snapshot_id: struct-valued, which the codec does not
read) are left undeclared (skipped on reading, absent from what is written); KIP-951's
`node_endpoints` (v16+), the new leaders' addresses, is declared: the gateway rewrites them.
"""

from ..schema import BYTES, INT8, INT16, INT32, INT64, NULL, STRING, UUID, Array, F, S, api
from .produce import NODE_ENDPOINT

FETCH = api(1, "Fetch", "4-18", "12+", request=[
    F("cluster_id", STRING, "12+", nullable="12+", default=NULL, tag=0),
    F("replica_id", INT32, "0-14", default=-1),
    F("max_wait_ms", INT32),
    F("min_bytes", INT32),
    F("max_bytes", INT32, "3+", default=0x7FFFFFFF),
    F("isolation_level", INT8, "4+"),
    F("session_id", INT32, "7+"),
    F("session_epoch", INT32, "7+", default=-1),
    F("topics", Array(S("FetchTopic",
        F("topic", STRING, "0-12"),
        F("topic_id", UUID, "13+"),
        F("partitions", Array(S("FetchPartition",
            F("partition", INT32),
            F("current_leader_epoch", INT32, "9+", default=-1),
            F("fetch_offset", INT64),
            F("last_fetched_epoch", INT32, "12+", default=-1),
            F("log_start_offset", INT64, "5+", default=-1),
            F("partition_max_bytes", INT32),
            F("replica_directory_id", UUID, "17+", tag=0),
        ))),
    ))),
    F("forgotten_topics_data", Array(S("ForgottenTopic",
        F("topic", STRING, "7-12"),
        F("topic_id", UUID, "13+"),
        F("partitions", Array(INT32)),
    )), "7+"),
    F("rack_id", STRING, "11+"),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16, "7+"),
    F("session_id", INT32, "7+"),
    F("responses", Array(S("FetchableTopicResponse",
        F("topic", STRING, "0-12"),
        F("topic_id", UUID, "13+"),
        F("partitions", Array(S("FetchPartitionData",
            F("partition_index", INT32),
            F("error_code", INT16),
            F("high_watermark", INT64),
            F("last_stable_offset", INT64, "4+", default=-1),
            F("log_start_offset", INT64, "5+", default=-1),
            F("aborted_transactions", Array(S("AbortedTransaction",
                F("producer_id", INT64),
                F("first_offset", INT64),
            )), "4+", nullable="4+"),
            F("preferred_read_replica", INT32, "11+", default=-1),
            F("records", BYTES, nullable="0+"),
        ))),
    ))),
    F("node_endpoints", Array(NODE_ENDPOINT), "16+", tag=0),  # FetchResponse.json: tag 0, 16+
])
