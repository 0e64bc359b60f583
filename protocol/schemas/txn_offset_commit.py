"""TxnOffsetCommit (key 28): a transactional producer's consumer offsets, pending until its
transaction ends. v3+ (KIP-447) carries the member id, generation and instance id, so the
group coordinator fences a zombie's commit as OffsetCommit does.

Declared from Kafka's TxnOffsetCommit{Request,Response}.json: flexible from v3; v2+ carries
the leader epoch; v4 and v5 add nothing to the fields (v5: transaction version 2, KIP-890).
"""

from ..schema import INT16, INT32, INT64, NULL, STRING, Array, F, S, api

TXN_OFFSET_COMMIT = api(28, "TxnOffsetCommit", "0-5", "3+", request=[
    F("transactional_id", STRING),
    F("group_id", STRING),
    F("producer_id", INT64),
    F("producer_epoch", INT16),
    F("generation_id", INT32, "3+", default=-1),
    F("member_id", STRING, "3+", default=""),
    F("group_instance_id", STRING, "3+", nullable="3+", default=NULL),
    F("topics", Array(S("TxnOffsetCommitRequestTopic",
        F("name", STRING),
        F("partitions", Array(S("TxnOffsetCommitRequestPartition",
            F("partition_index", INT32),
            F("committed_offset", INT64),
            F("committed_leader_epoch", INT32, "2+", default=-1),
            F("committed_metadata", STRING, nullable="0+"),
        ))),
    ))),
], response=[
    F("throttle_time_ms", INT32),
    F("topics", Array(S("TxnOffsetCommitResponseTopic",
        F("name", STRING),
        F("partitions", Array(S("TxnOffsetCommitResponsePartition",
            F("partition_index", INT32),
            F("error_code", INT16),
        ))),
    ))),
])
