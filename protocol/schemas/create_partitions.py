"""CreatePartitions (key 37): partitions added to topics by an admin client. The gateway
relays it, authorized (Alter on each topic) with ACLs.

Declared from Kafka's CreatePartitions{Request,Response}.json: flexible from v2.
"""

from ..schema import BOOL, INT16, INT32, NULL, STRING, Array, F, S, api

CREATE_PARTITIONS = api(37, "CreatePartitions", "0-3", "2+", request=[
    F("topics", Array(S("CreatePartitionsTopic",
        F("name", STRING),
        F("count", INT32),
        F("assignments", Array(S("CreatePartitionsAssignment",
            F("broker_ids", Array(INT32)),
        )), nullable="0+"),
    ))),
    F("timeout_ms", INT32),
    F("validate_only", BOOL),
], response=[
    F("throttle_time_ms", INT32),
    F("results", Array(S("CreatePartitionsTopicResult",
        F("name", STRING),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=NULL),
    ))),
])
