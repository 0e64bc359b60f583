"""CreateTopics (key 19): topics made by an admin client. The gateway relays it, authorized
(Create on the cluster or the topic) when ACLs are on.

Declared from Kafka's CreateTopics{Request,Response}.json: flexible from v5; v5+ answers a
topic's partitions, replication and configs; `topic_config_error_code` is tagged (tag 0).
"""

from ..schema import BOOL, INT8, INT16, INT32, NULL, STRING, UUID, Array, F, S, api

CREATE_TOPICS = api(19, "CreateTopics", "2-7", "5+", request=[
    F("topics", Array(S("CreatableTopic",
        F("name", STRING),
        F("num_partitions", INT32),
        F("replication_factor", INT16),
        F("assignments", Array(S("CreatableReplicaAssignment",
            F("partition_index", INT32),
            F("broker_ids", Array(INT32)),
        ))),
        F("configs", Array(S("CreatableTopicConfig",
            F("name", STRING),
            F("value", STRING, nullable="0+"),
        ))),
    ))),
    F("timeout_ms", INT32, default=60000),
    F("validate_only", BOOL, "1+"),
], response=[
    F("throttle_time_ms", INT32, "2+"),
    F("topics", Array(S("CreatableTopicResult",
        F("name", STRING),
        F("topic_id", UUID, "7+"),
        F("error_code", INT16),
        F("error_message", STRING, "1+", nullable="0+", default=NULL),
        F("topic_config_error_code", INT16, "5+", tag=0),
        F("num_partitions", INT32, "5+", default=-1),
        F("replication_factor", INT16, "5+", default=-1),
        F("configs", Array(S("CreatableTopicConfigs",
            F("name", STRING, "5+"),
            F("value", STRING, "5+", nullable="5+"),
            F("read_only", BOOL, "5+"),
            F("config_source", INT8, "5+", default=-1),
            F("is_sensitive", BOOL, "5+"),
        )), "5+", nullable="5+"),
    ))),
])
