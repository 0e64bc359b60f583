"""ListGroups (key 16): the groups a coordinator owns. v4+ filters by state, v5+ by type."""

from ..schema import INT16, INT32, STRING, Array, F, S, api

LIST_GROUPS = api(16, "ListGroups", "0-5", "3+", request=[
    F("states_filter", Array(STRING), "4+"),
    F("types_filter", Array(STRING), "5+"),
], response=[
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("groups", Array(S("ListedGroup",
        F("group_id", STRING),
        F("protocol_type", STRING),
        F("group_state", STRING, "4+"),
        F("group_type", STRING, "5+"),
    ))),
])
