"""SaslHandshake (key 17): the client names a SASL mechanism; the answer lists those enabled.

After v0 the SASL tokens follow as bare size-prefixed frames with no Kafka header; after v1
they travel inside SaslAuthenticate requests.
"""

from ..schema import INT16, STRING, Array, F, api

SASL_HANDSHAKE = api(17, "SaslHandshake", "0-1", "none", request=[
    F("mechanism", STRING),
], response=[
    F("error_code", INT16),
    F("mechanisms", Array(STRING)),
])
