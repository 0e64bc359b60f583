"""JoinGroup (key 11): a member asks to join, or rejoin, a group's next generation.

v4+: a member without an id is first told MEMBER_ID_REQUIRED with one to use.
v5+: static membership (group_instance_id). v8+: a reason. v9+: skip_assignment.
"""

from ..schema import BOOL, BYTES, INT16, INT32, NULL, STRING, Array, F, S, api

JOIN_GROUP = api(11, "JoinGroup", "0-9", "6+", request=[
    F("group_id", STRING),
    F("session_timeout_ms", INT32),
    F("rebalance_timeout_ms", INT32, "1+", default=-1),
    F("member_id", STRING),
    F("group_instance_id", STRING, "5+", nullable="5+", default=NULL),
    F("protocol_type", STRING),
    F("protocols", Array(S("JoinGroupRequestProtocol",
        F("name", STRING),
        F("metadata", BYTES),
    ))),
    F("reason", STRING, "8+", nullable="8+", default=NULL),
], response=[
    F("throttle_time_ms", INT32, "2+"),
    F("error_code", INT16),
    F("generation_id", INT32, default=-1),
    F("protocol_type", STRING, "7+", nullable="7+", default=NULL),
    F("protocol_name", STRING, nullable="7+"),
    F("leader", STRING),
    F("skip_assignment", BOOL, "9+"),
    F("member_id", STRING),
    F("members", Array(S("JoinGroupResponseMember",
        F("member_id", STRING),
        F("group_instance_id", STRING, "5+", nullable="5+", default=NULL),
        F("metadata", BYTES),
    ))),
])
