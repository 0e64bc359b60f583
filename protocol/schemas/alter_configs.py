"""AlterConfigs (key 33) and IncrementalAlterConfigs (key 44): configs changed by an admin
client. The gateway relays them, authorized (AlterConfigs on each resource) with ACLs.

Declared from Kafka's AlterConfigs and IncrementalAlterConfigs {Request,Response}.json:
flexible from v2 and v1.
"""

from ..schema import BOOL, INT8, INT16, INT32, STRING, Array, F, S, api

ALTER_CONFIGS = api(33, "AlterConfigs", "0-2", "2+", request=[
    F("resources", Array(S("AlterConfigsResource",
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configs", Array(S("AlterableConfig",
            F("name", STRING),
            F("value", STRING, nullable="0+"),
        ))),
    ))),
    F("validate_only", BOOL),
], response=[
    F("throttle_time_ms", INT32),
    F("responses", Array(S("AlterConfigsResourceResponse",
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F("resource_type", INT8),
        F("resource_name", STRING),
    ))),
])

INCREMENTAL_ALTER_CONFIGS = api(44, "IncrementalAlterConfigs", "0-1", "1+", request=[
    F("resources", Array(S("IncrementalAlterConfigsResource",
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configs", Array(S("IncrementalAlterableConfig",
            F("name", STRING),
            F("config_operation", INT8),
            F("value", STRING, nullable="0+"),
        ))),
    ))),
    F("validate_only", BOOL),
], response=[
    F("throttle_time_ms", INT32),
    F("responses", Array(S("IncrementalAlterConfigsResourceResponse",
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F("resource_type", INT8),
        F("resource_name", STRING),
    ))),
])
