"""DeleteTopics (key 20): topics deleted by an admin client. The gateway relays it,
authorized (Delete on each topic) when ACLs are on. v6 names topics by name or by id.

Declared from Kafka's DeleteTopics{Request,Response}.json: flexible from v4.
"""

from ..schema import INT16, INT32, NULL, STRING, UUID, Array, F, S, api

DELETE_TOPICS = api(20, "DeleteTopics", "1-6", "4+", request=[
    F("topics", Array(S("DeleteTopicState",
        F("name", STRING, "6+", nullable="6+", default=NULL),
        F("topic_id", UUID, "6+"),
    )), "6+"),
    F("topic_names", Array(STRING), "0-5"),
    F("timeout_ms", INT32),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("responses", Array(S("DeletableTopicResult",
        F("name", STRING, nullable="6+"),
        F("topic_id", UUID, "6+"),
        F("error_code", INT16),
        F("error_message", STRING, "5+", nullable="5+", default=NULL),
    ))),
])
