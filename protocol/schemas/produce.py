"""Produce (key 0): records to a partition leader. Clients send it only to leaders; a
coordinator never leads, and answers every partition NOT_LEADER_OR_FOLLOWER (with acks=0,
which has no answer, it closes the connection, as a broker does on an error) so that the
client looks its leader up again. Topics are named by id from v13.

KIP-951's leader discovery (v10+): `node_endpoints`, the addresses of the new leaders named
by partitions answered NOT_LEADER_OR_FOLLOWER, is declared (the gateway rewrites them); the
partitions' `current_leader` (tag 0, a struct-valued tagged field, which the codec does not
read) is not: skipped on reading, absent from what is written.
"""

from ..schema import BYTES, INT16, INT32, INT64, NULL, STRING, UUID, Array, F, S, api

# KIP-951: Kafka's NodeEndpoint, the same in ProduceResponse (v10+) and FetchResponse (v16+)
NODE_ENDPOINT = S("NodeEndpoint",
    F("node_id", INT32),
    F("host", STRING),
    F("port", INT32),
    F("rack", STRING, nullable="0+", default=NULL),
)

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
    F("node_endpoints", Array(NODE_ENDPOINT), "10+", tag=0),  # ProduceResponse.json: tag 0, 10+
])
