"""EndTxn (key 26): a transactional producer commits or aborts. The gateway relays it to the
transaction coordinator's node port, authorized (Write on the TransactionalId) with ACLs.

Declared from Kafka's EndTxn{Request,Response}.json: flexible from v3; v5 answers the
producer's id and epoch.
"""

from ..schema import BOOL, INT16, INT32, INT64, STRING, F, api

END_TXN = api(26, "EndTxn", "0-5", "3+", request=[
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("committed", BOOL),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("producer_id", INT64, "5+", default=-1),
    F("producer_epoch", INT16, "5+", default=-1),
])
