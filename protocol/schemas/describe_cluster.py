"""DescribeCluster (key 60, KIP-700): the cluster's id, controller and brokers, as admin
clients ask for them. The gateway relays it and rewrites the brokers' addresses.

Declared from Kafka's DescribeCluster{Request,Response}.json: flexible from v0; v1 adds
endpoint_type (KIP-919: 1 brokers, 2 controllers), v2 include_fenced_brokers and the
brokers' is_fenced (KIP-1073).
"""

from ..schema import BOOL, INT8, INT16, INT32, NULL, STRING, Array, F, S, api

_UNKNOWN_OPERATIONS = -(2**31)

DESCRIBE_CLUSTER = api(60, "DescribeCluster", "0-2", "0+", request=[
    F("include_cluster_authorized_operations", BOOL),
    F("endpoint_type", INT8, "1+", default=1),
    F("include_fenced_brokers", BOOL, "2+"),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=NULL),
    F("endpoint_type", INT8, "1+", default=1),
    F("cluster_id", STRING),
    F("controller_id", INT32, default=-1),
    F("brokers", Array(S("DescribeClusterBroker",
        F("broker_id", INT32),
        F("host", STRING),
        F("port", INT32),
        F("rack", STRING, nullable="0+", default=NULL),
        F("is_fenced", BOOL, "2+"),
    ))),
    F("cluster_authorized_operations", INT32, default=_UNKNOWN_OPERATIONS),
])
