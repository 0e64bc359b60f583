"""ApiVersions (key 18): which APIs and versions the server speaks.

v3 is the first flexible version. Its response is always sent with response header v0,
so a client that does not yet know our ranges can read it.
"""

from ..schema import INT16, INT32, INT64, BOOL, STRING, Array, F, S, api

API_VERSIONS = api(18, "ApiVersions", "0-4", "3+", request=[
    F("client_software_name", STRING, "3+"),
    F("client_software_version", STRING, "3+"),
], response=[
    F("error_code", INT16),
    F("api_keys", Array(S("ApiVersion",
        F("api_key", INT16),
        F("min_version", INT16),
        F("max_version", INT16),
    ))),
    F("throttle_time_ms", INT32, "1+"),
    F("supported_features", Array(S("SupportedFeatureKey",
        F("name", STRING, "3+"),
        F("min_version", INT16, "3+"),
        F("max_version", INT16, "3+"),
    )), "3+", tag=0),
    F("finalized_features_epoch", INT64, "3+", default=-1, tag=1),
    F("finalized_features", Array(S("FinalizedFeatureKey",
        F("name", STRING, "3+"),
        F("max_version_level", INT16, "3+"),
        F("min_version_level", INT16, "3+"),
    )), "3+", tag=2),
    F("zk_migration_ready", BOOL, "3+", tag=3),
])
