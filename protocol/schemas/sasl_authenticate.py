"""SaslAuthenticate (key 36): one SASL token each way, after a SaslHandshake v1."""

from ..schema import BYTES, INT16, INT64, STRING, F, api

SASL_AUTHENTICATE = api(36, "SaslAuthenticate", "0-2", "2+", request=[
    F("auth_bytes", BYTES),
], response=[
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("auth_bytes", BYTES),
    F("session_lifetime_ms", INT64, "1+"),
])
