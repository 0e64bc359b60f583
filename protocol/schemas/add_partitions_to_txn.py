"""AddPartitionsToTxn (key 24): a transactional producer adds partitions to its transaction
(v0-3, clients); v4+ batches transactions and is for brokers (KIP-890). The gateway relays
it, authorized (Write on the TransactionalId and on each topic; v4+ ClusterAction) with ACLs.

Declared from Kafka's AddPartitionsToTxn{Request,Response}.json: flexible from v3.
"""

from ..schema import BOOL, INT16, INT32, INT64, STRING, Array, F, S, api

_TOPIC = S("AddPartitionsToTxnTopic",
    F("name", STRING),
    F("partitions", Array(INT32)),
)
_TOPIC_RESULT = S("AddPartitionsToTxnTopicResult",
    F("name", STRING),
    F("results_by_partition", Array(S("AddPartitionsToTxnPartitionResult",
        F("partition_index", INT32),
        F("partition_error_code", INT16),
    ))),
)

ADD_PARTITIONS_TO_TXN = api(24, "AddPartitionsToTxn", "0-5", "3+", request=[
    F("transactions", Array(S("AddPartitionsToTxnTransaction",
        F("transactional_id", STRING, "4+"),
        F("producer_id", INT64, "4+"),
        F("producer_epoch", INT16, "4+"),
        F("verify_only", BOOL, "4+"),
        F("topics", Array(_TOPIC), "4+"),
    )), "4+"),
    F("v3_and_below_transactional_id", STRING, "0-3"),
    F("v3_and_below_producer_id", INT64, "0-3"),
    F("v3_and_below_producer_epoch", INT16, "0-3"),
    F("v3_and_below_topics", Array(_TOPIC), "0-3"),
], response=[
    F("throttle_time_ms", INT32),
    F("error_code", INT16, "4+"),
    F("results_by_transaction", Array(S("AddPartitionsToTxnResult",
        F("transactional_id", STRING, "4+"),
        F("topic_results", Array(_TOPIC_RESULT), "4+"),
    )), "4+"),
    F("results_by_topic_v3_and_below", Array(_TOPIC_RESULT), "0-3"),
])
