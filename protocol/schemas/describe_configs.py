"""DescribeConfigs (key 32): the configs of topics, brokers, broker loggers, groups. The
gateway relays it, authorized (DescribeConfigs on each resource) with ACLs.

Declared from Kafka's DescribeConfigs{Request,Response}.json, v1-4 (v0 is gone from Kafka 4):
flexible from v4. Resource types: 2 topic, 4 broker, 8 broker logger, 16 client metrics,
32 group.
"""

from ..schema import BOOL, INT8, INT16, INT32, STRING, Array, F, S, api

DESCRIBE_CONFIGS = api(32, "DescribeConfigs", "1-4", "4+", request=[
    F("resources", Array(S("DescribeConfigsResource",
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configuration_keys", Array(STRING), nullable="0+"),
    ))),
    F("include_synonyms", BOOL, "1+"),
    F("include_documentation", BOOL, "3+"),
], response=[
    F("throttle_time_ms", INT32),
    F("results", Array(S("DescribeConfigsResult",
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("configs", Array(S("DescribeConfigsResourceResult",
            F("name", STRING),
            F("value", STRING, nullable="0+"),
            F("read_only", BOOL),
            F("config_source", INT8, "1+", default=-1),
            F("is_default", BOOL, "0"),
            F("is_sensitive", BOOL),
            F("synonyms", Array(S("DescribeConfigsSynonym",
                F("name", STRING, "1+"),
                F("value", STRING, "1+", nullable="0+"),
                F("source", INT8, "1+"),
            )), "1+"),
            F("config_type", INT8, "3+"),
            F("documentation", STRING, "3+", nullable="0+"),
        ))),
    ))),
])
