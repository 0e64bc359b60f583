"""DescribeGroups (key 15): state, protocol and members of groups; from v5 (flexible), a
tagged field of groupkeeper's own (`protocol.schema.EXTENSION_TAGS`) with the group's status.

An unknown group is described as state "Dead" with no error, as Kafka's brokers do.
"""

from ..schema import BOOL, BYTES, EXTENSION_TAGS, INT16, INT32, NULL, STRING, Array, F, S, api

DESCRIBE_GROUPS = api(15, "DescribeGroups", "0-6", "5+", request=[
    F("groups", Array(STRING)),
    F("include_authorized_operations", BOOL, "3+"),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("groups", Array(S("DescribedGroup",
        F("error_code", INT16),
        F("error_message", STRING, "6+", nullable="6+", default=NULL),
        F("group_id", STRING),
        F("group_state", STRING),
        F("protocol_type", STRING),
        F("protocol_data", STRING),
        F("members", Array(S("DescribedGroupMember",
            F("member_id", STRING),
            F("group_instance_id", STRING, "4+", nullable="4+", default=NULL),
            F("client_id", STRING),
            F("client_host", STRING),
            F("member_metadata", BYTES),
            F("member_assignment", BYTES),
        ))),
        F("authorized_operations", INT32, "3+", default=-(2**31)),
        # groupkeeper's extension: the group's status by Burrow's rules (OK, WARN, STOP, STALL,
        # REWIND; null when not judged), for `groupkeeper groups describe --state`
        F("groupkeeper_status", STRING, "5+", nullable="5+", default=NULL, tag=EXTENSION_TAGS),
    ))),
])
