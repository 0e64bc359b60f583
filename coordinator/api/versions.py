"""Which APIs are served here, and in which versions: the one table that dispatch and
ApiVersions both read."""

from __future__ import annotations

from protocol.schemas import (API_VERSIONS, CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, DELETE_GROUPS,
                              DESCRIBE_GROUPS, FETCH, FIND_COORDINATOR, HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, LIST_GROUPS,
                              LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_DELETE, OFFSET_FETCH,
                              OFFSET_FOR_LEADER_EPOCH, PRODUCE, SASL_AUTHENTICATE, SASL_HANDSHAKE, SYNC_GROUP,
                              TXN_OFFSET_COMMIT)

# What we advertise: implemented and tested. OffsetCommit/OffsetFetch stop before the
# versions that name topics by id; OffsetCommit starts at 2 as Kafka 4 does.
SUPPORTED: dict[int, tuple[int, int]] = {
    API_VERSIONS.key: (0, 4), METADATA.key: (0, 12), FIND_COORDINATOR.key: (0, 4),
    JOIN_GROUP.key: (0, 9), SYNC_GROUP.key: (0, 5), HEARTBEAT.key: (0, 4), LEAVE_GROUP.key: (0, 5),
    OFFSET_COMMIT.key: (2, 9), OFFSET_FETCH.key: (1, 9), LIST_GROUPS.key: (0, 5),
    DESCRIBE_GROUPS.key: (0, 5), DELETE_GROUPS.key: (0, 2), SASL_HANDSHAKE.key: (0, 1), SASL_AUTHENTICATE.key: (0, 2),
    CONSUMER_GROUP_HEARTBEAT.key: (0, 1), CONSUMER_GROUP_DESCRIBE.key: (0, 1), OFFSET_DELETE.key: (0, 0),
}
# Served only where the outcomes of transactions are seen (the gateway: every EndTxn passes
# it; store/transactions.py): TxnOffsetCommit's offsets pend until their transaction ends.
# v3+ carries the member (KIP-447); v5 is transaction version 2's (KIP-890), the same fields.
TRANSACTIONAL_OFFSETS: dict[int, tuple[int, int]] = {TXN_OFFSET_COMMIT.key: (0, 5)}
# The APIs clients send only to a partition's leader. Some clients apply the bootstrap
# server's ApiVersions to every broker (KafkaJS does, and stops a consumer whose broker lacks
# Fetch), so they are advertised with the cluster's ranges: what the brokers say (the
# `brokers` topic source) or, beside ZooKeeper-mode Kafka, what every version since 2.8
# serves; within what we can read. A coordinator leads nothing: it answers every partition
# NOT_LEADER_OR_FOLLOWER, and the client looks the leader up again.
LEADER_ONLY: dict[int, tuple[int, int]] = {
    PRODUCE.key: (3, 9), FETCH.key: (4, 12), LIST_OFFSETS.key: (1, 6), OFFSET_FOR_LEADER_EPOCH.key: (2, 4)}
# the APIs whose handlers may answer with a coroutine or a Pending (they wait for something; ListGroups:
# the share groups of a broker, on its node port of the gateway)
WAITS = frozenset({JOIN_GROUP.key, SYNC_GROUP.key, OFFSET_COMMIT.key, OFFSET_FETCH.key, DELETE_GROUPS.key,
                   CONSUMER_GROUP_HEARTBEAT.key, OFFSET_DELETE.key, LIST_GROUPS.key, TXN_OFFSET_COMMIT.key})
