"""ConsumerGroupDescribe (key 69, KIP-848): consumer-protocol groups as they are, with each
member's epoch, current and target assignment. v1 adds each member's type (KIP-1099): 0 a
member speaking the classic protocol (a group migrating), 1 the consumer protocol."""

from ..schema import BOOL, EXTENSION_TAGS, INT8, INT16, INT32, NULL, STRING, UUID, Array, F, S, api

_ASSIGNMENT = S("ConsumerGroupDescribeAssignment",
    F("topic_partitions", Array(S("ConsumerGroupDescribeTopicPartitions",
        F("topic_id", UUID),
        F("topic_name", STRING),
        F("partitions", Array(INT32)),
    ))),
)

CONSUMER_GROUP_DESCRIBE = api(69, "ConsumerGroupDescribe", "0-1", "0+", request=[
    F("group_ids", Array(STRING)),
    F("include_authorized_operations", BOOL),
], response=[
    F("throttle_time_ms", INT32),
    F("groups", Array(S("DescribedConsumerGroup",
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=NULL),
        F("group_id", STRING),
        F("group_state", STRING),
        F("group_epoch", INT32),
        F("assignment_epoch", INT32),
        F("assignor_name", STRING),
        F("members", Array(S("ConsumerGroupMember",
            F("member_id", STRING),
            F("instance_id", STRING, nullable="0+", default=NULL),
            F("rack_id", STRING, nullable="0+", default=NULL),
            F("member_epoch", INT32),
            F("client_id", STRING),
            F("client_host", STRING),
            F("subscribed_topic_names", Array(STRING)),
            F("subscribed_topic_regex", STRING, nullable="0+", default=NULL),
            F("assignment", _ASSIGNMENT),
            F("target_assignment", _ASSIGNMENT),
            F("member_type", INT8, "1+", default=-1),
        ))),
        F("authorized_operations", INT32, default=-(2**31)),
        # groupkeeper's extension, as in DescribeGroups: the group's status by Burrow's rules
        F("groupkeeper_status", STRING, nullable="0+", default=NULL, tag=EXTENSION_TAGS),
    ))),
])
