"""InitProducerId (key 22): an idempotent or transactional producer's id and epoch. The
gateway relays it to the broker (the transaction coordinator's node port for a transactional
producer), authorized when ACLs are on.

Declared from Kafka's InitProducerId{Request,Response}.json, v0-5 (v6, KIP-939's two-phase
commit, is unstable in Kafka): flexible from v2.
"""

from ..schema import INT16, INT32, INT64, NULL, STRING, F, api

INIT_PRODUCER_ID = api(22, "InitProducerId", "0-5", "2+", request=[
    F("transactional_id", STRING, nullable="0+", default=NULL),
    F("transaction_timeout_ms", INT32),
    F("producer_id", INT64, "3+", default=-1),
    F("producer_epoch", INT16, "3+", default=-1),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("producer_id", INT64, default=-1),
    F("producer_epoch", INT16),
])
