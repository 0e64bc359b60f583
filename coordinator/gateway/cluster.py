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

With ACLs on (`acls`), what is relayed is authorized first for the client's principal
(`authorize.Authorization`): the APIs of `authorize.AUTHORIZED`, in the versions listed
there, are decided per topic, cluster or transactional id, and only those are advertised;
any other relayed API is not advertised and closes the connection if sent, except from a
super user, whose requests pass as bytes.
"""

from __future__ import annotations

from protocol import UnsupportedVersion, decode_request, encode_response
from protocol.schemas import (API_VERSIONS, DESCRIBE_CLUSTER, FETCH, FIND_COORDINATOR, METADATA, PRODUCE,
                              SASL_AUTHENTICATE, SASL_HANDSHAKE)

from ..api.cluster import ClusterApi, within
from ..api.versions import SUPPORTED
from ..serving.interfaces import CloseConnection, Route
from .authorize import AUTHORIZED, Authorization, Refused
from .nodes import Gateway

# Not relayed, not advertised. Group state the brokers' coordinator would keep apart from
# ours: OffsetDelete (47; ours is to come), TxnOffsetCommit (28: exactly-once commits are
# written by the transaction's markers into the brokers' own offsets topic, which
# groupkeeper never reads, so they cannot be made correct here; the client is told the
# broker does not support it, as a broker without it would), the streams groups (88, 89)
# and the share groups (76-79: docs/architecture.md, "Not here: share groups").
REFUSED = frozenset({28, 47, 76, 77, 78, 79, 88, 89})
REWRITTEN_HERE = (METADATA.key, FIND_COORDINATOR.key, DESCRIBE_CLUSTER.key, PRODUCE.key, FETCH.key)


class GatewayClusterApi(ClusterApi):
    authorization: Authorization | None = None  # with ACLs: what decides each relayed request

    def __init__(self, coordinator, topics, acls, gateway: Gateway):
        super().__init__(coordinator, topics, acls)
        self.gateway = gateway
        self.authorization = (Authorization(acls, topics.names_by_id, topics.want) if acls is not None else None)

    def route(self, api_key: int, api_version: int) -> Route | None:
        if api_key in (API_VERSIONS.key, SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key):
            return super().route(api_key, api_version)
        if api_key in REFUSED:
            return None
        if api_key == FIND_COORDINATOR.key:
            return self.find_coordinator_relayed, True, True
        if self.authorization is None:
            return self.gateway.relay, True, True
        if api_key in AUTHORIZED:
            return self.authorized_relay, True, True
        return self.super_users_relay, True, True

    def authorized_relay(self, connection, frame: bytes):
        """With ACLs: `frame` relayed as far as the client's principal may (what it may not
        answered as a broker would), or answered here when it may do none of it."""
        try:
            verdict = self.authorization.authorize(connection.client, frame)
        except Refused as exc:
            if self.authorization.super_user(connection.client):
                return self.gateway.relay(connection, frame)
            raise CloseConnection(str(exc)) from None
        if verdict.answer is not None:
            return self.gateway.answer(verdict.answer)
        return self.gateway.relay(connection, verdict.request, verdict.merge)

    def super_users_relay(self, connection, frame: bytes):
        """With ACLs: an API the gateway does not authorize, relayed for super users only."""
        if self.authorization.super_user(connection.client):
            return self.gateway.relay(connection, frame)
        raise CloseConnection("an API the gateway does not authorize with ACLs on (super users only)")

    def find_coordinator_relayed(self, connection, frame: bytes):
        """A group's coordinator is this deployment's; a transaction's or a share group's is
        the brokers', relayed and rewritten to its node port."""
        try:
            header, request = decode_request(frame)
        except UnsupportedVersion:
            if self.authorization is not None:
                return self.authorized_relay(connection, frame)
            return self.gateway.relay(connection, frame)
        if request.key_type != 0:
            if self.authorization is not None:
                return self.authorized_relay(connection, frame)
            return self.gateway.relay(connection, frame)
        return self.gateway.answer(encode_response(header, self.find_coordinator(header, request, connection.client)))

    def advertised(self, brokers: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
        """The brokers' APIs in their versions, but: ours in ours, those whose answers we
        rewrite in the versions we can read, none of those refused; with ACLs, of what is relayed only what is authorized, in the versions
        authorized. Before the brokers are known: what we serve."""
        advertised = {}
        for key, theirs in brokers.items():
            if key in REFUSED:
                continue
            if self.authorization is not None and key not in SUPPORTED and key not in AUTHORIZED:
                continue
            if key in REWRITTEN_HERE:
                if (both := within(theirs, key)) is not None:
                    advertised[key] = both
            elif key not in SUPPORTED:
                advertised[key] = theirs
        for key, ours in SUPPORTED.items():  # what we answer ourselves, in our versions
            if key not in REWRITTEN_HERE or key not in brokers:
                advertised[key] = ours
        if self.authorization is not None:  # what is relayed: in the versions authorized
            for key, (lo, hi) in AUTHORIZED.items():
                if key in advertised:
                    both = max(advertised[key][0], lo), min(advertised[key][1], hi)
                    if both[0] <= both[1]:
                        advertised[key] = both
                    else:
                        del advertised[key]
        return advertised
