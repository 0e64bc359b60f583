"""The consumer protocol's payloads, carried as opaque bytes inside JoinGroup and SyncGroup.

Each starts with an int16 version. Subscription v1 adds the partitions a member owns
(cooperative rebalancing), v2 its generation, v3 its rack. Assignment's layout is the same
in every version.
"""

from ..schema import BYTES, INT32, NULL, STRING, Array, F, S, data

_TOPIC_PARTITION = S("TopicPartition",
    F("topic", STRING),
    F("partitions", Array(INT32)),
)

SUBSCRIPTION = data("ConsumerProtocolSubscription", "0-3",
    F("topics", Array(STRING)),
    F("user_data", BYTES, nullable="0+", default=NULL),
    F("owned_partitions", Array(_TOPIC_PARTITION), "1+"),
    F("generation_id", INT32, "2+", default=-1),
    F("rack_id", STRING, "3+", nullable="3+", default=NULL),
)

ASSIGNMENT = data("ConsumerProtocolAssignment", "0-3",
    F("assigned_partitions", Array(_TOPIC_PARTITION)),
    F("user_data", BYTES, nullable="0+", default=NULL),
)
