"""DeleteGroups (key 42): remove empty groups and their committed offsets."""

from ..schema import INT16, INT32, STRING, Array, F, S, api

DELETE_GROUPS = api(42, "DeleteGroups", "0-2", "2+", request=[
    F("groups_names", Array(STRING)),
], response=[
    F("throttle_time_ms", INT32),
    F("results", Array(S("DeletableGroupResult",
        F("group_id", STRING),
        F("error_code", INT16),
    ))),
])
