"""FindCoordinator (key 10; the seeds' ConsumerMetadata): which node coordinates a group.

v4+ asks for several keys at once and answers one entry per key.
"""

from ..schema import INT8, INT16, INT32, STRING, Array, F, S, api

FIND_COORDINATOR = api(10, "FindCoordinator", "0-6", "3+", request=[
    F("key", STRING, "0-3"),
    F("key_type", INT8, "1+"),
    F("coordinator_keys", Array(STRING), "4+"),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16, "0-3"),
    F("error_message", STRING, "1-3", nullable="1-3"),
    F("node_id", INT32, "0-3"),
    F("host", STRING, "0-3"),
    F("port", INT32, "0-3"),
    F("coordinators", Array(S("Coordinator",
        F("key", STRING, "4+"),
        F("node_id", INT32, "4+"),
        F("host", STRING, "4+"),
        F("port", INT32, "4+"),
        F("error_code", INT16, "4+"),
        F("error_message", STRING, "4+", nullable="4+"),
    )), "4+"),
])
