"""AddOffsetsToTxn (key 25): a transactional producer adds a group's offsets to its
transaction. The gateway relays it, authorized (Write on the TransactionalId, Read on the
group) with ACLs; the TxnOffsetCommit that follows is served by groupkeeper, and the
brokers' transaction coordinator writes the transaction's end in the group's partition of
__consumer_offsets (coordinator/topics/markers.py).

Declared from Kafka's AddOffsetsToTxn{Request,Response}.json: flexible from v3.
"""

from ..schema import INT16, INT32, INT64, STRING, F, api

ADD_OFFSETS_TO_TXN = api(25, "AddOffsetsToTxn", "0-4", "3+", request=[
    F("transactional_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("group_id", STRING),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
])
