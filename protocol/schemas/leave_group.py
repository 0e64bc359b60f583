"""LeaveGroup (key 13): one member (v0-2) or a batch of members (v3+) leave a group."""

from ..schema import INT16, INT32, NULL, STRING, Array, F, S, api

LEAVE_GROUP = api(13, "LeaveGroup", "0-5", "4+", request=[
    F("group_id", STRING),
    F("member_id", STRING, "0-2"),
    F("members", Array(S("MemberIdentity",
        F("member_id", STRING, "3+"),
        F("group_instance_id", STRING, "3+", nullable="3+", default=NULL),
        F("reason", STRING, "5+", nullable="5+", default=NULL),
    )), "3+"),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("members", Array(S("MemberResponse",
        F("member_id", STRING, "3+"),
        F("group_instance_id", STRING, "3+", nullable="3+"),
        F("error_code", INT16, "3+"),
    )), "3+"),
])
