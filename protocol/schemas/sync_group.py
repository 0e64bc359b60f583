"""SyncGroup (key 14): members collect their assignment for the generation they joined."""

from ..schema import BYTES, INT16, INT32, NULL, STRING, Array, F, S, api

SYNC_GROUP = api(14, "SyncGroup", "0-5", "4+", request=[
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+", default=NULL),
    F("protocol_type", STRING, "5+", nullable="5+", default=NULL),
    F("protocol_name", STRING, "5+", nullable="5+", default=NULL),
    F("assignments", Array(S("SyncGroupRequestAssignment",
        F("member_id", STRING),
        F("assignment", BYTES),
    ))),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("protocol_type", STRING, "5+", nullable="5+", default=NULL),
    F("protocol_name", STRING, "5+", nullable="5+", default=NULL),
    F("assignment", BYTES),
])
