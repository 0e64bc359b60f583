"""The cluster's answers through the gateway: what `api.cluster.ClusterApi` makes up itself
beside a cluster, the gateway relays from the brokers.

| API | Through the gateway |
| --- | --- |
| group and offset APIs | ours, on every port (`api.groups`, `api.offsets`); never relayed |
| ApiVersions | ours: the brokers' ranges, ours for what we serve, within what we can rewrite |
| SaslHandshake, SaslAuthenticate | ours (the client's login is to groupkeeper) |
| FindCoordinator | a group (key type 0): ours; a transaction or share group: relayed, rewritten |
| Metadata, DescribeCluster | relayed; the brokers rewritten to our node ports, our coordinator nodes added to Metadata |
| OffsetDelete, TxnOffsetCommit, streams and share groups | refused: not advertised, and closed if sent (see REFUSED) |
| everything else | relayed as bytes to the connection's broker |
"""

from __future__ import annotations

from protocol import UnsupportedVersion, decode_request, encode_response
from protocol.schemas import (API_VERSIONS, DESCRIBE_CLUSTER, FETCH, FIND_COORDINATOR, METADATA, PRODUCE,
                              SASL_AUTHENTICATE, SASL_HANDSHAKE)

from ..api.cluster import ClusterApi, within
from ..api.versions import SUPPORTED
from ..serving.interfaces import Route
from .nodes import Gateway

# Not relayed, not advertised. Group state the brokers' coordinator would keep apart from
# ours: OffsetDelete (47; ours is to come), TxnOffsetCommit (28: exactly-once commits are
# written by the transaction's markers into the brokers' own offsets topic, which
# groupkeeper never reads, so they cannot be made correct here; the client is told the
# broker does not support it, as a broker without it would), the streams groups (88, 89)
# and the share groups (76-79) until their answers' node endpoints are rewritten.
REFUSED = frozenset({28, 47, 76, 77, 78, 79, 88, 89})
# Answers with KIP-951's node endpoints (Produce v10+, Fetch v16+) name brokers; until they
# are rewritten on the data path, the versions that carry them are not advertised.
HIGHEST = {PRODUCE.key: 9, FETCH.key: 15}
REWRITTEN_HERE = (METADATA.key, FIND_COORDINATOR.key, DESCRIBE_CLUSTER.key, PRODUCE.key, FETCH.key)


class GatewayClusterApi(ClusterApi):
    def __init__(self, coordinator, topics, acls, gateway: Gateway):
        super().__init__(coordinator, topics, acls)
        self.gateway = gateway

    def route(self, api_key: int, api_version: int) -> Route | None:
        if api_key in (API_VERSIONS.key, SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key):
            return super().route(api_key, api_version)
        if api_key in REFUSED:
            return None
        if api_key == FIND_COORDINATOR.key:
            return self.find_coordinator_relayed, True, True
        return self.gateway.relay, True, True

    def find_coordinator_relayed(self, connection, frame: bytes):
        """A group's coordinator is this deployment's; a transaction's or a share group's is
        the brokers', relayed and rewritten to its node port."""
        try:
            header, request = decode_request(frame)
        except UnsupportedVersion:
            return self.gateway.relay(connection, frame)
        if request.key_type != 0:
            return self.gateway.relay(connection, frame)
        return self.gateway.answer(encode_response(header, self.find_coordinator(header, request, connection.client)))

    def advertised(self, brokers: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
        """The brokers' APIs in their versions, but: ours in ours, those whose answers we
        rewrite in the versions we can read (and below KIP-951's node endpoints), none of
        those refused. Before the brokers are known: what we serve."""
        advertised = {}
        for key, theirs in brokers.items():
            if key in REFUSED:
                continue
            if key in REWRITTEN_HERE:
                if (both := within(theirs, key, HIGHEST.get(key))) is not None:
                    advertised[key] = both
            elif key not in SUPPORTED:
                advertised[key] = theirs
        for key, ours in SUPPORTED.items():  # what we answer ourselves, in our versions
            if key not in REWRITTEN_HERE or key not in brokers:
                advertised[key] = ours
        return advertised
