"""Produce (key 0): records to a partition leader. Clients send it only to leaders; a
coordinator never leads, and answers every partition NOT_LEADER_OR_FOLLOWER (with acks=0,
which has no answer, it closes the connection, as a broker does on an error) so that the
client looks its leader up again. Topics are named by id from v13. The leader-discovery
tagged fields are left undeclared (skipped on reading, absent from what it writes).
"""

from ..schema import BYTES, INT16, INT32, INT64, NULL, STRING, UUID, Array, F, S, api

PRODUCE = api(0, "Produce", "3-13", "9+", request=[
    F("transactional_id", STRING, nullable="3+", default=NULL),
    F("acks", INT16),
    F("timeout_ms", INT32),
    F("topic_data", Array(S("TopicProduceData",
        F("name", STRING, "0-12"),
        F("topic_id", UUID, "13+"),
        F("partition_data", Array(S("PartitionProduceData",
            F("index", INT32),
            F("records", BYTES, nullable="0+"),
        ))),
    ))),
], response=[
    F("responses", Array(S("TopicProduceResponse",
        F("name", STRING, "0-12"),
        F("topic_id", UUID, "13+"),
        F("partition_responses", Array(S("PartitionProduceResponse",
            F("index", INT32),
            F("error_code", INT16),
            F("base_offset", INT64),
            F("log_append_time_ms", INT64, "2+", default=-1),
            F("log_start_offset", INT64, "5+", default=-1),
            F("record_errors", Array(S("BatchIndexAndErrorMessage",
                F("batch_index", INT32),
                F("batch_index_error_message", STRING, nullable="8+", default=NULL),
            )), "8+"),
            F("error_message", STRING, "8+", nullable="8+", default=NULL),
        ))),
    ))),
    F("throttle_time_ms", INT32, "1+"),
])
