"""The cluster's answers through the gateway: what `api.cluster.ClusterApi` makes up itself
beside a cluster, the gateway relays from the brokers.

| API | Through the gateway |
| --- | --- |
| group and offset APIs | ours, on every port (`api.groups`, `api.offsets`); never relayed (but ListGroups v5+ on a broker's node port lists that broker's share groups, and DeleteGroups of a group we do not have deletes a share group at the brokers: `ShareGroupAdmin`) |
| ApiVersions | ours: the brokers' ranges, ours for what we serve, within what we can rewrite |
| SaslHandshake, SaslAuthenticate | ours (the client's login is to groupkeeper) |
| FindCoordinator | a group (key type 0): ours; a transaction (key type 1): this instance's own node, once the cluster names the broker that coordinates the transactional id; a share group: relayed, rewritten |
| InitProducerId (of a transactional id), AddPartitionsToTxn (v0-3), AddOffsetsToTxn, EndTxn | relayed to the broker that coordinates the transactional id, whichever port they come to |
| Metadata, DescribeCluster | relayed; the brokers rewritten to our node ports, our coordinator nodes added to Metadata |
| share groups' heartbeat, describe and offsets (KIP-932) | relayed to the broker that coordinates the group (asked of the cluster, remembered) |
| ShareFetch, ShareAcknowledge | relayed to the leader's node port; their node endpoints rewritten |
| TxnOffsetCommit | ours (`api.offsets`): pending until the transaction's end, which the gateway records as it relays EndTxn (`gateway/transactions.py`) |
| streams groups | refused: not advertised, and closed if sent (see REFUSED) |
| everything else | relayed as bytes to the connection's broker |

With ACLs on (`acls`), what is relayed is authorized first for the client's principal
(`authorize.Authorization`): the APIs of `authorize.AUTHORIZED`, in the versions listed
there, are decided per topic, cluster or transactional id, and only those are advertised;
any other relayed API is not advertised and closes the connection if sent, except from a
super user, whose requests pass as bytes.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from protocol import ErrorCode, ProtocolError, UnsupportedVersion, decode_request, decode_response, encode_response
from protocol import messages as m
from protocol.messages import class_for
from protocol.framing import frame as framed
from protocol.schemas import (ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, END_TXN, INIT_PRODUCER_ID)
from protocol.schemas import (API_VERSIONS, DELETE_GROUPS, DESCRIBE_CLUSTER, DESCRIBE_SHARE_GROUP_OFFSETS, FETCH,
                              FIND_COORDINATOR, LIST_GROUPS, METADATA, PRODUCE, SASL_AUTHENTICATE, SASL_HANDSHAKE,
                              SHARE_ACKNOWLEDGE, SHARE_FETCH, SHARE_GROUP_DESCRIBE, SHARE_GROUP_HEARTBEAT,
                              TXN_OFFSET_COMMIT)
from protocol.schemas import APIS
from protocol.schemas.share_groups import BY_GROUP

from ..api.cluster import ClusterApi, within
from ..api.versions import SUPPORTED, TRANSACTIONAL_OFFSETS
from ..cluster.node_ids import node_id
from ..security.acls.authorizer import Operation
from ..serving.interfaces import CloseConnection, Route
from ..serving.pending import Pending
from ..topics.brokers import BrokerConnection
from .authorize import AUTHORIZED, Authorization, Refused
from .nodes import TRANSACTION, Gateway

# Not relayed, not advertised: group state the brokers' coordinator would keep apart from
# ours, the streams groups (88, 89). TxnOffsetCommit (28) is never relayed: ours
# (`sees_transactions`), advertised in the versions both we and the brokers have.
REFUSED = frozenset({TXN_OFFSET_COMMIT.key, 88, 89})
REWRITTEN_HERE = (METADATA.key, FIND_COORDINATOR.key, DESCRIBE_CLUSTER.key, PRODUCE.key, FETCH.key,
                  SHARE_FETCH.key, SHARE_ACKNOWLEDGE.key)
# share groups' APIs that go to the group's coordinator at the brokers (KIP-932): routed by group
SHARE_BY_GROUP = {api.key: api for api in BY_GROUP}
# the errors after which a share group's coordinator is looked up again
_MOVED = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)


class GatewayClusterApi(ClusterApi):
    authorization: Authorization | None = None  # with ACLs: what decides each relayed request
    sees_transactions = True  # every EndTxn passes here: TxnOffsetCommit is served (api.router)

    def __init__(self, coordinator, topics, acls, gateway: Gateway, metadata_cache_bytes: int | None = None):
        super().__init__(coordinator, topics, acls, metadata_cache_bytes=metadata_cache_bytes)
        self.gateway = gateway
        self.authorization = (Authorization(acls, topics.names_by_id, topics.want) if acls is not None else None)
        gateway.passes_unread = self.authorization is None  # with ACLs a request's topics are read first
        self.share_groups = ShareGroupAdmin(gateway, self.authorization)  # what ListGroups and DeleteGroups ask

    def route(self, api_key: int, api_version: int) -> Route | None:
        if api_key in (API_VERSIONS.key, SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key):
            return super().route(api_key, api_version)
        if api_key in REFUSED:
            return None
        if api_key == FIND_COORDINATOR.key:
            return self.find_coordinator_relayed, True, True
        if api_key in SHARE_BY_GROUP:  # with ACLs: super users only (checked there), not advertised
            return self.share_group_relayed, True, True
        if api_key in TRANSACTION_ROUTED:
            return self.transaction_relayed, True, True
        if self.authorization is None:
            return self.gateway.relay, True, True
        if api_key in AUTHORIZED:
            return self.authorized_relay, True, True
        return self.super_users_relay, True, True

    def authorized_relay(self, connection, frame: bytes):
        """With ACLs: `frame` relayed as far as the client's principal may (what it may not
        answered as a broker would), or answered here when it may do none of it."""
        checked = self._authorized(connection, frame)
        if type(checked) is Pending:
            return checked
        return self.gateway.relay(connection, *checked)

    def _authorized(self, connection, frame: bytes) -> tuple[bytes, Callable[[bytes], bytes] | None] | Pending:
        """With ACLs: what of `frame` goes to the brokers and what merges the refused parts'
        errors into their answer, or the answer made here when nothing of it may go. A
        request the gateway cannot authorize goes whole for super users and closes the
        connection for the rest."""
        try:
            verdict = self.authorization.authorize(connection.client, frame)
        except Refused as exc:
            if self.authorization.super_user(connection.client):
                return frame, None
            raise CloseConnection(str(exc)) from None
        if verdict.answer is not None:
            return self.gateway.answer(verdict.answer)
        return verdict.request, verdict.merge

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
            return self._relay_checked(connection, frame)
        if request.key_type == TRANSACTION:
            return self.transaction_coordinator(connection, header, request)
        if request.key_type != 0:
            return self._relay_checked(connection, frame)
        return self.gateway.answer(encode_response(header, self.find_coordinator(header, request, connection.client)))

    # -- transactions ------------------------------------------------------------------------

    def transaction_coordinator(self, connection, header, request) -> Pending:
        """A transaction's coordinator, through the gateway, is the instance asked: its own
        node (as a group's coordinator is an instance's), once the cluster has named the broker
        that coordinates the transactional id (asked afresh, remembered for its requests:
        `transaction_relayed`). Were it the broker's node at this instance's port, a client
        whose instance died would be told the same node id at another port, which librdkafka
        does not follow (it keeps its transaction coordinator's address while the node id
        stays: the dead port, forever); another node id it does. With ACLs, Describe on the
        TransactionalId, each key on its own."""
        keys = [request.key] if header.api_version < 4 else list(request.coordinator_keys)
        denied = set()
        if self.authorization is not None:
            denied = {key for key in keys
                      if not self.authorization.transactional(connection.client, Operation.DESCRIBE, key)}
        pending = Pending()
        connection.host.start_soon(self._answer_transaction_coordinator, connection, header, keys, denied, pending)
        return pending

    async def _answer_transaction_coordinator(self, connection, header, keys: list[str], denied: set[str],
                                              pending: Pending) -> None:
        me = self.coordinator.membership.me
        address = me.address(connection.client.listener.name)
        found = {}
        for key in keys:
            if key in denied:
                found[key] = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            elif address is None:  # this instance has no such listener (being reconfigured)
                found[key] = ErrorCode.COORDINATOR_NOT_AVAILABLE
            else:
                node = await self.gateway.find_transaction_coordinator(key)
                found[key] = ErrorCode.NONE if node is not None else ErrorCode.COORDINATOR_NOT_AVAILABLE
        if connection.closed:
            return
        host, port = address if address is not None else ("", -1)

        def entry(key: str, make):
            code = found[key]
            if code == ErrorCode.NONE:
                return make(error_code=code, node_id=node_id(me), host=host, port=port)
            return make(error_code=code, error_message=code.name, node_id=-1, host="", port=-1)
        if header.api_version < 4:
            answer = entry(keys[0], m.FindCoordinatorResponse)
        else:
            answer = m.FindCoordinatorResponse(coordinators=[
                entry(key, lambda **fields: m.Coordinator(key=key, **fields)) for key in keys])
        encoded = encode_response(header, answer)
        pending.resolve(lambda: encoded)

    def transaction_relayed(self, connection, frame: bytes):
        """A transaction's request (InitProducerId naming a transactional id, AddPartitionsToTxn
        before v4, AddOffsetsToTxn, EndTxn) to the broker that coordinates its transactional
        id, whichever port it came to (the client sends them to the instance's node:
        `transaction_coordinator`); authorized first with ACLs. Where the cluster names no
        coordinator, answered COORDINATOR_NOT_AVAILABLE here (retriable); a broker that no
        longer coordinates it answers NOT_COORDINATOR, and the client asks FindCoordinator,
        which asks the cluster again."""
        try:
            header, request = decode_request(frame)
        except UnsupportedVersion:
            return self._relay_checked(connection, frame)
        merge = None
        if self.authorization is not None:
            checked = self._authorized(connection, frame)
            if type(checked) is Pending:
                return checked
            frame, merge = checked
        transactional_id = _transactional_id(header.api_key, header.api_version, request)
        if transactional_id is None:  # an idempotent producer's InitProducerId, a broker's batch
            return self.gateway.relay(connection, frame, merge)
        node = self.gateway.transaction_coordinator(transactional_id)
        if node is not None:
            return self.gateway.relay(connection, frame, merge, node=node)
        pending = Pending()
        connection.host.start_soon(self._find_transaction_then_relay, connection, header, request, transactional_id,
                                   frame, merge, pending)
        return pending

    def _relay_checked(self, connection, frame: bytes):
        """`frame` relayed to the connection's broker, authorized first with ACLs."""
        if self.authorization is not None:
            return self.authorized_relay(connection, frame)
        return self.gateway.relay(connection, frame)

    async def _find_transaction_then_relay(self, connection, header, request, transactional_id: str, frame: bytes,
                                           merge, pending: Pending) -> None:
        node = await self.gateway.find_transaction_coordinator(transactional_id)
        if connection.closed:
            return
        if node is None:
            answer = encode_response(header, _transaction_error(header.api_key, request,
                                                                ErrorCode.COORDINATOR_NOT_AVAILABLE))
            pending.resolve(lambda: answer)
            return
        try:
            self.gateway.relay(connection, frame, merge, node=node, pending=pending)
        except CloseConnection as exc:
            connection.close(str(exc))

    def share_group_relayed(self, connection, frame: bytes):
        """A share group's request, to the broker that coordinates the group (the first
        group, for those that name several: a broker answers NOT_COORDINATOR for groups it
        does not coordinate, and the client asks again for those alone). The broker is asked
        for it once (FindCoordinator, key type 0) and remembered; NOT_COORDINATOR in an answer
        forgets it. Where no broker says, answered here COORDINATOR_NOT_AVAILABLE (retriable)."""
        try:
            header, request = decode_request(frame)
        except UnsupportedVersion:
            raise CloseConnection("a share-group request in a version the gateway does not read") from None
        if self.authorization is not None and not self.authorization.super_user(connection.client):
            raise CloseConnection("share groups through the gateway with ACLs on: super users only")
        groups = _share_groups(header.api_key, request)
        if not groups:
            return self.gateway.answer(encode_response(header, _share_error(header.api_key, request,
                                                                            ErrorCode.INVALID_REQUEST)))
        pending = Pending()
        watch = self._moved_watch(header.api_key, header.api_version, groups)
        node = self.gateway.share_coordinator(groups[0])
        if node is not None:
            self.gateway.send_routed(connection, node, frame, pending, watch)
        else:
            connection.host.start_soon(self._find_then_send, connection, header, request, groups[0], frame, pending,
                                       watch)
        return pending

    async def _find_then_send(self, connection, header, request, group: str, frame: bytes, pending: Pending,
                              watch) -> None:
        node = await self.gateway.find_share_coordinator(group)
        if connection.closed:
            return
        if node is None:
            answer = encode_response(header, _share_error(header.api_key, request, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            pending.resolve(lambda: answer)
            return
        try:
            self.gateway.send_routed(connection, node, frame, pending, watch)
        except CloseConnection as exc:
            connection.close(str(exc))

    def _moved_watch(self, api_key: int, version: int, groups: list[str]):
        """What reads a share group's answer for NOT_COORDINATOR (its groups' coordinator
        moved: looked up again next time) and passes it on unchanged."""
        def watch(frame: bytes) -> bytes:
            try:
                _, answer = decode_response(api_key, version, frame)
            except ProtocolError:
                return framed(frame)  # not ours to judge: the client reads it
            if api_key in (SHARE_GROUP_DESCRIBE.key, DESCRIBE_SHARE_GROUP_OFFSETS.key):
                for group in answer.groups:
                    if group.error_code in _MOVED:
                        self.gateway.forget_share_coordinator(group.group_id)
            elif answer.error_code in _MOVED:
                self.gateway.forget_share_coordinator(groups[0])
            return framed(frame)
        return watch

    def advertised(self, brokers: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
        """The brokers' APIs in their versions, but: ours in ours, those whose answers we
        rewrite and the share groups' routed by group (decoded to route them) in the
        versions we can read, none of those refused; with ACLs, of what is relayed only what is authorized, in the versions
        authorized. Before the brokers are known: what we serve."""
        advertised = {}
        for key, theirs in brokers.items():
            if key in REFUSED:
                continue
            if self.authorization is not None and key not in SUPPORTED and key not in AUTHORIZED:
                continue
            if key in REWRITTEN_HERE or key in SHARE_BY_GROUP:  # read here: in versions both read
                if (both := within(theirs, key)) is not None:
                    advertised[key] = both
            elif key not in SUPPORTED:
                advertised[key] = theirs
        for key, ours in SUPPORTED.items():  # what we answer ourselves, in our versions
            if key not in REWRITTEN_HERE or key not in brokers:
                advertised[key] = ours
        for key, ours in TRANSACTIONAL_OFFSETS.items():  # ours too, in the versions the brokers' transactions have
            theirs = brokers.get(key, ours)
            if (both := (max(ours[0], theirs[0]), min(ours[1], theirs[1])))[0] <= both[1]:
                advertised[key] = both
        if self.authorization is not None:  # what is relayed: in the versions authorized
            for key, (lo, hi) in AUTHORIZED.items():
                if key in advertised:
                    both = max(advertised[key][0], lo), min(advertised[key][1], hi)
                    if both[0] <= both[1]:
                        advertised[key] = both
                    else:
                        del advertised[key]
        return advertised


class ShareGroupAdmin:
    """Share groups for the group APIs groupkeeper answers itself (`api.groups`): ListGroups
    on a broker's node port lists the share groups that broker coordinates; DeleteGroups of a
    group groupkeeper does not have deletes it at the brokers if it is a share group there.
    Each question on a connection of its own to the broker, closed after it (an
    administrator's request, seldom). With ACLs, for super users only, as every share-group
    request through the gateway."""

    def __init__(self, gateway: Gateway, authorization: Authorization | None):
        self.gateway = gateway
        self.authorization = authorization

    def _none(self, client) -> bool:
        """Whether there are no share groups to look for: the brokers serve none (they do
        not speak ShareGroupHeartbeat), or the client may not see them."""
        return (SHARE_GROUP_HEARTBEAT.key not in self.gateway.topics.api_versions
                or (self.authorization is not None and not self.authorization.super_user(client)))

    async def listed(self, node: int, states: list[str], client) -> list | ErrorCode:
        """The share groups broker `node` coordinates (in `states`, if any), as it lists them;
        an error if it cannot be asked."""
        if self._none(client):
            return []
        answer = await self._ask(node, LIST_GROUPS, {"states_filter": states, "types_filter": ["share"]}, lowest=5)
        if isinstance(answer, ErrorCode):
            return answer
        if answer.error_code != ErrorCode.NONE:
            return ErrorCode(answer.error_code)
        return [g for g in answer.groups if g.group_type.lower() == "share"]  # never a broker's other groups

    async def delete(self, group: str, client) -> ErrorCode | None:
        """`group` deleted at the broker that coordinates it, if it is a share group there:
        that broker's answer; None if it is not one (or no broker says)."""
        if self._none(client):
            return None
        node = await self.gateway.find_share_coordinator(group)
        if node is None:
            return None
        described = await self._ask(node, SHARE_GROUP_DESCRIBE, {"group_ids": [group]}, lowest=1)
        if isinstance(described, ErrorCode):
            return described
        error = described.groups[0].error_code if described.groups else ErrorCode.GROUP_ID_NOT_FOUND
        if error in _MOVED:  # the client asks again; the coordinator is looked up afresh
            self.gateway.forget_share_coordinator(group)
            return ErrorCode(error)
        if error != ErrorCode.NONE:  # not a share group (GROUP_ID_NOT_FOUND), or not to be seen
            return None
        deleted = await self._ask(node, DELETE_GROUPS, {"groups_names": [group]}, lowest=0)
        if isinstance(deleted, ErrorCode):
            return deleted
        error = deleted.results[0].error_code if deleted.results else ErrorCode.UNKNOWN_SERVER_ERROR
        if error in _MOVED:
            self.gateway.forget_share_coordinator(group)
        return ErrorCode(error)

    async def _ask(self, node: int, api, body: dict, lowest: int):
        """`api`'s answer from broker `node`, in the highest version both read (at least
        `lowest`); COORDINATOR_NOT_AVAILABLE (retriable) if it cannot be had."""
        address = self.gateway.addresses.get(node)
        if address is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        connection = None
        try:
            with trio.fail_after(self.gateway.topics.timeout):
                connection = await BrokerConnection.open(address, self.gateway.topics.security)
                low, high = (await connection.api_versions()).get(api.key, (0, -1))
                version = min(high, api.versions.high)
                if version < max(low, lowest):
                    return ErrorCode.COORDINATOR_NOT_AVAILABLE
                return await connection.call(api, version, body)
        except Exception as exc:  # noqa: BLE001 - unreachable, refused, slow: the client is told to retry
            self.gateway.log.info("asking a broker about share groups failed", node=node, api=api.name,
                                  error=f"{type(exc).__name__}: {exc}")
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        finally:
            if connection is not None:
                connection.close()


def _share_groups(api_key: int, request) -> list[str]:
    """The groups a share-group request names, in its order."""
    if api_key == SHARE_GROUP_DESCRIBE.key:
        return list(request.group_ids)
    if api_key == DESCRIBE_SHARE_GROUP_OFFSETS.key:
        return [g.group_id for g in request.groups]
    return [request.group_id]


def _share_error(api_key: int, request, error: ErrorCode):
    """A share-group request answered here with `error` for each group it names."""
    if api_key == SHARE_GROUP_HEARTBEAT.key:
        return m.ShareGroupHeartbeatResponse(error_code=error, error_message=error.name, member_id=request.member_id,
                                             member_epoch=request.member_epoch)
    if api_key == SHARE_GROUP_DESCRIBE.key:
        return m.ShareGroupDescribeResponse(groups=[
            m.DescribedShareGroup(error_code=error, error_message=error.name, group_id=g) for g in request.group_ids])
    if api_key == DESCRIBE_SHARE_GROUP_OFFSETS.key:
        return m.DescribeShareGroupOffsetsResponse(groups=[
            m.DescribeShareGroupOffsetsGroupResult(group_id=g.group_id, error_code=error, error_message=error.name)
            for g in request.groups])
    return class_for(APIS[api_key].response.struct)(error_code=error, error_message=error.name)


# a transaction's requests: to the broker that coordinates their transactional id
TRANSACTION_ROUTED = frozenset({INIT_PRODUCER_ID.key, ADD_PARTITIONS_TO_TXN.key, ADD_OFFSETS_TO_TXN.key, END_TXN.key})


def _transactional_id(api_key: int, version: int, request) -> str | None:
    if api_key == ADD_PARTITIONS_TO_TXN.key:
        return request.v3_and_below_transactional_id if version < 4 else None  # v4+: brokers' batches
    return request.transactional_id  # None: an idempotent producer's InitProducerId


def _transaction_error(api_key: int, request, error: ErrorCode):
    if api_key == INIT_PRODUCER_ID.key:
        return m.InitProducerIdResponse(error_code=error, producer_id=-1, producer_epoch=-1)
    if api_key == ADD_PARTITIONS_TO_TXN.key:
        return m.AddPartitionsToTxnResponse(results_by_topic_v3_and_below=[
            m.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
                m.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=error)
                for p in t.partitions]) for t in request.v3_and_below_topics])
    if api_key == ADD_OFFSETS_TO_TXN.key:
        return m.AddOffsetsToTxnResponse(error_code=error)
    return m.EndTxnResponse(error_code=error)
