"""ConsumerGroupHeartbeat (key 68, KIP-848): the one request of a consumer-protocol member.

It joins (member epoch 0), stays, reconciles and leaves (-1; -2 a static member's pause)
with it, sending only what changed since its last heartbeat (null: unchanged). The answer
carries its epoch, the interval the coordinator wants, and its assignment when that
changed. v1 adds the subscription by regular expression.
"""

from ..schema import INT16, INT32, NULL, STRING, UUID, Array, F, S, api

_OWNED = S("ConsumerGroupHeartbeatTopicPartitions",
    F("topic_id", UUID),
    F("partitions", Array(INT32)),
)

CONSUMER_GROUP_HEARTBEAT = api(68, "ConsumerGroupHeartbeat", "0-1", "0+", request=[
    F("group_id", STRING),
    F("member_id", STRING),
    F("member_epoch", INT32),
    F("instance_id", STRING, nullable="0+", default=NULL),
    F("rack_id", STRING, nullable="0+", default=NULL),
    F("rebalance_timeout_ms", INT32, default=-1),
    F("subscribed_topic_names", Array(STRING), nullable="0+", default=NULL),
    F("subscribed_topic_regex", STRING, "1+", nullable="1+", default=NULL),
    F("server_assignor", STRING, nullable="0+", default=NULL),
    F("topic_partitions", Array(_OWNED), nullable="0+", default=NULL),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=NULL),
    F("member_id", STRING, nullable="0+", default=NULL),
    F("member_epoch", INT32),
    F("heartbeat_interval_ms", INT32),
    F("assignment", S("ConsumerGroupHeartbeatAssignment",
        F("topic_partitions", Array(_OWNED)),
    ), nullable="0+", default=NULL),
])
