"""Heartbeat (key 12): a member says it is alive; the answer tells it to rejoin when needed."""

from ..schema import INT16, INT32, NULL, STRING, F, api

HEARTBEAT = api(12, "Heartbeat", "0-4", "4+", request=[
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+", default=NULL),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
])
