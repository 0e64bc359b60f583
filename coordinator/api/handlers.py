"""One function per API key: a decoded request in, a response message out.

Every handler is called inline by the server, in the order the connection's requests
came, and returns the response; or a coroutine that will produce it (a JoinGroup waits for
its generation), which the server runs in a task of its own; or a `Pending` answer that a
callback completes (a commit, when ZooKeeper confirms its batch), which costs no task.
What a handler does before returning happens in request order: a commit is queued for its
write then, so pipelined commits land in the order they were sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from protocol import ErrorCode, messages as m
from protocol.hot import heartbeat_answer, read_heartbeat
from protocol.schemas import (API_VERSIONS, APIS, CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, DELETE_GROUPS,
                              DESCRIBE_GROUPS, FETCH, FIND_COORDINATOR, HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, LIST_GROUPS,
                              LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH, OFFSET_FOR_LEADER_EPOCH, PRODUCE,
                              SASL_AUTHENTICATE, SASL_HANDSHAKE, SYNC_GROUP)

from .. import metrics
from ..cluster.membership import Instance
from ..cluster.ownership import Coordinator, Owned
from ..store.errors import store_error_code
from ..groups.consumer_group import STATIC_LEAVE_EPOCH, by_topic
from ..groups.state import GroupState
from ..serving.pending import Pending
from ..security.acls.authorizer import CLUSTER_NAME, Operation, ResourceType
from ..security.client import Client
from ..store.fence import NotOwner, StoreError, StoreUnavailable
from ..topics.view import NO_TOPIC_ID, TopicView

E = ErrorCode

# What we advertise: implemented and tested. OffsetCommit/OffsetFetch stop before the
# versions that name topics by id; OffsetCommit starts at 2 as Kafka 4 does.
SUPPORTED: dict[int, tuple[int, int]] = {
    API_VERSIONS.key: (0, 4), METADATA.key: (0, 12), FIND_COORDINATOR.key: (0, 4),
    JOIN_GROUP.key: (0, 9), SYNC_GROUP.key: (0, 5), HEARTBEAT.key: (0, 4), LEAVE_GROUP.key: (0, 5),
    OFFSET_COMMIT.key: (2, 9), OFFSET_FETCH.key: (1, 9), LIST_GROUPS.key: (0, 5),
    DESCRIBE_GROUPS.key: (0, 5), DELETE_GROUPS.key: (0, 2), SASL_HANDSHAKE.key: (0, 1), SASL_AUTHENTICATE.key: (0, 2),
    CONSUMER_GROUP_HEARTBEAT.key: (0, 1), CONSUMER_GROUP_DESCRIBE.key: (0, 1),
}
# The APIs clients send only to a partition's leader. Some clients apply the bootstrap
# server's ApiVersions to every broker (KafkaJS does, and stops a consumer whose broker lacks
# Fetch), so they are advertised with the cluster's ranges: what the brokers say (the
# `brokers` topic source) or, beside ZooKeeper-mode Kafka, what every version since 2.8
# serves; within what we can read. A coordinator leads nothing: it answers every partition
# NOT_LEADER_OR_FOLLOWER, and the client looks the leader up again.
LEADER_ONLY: dict[int, tuple[int, int]] = {
    PRODUCE.key: (3, 9), FETCH.key: (4, 12), LIST_OFFSETS.key: (1, 6), OFFSET_FOR_LEADER_EPOCH.key: (2, 4)}
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1  # ConsumerGroupDescribe v1's member types (KIP-1099)
INSTANCE_NODE_BASE = 1_000_000_000  # coordinator node ids: never a broker's
MAX_TOPIC_NAME = 249  # characters: Kafka's limit on topic names
MAX_OFFSET_METADATA = 4096  # characters: Kafka's offset.metadata.max.bytes
MAX_SUBSCRIBED_TOPICS = 10_000  # names in one consumer-protocol member's subscription
MAX_TOPIC_REGEX = 4096  # characters of a consumer-protocol member's subscription expression
CLUSTER_ID = "groupkeeper"
# Kafka's internal topics: marked so that clients leave them out of pattern subscriptions
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def node_id(instance: Instance) -> int:
    return INSTANCE_NODE_BASE + instance.id


class CloseConnection(Exception):
    """A request whose only answer is to close its connection (Kafka's, for an error on a
    produce that asked for no answer)."""


class Handlers:
    def __init__(self, coordinator: Coordinator, topics: TopicView, acls=None):
        self.coordinator = coordinator
        self.topics = topics
        self.acls = acls  # an AclStore: its current `authorizer` decides every request; None: all allowed
        self._api_versions: dict[ErrorCode, tuple[dict, m.ApiVersionsResponse]] = {}  # error -> (brokers' ranges, answer)
        self._table = {
            API_VERSIONS.key: self.api_versions, METADATA.key: self.metadata,
            FIND_COORDINATOR.key: self.find_coordinator, JOIN_GROUP.key: self.join_group,
            SYNC_GROUP.key: self.sync_group, HEARTBEAT.key: self.heartbeat,
            LEAVE_GROUP.key: self.leave_group, OFFSET_COMMIT.key: self.offset_commit,
            OFFSET_FETCH.key: self.offset_fetch, LIST_GROUPS.key: self.list_groups,
            DESCRIBE_GROUPS.key: self.describe_groups, DELETE_GROUPS.key: self.delete_groups,
            SASL_HANDSHAKE.key: self.sasl_again, SASL_AUTHENTICATE.key: self.sasl_again,
            CONSUMER_GROUP_HEARTBEAT.key: self.consumer_group_heartbeat,
            CONSUMER_GROUP_DESCRIBE.key: self.consumer_group_describe,
        }
        self._table.update(dict.fromkeys(LEADER_ONLY, self.not_leader))
        # the APIs whose handlers may answer with a coroutine or a Pending (they wait for something)
        self._waits = {JOIN_GROUP.key, SYNC_GROUP.key, OFFSET_COMMIT.key, OFFSET_FETCH.key, DELETE_GROUPS.key,
                       CONSUMER_GROUP_HEARTBEAT.key}

    def dispatch(self, api_key: int, api_version: int) -> tuple[Callable, bool] | None:
        """The handler of (api, version) and whether its answer may wait (a coroutine or a
        `Pending`, counted against the connection's requests in flight); None
        for what is not served: refused, not guessed at. A leader-only API is answered in
        every version we can read, advertised or not (the cluster's ranges may change)."""
        lo, hi = SUPPORTED.get(api_key, (0, -1))
        if api_key in LEADER_ONLY:
            versions = APIS[api_key].versions
            lo, hi = versions.low, versions.high
        if not lo <= api_version <= hi:
            return None
        return self._table[api_key], api_key in self._waits

    # -- cluster --------------------------------------------------------------------------

    def api_versions_response(self, error: ErrorCode = E.NONE) -> m.ApiVersionsResponse:
        """What we serve, and the leader-only APIs in the versions the cluster's brokers and
        we both speak; made again only when the brokers' ranges are (every connection asks,
        and building it was 12 % of a connection's cost: docs/benchmarks.md, Security)."""
        brokers = self.topics.api_versions
        cached = self._api_versions.get(error)
        if cached is not None and cached[0] is brokers:
            return cached[1]
        advertised = dict(SUPPORTED)
        cluster = brokers or LEADER_ONLY
        for key in LEADER_ONLY:
            theirs, ours = cluster.get(key, (0, -1)), APIS[key].versions
            lo, hi = max(theirs[0], ours.low), min(theirs[1], ours.high)
            if lo <= hi:
                advertised[key] = (lo, hi)
        response = m.ApiVersionsResponse(error_code=error, api_keys=[
            m.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(advertised.items())])
        self._api_versions[error] = (brokers, response)
        return response

    def api_versions(self, header, request, client):
        return self.api_versions_response()

    def sasl_again(self, header, request, client):
        """SASL on a connection that is through authentication, or on a listener without it:
        ILLEGAL_SASL_STATE, as Kafka answers."""
        if header.api_key == SASL_HANDSHAKE.key:
            return m.SaslHandshakeResponse(error_code=E.ILLEGAL_SASL_STATE)
        return m.SaslAuthenticateResponse(error_code=E.ILLEGAL_SASL_STATE, error_message="not expected now")

    def allowed(self, client: Client, operation: Operation, resource: ResourceType, name: str) -> bool:
        """Whether the ACLs let `client` do `operation` on the resource (always, without ACLs)."""
        if self.acls is None:
            return True
        if self.acls.authorizer.allows(client.principal, client.host, operation, resource, name):
            return True
        metrics.AUTHORIZATION_DENIALS.labels(resource.value, operation.value).inc()
        return False

    def not_leader(self, header, request, client):
        """A leader-only request: NOT_LEADER_OR_FOLLOWER for every partition it names."""
        key, no = header.api_key, E.NOT_LEADER_OR_FOLLOWER
        if key == FETCH.key:
            if request.session_id:  # a fetch session we never opened
                return m.FetchResponse(error_code=E.FETCH_SESSION_ID_NOT_FOUND, session_id=0)
            return m.FetchResponse(responses=[m.FetchableTopicResponse(
                topic=t.topic, topic_id=t.topic_id, partitions=[m.FetchPartitionData(
                    partition_index=p.partition, error_code=no, high_watermark=-1) for p in t.partitions])
                for t in request.topics])
        if key == PRODUCE.key:
            if request.acks == 0:
                raise CloseConnection("produce with acks=0 to a coordinator")
            return m.ProduceResponse(responses=[m.TopicProduceResponse(
                name=t.name, topic_id=t.topic_id, partition_responses=[m.PartitionProduceResponse(
                    index=p.index, error_code=no, base_offset=-1) for p in t.partition_data])
                for t in request.topic_data])
        if key == LIST_OFFSETS.key:
            return m.ListOffsetsResponse(topics=[m.ListOffsetsTopicResponse(name=t.name, partitions=[
                m.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=no)
                for p in t.partitions]) for t in request.topics])
        return m.OffsetForLeaderEpochResponse(topics=[m.OffsetForLeaderTopicResult(topic=t.topic, partitions=[
            m.EpochEndOffset(error_code=no, partition=p.partition) for p in t.partitions]) for t in request.topics])

    def metadata(self, header, request, client):
        """Brokers and leaders from the topic source, and every live coordinator instance as one
        more node (ids never a broker's), so a client may bootstrap from any of them; a
        partition whose leader is unknown or not live has none."""
        live = self.topics.brokers
        brokers = [m.MetadataResponseBroker(node_id=b.id, host=b.host, port=b.port, rack=b.rack)
                   for _, b in sorted(live.items())]
        membership = self.coordinator.membership
        instances = {membership.me.id: membership.me, **membership.live}  # itself, even unregistered
        for _, instance in sorted(instances.items()):
            if address := instance.address(client.listener.name):  # as reached through the client's listener
                brokers.append(m.MetadataResponseBroker(node_id=node_id(instance), host=address[0], port=address[1]))
        known, ids = self.topics.partitions, self.topics.topic_ids
        everything = request.topics is None or (header.api_version == 0 and not request.topics)
        if everything:  # only the topics the client may describe
            asked = [(name, None) for name in sorted(known)
                     if self.allowed(client, Operation.DESCRIBE, ResourceType.TOPIC, name)]
        else:  # by name, or (v10+) by topic id
            by_id = self.topics.names_by_id
            asked = [(t.name, None) if t.name is not None else (by_id.get(t.topic_id), t.topic_id)
                     for t in request.topics]
        topics = []
        for name, topic_id in asked:
            if not everything and not self.allowed(client, Operation.DESCRIBE, ResourceType.TOPIC, name or ""):
                topics.append(m.MetadataResponseTopic(error_code=E.TOPIC_AUTHORIZATION_FAILED, name=name,
                                                      topic_id=topic_id or NO_TOPIC_ID))
                continue
            count = known.get(name)
            if count is None:
                topics.append(m.MetadataResponseTopic(
                    error_code=E.UNKNOWN_TOPIC_OR_PARTITION if topic_id is None else E.UNKNOWN_TOPIC_ID,
                    name=name, topic_id=topic_id or NO_TOPIC_ID))
                continue
            topics.append(m.MetadataResponseTopic(
                error_code=E.NONE, name=name, topic_id=ids.get(name, NO_TOPIC_ID), is_internal=name in INTERNAL_TOPICS,
                partitions=[self._partition(name, p, live) for p in range(count)]))
        # the Kafka cluster's id and controller where known: a client connected to brokers that
        # report different cluster ids takes them for two clusters (librdkafka stops)
        controller = self.topics.controller_id
        return m.MetadataResponse(brokers=brokers, cluster_id=self.topics.cluster_id or CLUSTER_ID,
                                  controller_id=node_id(instances[min(instances)]) if controller is None else controller,
                                  topics=topics)

    def _partition(self, topic: str, p: int, live) -> m.MetadataResponsePartition:
        state = self.topics.states.get((topic, p))
        replicas = self.topics.replicas.get(topic, {}).get(p, [])
        offline = [r for r in replicas if r not in live]
        if state is None or state.leader not in live:
            return m.MetadataResponsePartition(error_code=E.LEADER_NOT_AVAILABLE, partition_index=p, leader_id=-1,
                                               replica_nodes=replicas, offline_replicas=offline)
        return m.MetadataResponsePartition(
            error_code=E.NONE, partition_index=p, leader_id=state.leader, leader_epoch=state.leader_epoch,
            replica_nodes=replicas, isr_nodes=list(state.isr), offline_replicas=offline)

    def find_coordinator(self, header, request, client):
        """The instance each group is placed on, from any instance (the seeds' ConsumerMetadata),
        at its address on the listener the client came in on."""
        if header.api_version < 4:
            found = self._coordinator(request.key, request.key_type, client)
            if isinstance(found, ErrorCode):
                return m.FindCoordinatorResponse(error_code=found, error_message=found.name,
                                                 node_id=-1, host="", port=-1)
            instance, (host, port) = found
            return m.FindCoordinatorResponse(error_code=E.NONE, node_id=node_id(instance), host=host, port=port)
        coordinators = []
        for key in request.coordinator_keys:
            found = self._coordinator(key, request.key_type, client)
            if isinstance(found, ErrorCode):
                coordinators.append(m.Coordinator(key=key, node_id=-1, host="", port=-1, error_code=found,
                                                  error_message=found.name))
            else:
                instance, (host, port) = found
                coordinators.append(m.Coordinator(key=key, node_id=node_id(instance), host=host, port=port,
                                                  error_code=E.NONE))
        return m.FindCoordinatorResponse(coordinators=coordinators)

    def _coordinator(self, key: str, key_type: int, client: Client) -> tuple[Instance, tuple[str, int]] | ErrorCode:
        if key_type != 0:  # transactions and share groups are not ours
            return E.INVALID_REQUEST
        if not self.allowed(client, Operation.DESCRIBE, ResourceType.GROUP, key):
            return E.GROUP_AUTHORIZATION_FAILED
        found = self.coordinator.coordinator_of(key)
        if isinstance(found, ErrorCode):
            return found
        address = found.address(client.listener.name)
        if address is None:  # that instance has no such listener (being reconfigured): ask again later
            return E.COORDINATOR_NOT_AVAILABLE
        return found, address

    # -- membership -----------------------------------------------------------------------

    async def join_group(self, header, request, client):
        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return m.JoinGroupResponse(error_code=E.GROUP_AUTHORIZATION_FAILED, member_id=request.member_id)
        route = self.coordinator.route(request.group_id, empty_ok=False)
        if not isinstance(route, Owned):
            return m.JoinGroupResponse(error_code=route, member_id=request.member_id)
        protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
        if not route.groups.assignable(protocols):
            return m.JoinGroupResponse(error_code=E.INCONSISTENT_GROUP_PROTOCOL, member_id=request.member_id)
        rebalance_timeout = request.rebalance_timeout_ms if header.api_version >= 1 else request.session_timeout_ms
        reply = await route.groups.join(
            request.group_id, member_id=request.member_id, instance_id=request.group_instance_id,
            client_id=header.client_id or "", client_host=client.host,
            session_timeout=request.session_timeout_ms / 1000, rebalance_timeout=rebalance_timeout / 1000,
            protocol_type=request.protocol_type, protocols=protocols,
            require_known_member_id=header.api_version >= 4, reason=request.reason)
        return m.JoinGroupResponse(
            error_code=reply.error, generation_id=reply.generation, protocol_type=reply.protocol_type,
            protocol_name=reply.protocol_name if header.api_version >= 7 else (reply.protocol_name or ""),
            leader=reply.leader, member_id=reply.member_id,
            members=[m.JoinGroupResponseMember(member_id=mid, group_instance_id=iid, metadata=meta)
                     for mid, iid, meta in reply.members])

    async def sync_group(self, header, request, client):
        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return m.SyncGroupResponse(error_code=E.GROUP_AUTHORIZATION_FAILED)
        route = self.coordinator.route(request.group_id, empty_ok=False)
        if not isinstance(route, Owned):
            return m.SyncGroupResponse(error_code=route)
        reply = await route.groups.sync(
            request.group_id, request.member_id, generation=request.generation_id,
            instance_id=request.group_instance_id, protocol_type=request.protocol_type,
            protocol_name=request.protocol_name,
            assignments={a.member_id: bytes(a.assignment) for a in request.assignments})
        return m.SyncGroupResponse(error_code=reply.error, protocol_type=reply.protocol_type,
                                   protocol_name=reply.protocol_name, assignment=reply.assignment)

    def stable_heartbeat(self, frame: bytes, now: float, client: Client) -> bytes | None:
        """The answer (a whole frame) to the heartbeat in `frame` if it is the usual one, a
        Stable dynamic member's of a group served here that the ACLs let the client read,
        read and answered without message objects; None for any other case, which
        `heartbeat` then answers."""
        read = read_heartbeat(frame)
        if read is None:
            return None
        version, correlation_id, group_id, generation, member_id = read
        if self.acls is not None and not self.acls.authorizer.allows(client.principal, client.host, Operation.READ,
                                                                      ResourceType.GROUP, group_id):
            return None
        route = self.coordinator.route(group_id, empty_ok=False, now=now)
        if type(route) is not Owned or not route.groups.keep_alive(group_id, member_id, generation, now):
            return None
        return heartbeat_answer(version, correlation_id)

    def heartbeat(self, header, request, client):
        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return m.HeartbeatResponse(error_code=E.GROUP_AUTHORIZATION_FAILED)
        route = self.coordinator.route(request.group_id, empty_ok=False)
        if not isinstance(route, Owned):
            return m.HeartbeatResponse(error_code=route)
        return m.HeartbeatResponse(error_code=route.groups.heartbeat(
            request.group_id, request.member_id, request.generation_id, request.group_instance_id))

    def leave_group(self, header, request, client):
        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return m.LeaveGroupResponse(error_code=E.GROUP_AUTHORIZATION_FAILED)
        route = self.coordinator.route(request.group_id, empty_ok=False)
        leaving = ([(request.member_id, None)] if header.api_version < 3 else
                   [(x.member_id, x.group_instance_id) for x in request.members])
        if not isinstance(route, Owned):
            return m.LeaveGroupResponse(error_code=route)
        errors = route.groups.leave(request.group_id, leaving)
        if header.api_version < 3:
            return m.LeaveGroupResponse(error_code=errors[0])
        return m.LeaveGroupResponse(error_code=E.NONE, members=[
            m.MemberResponse(member_id=mid, group_instance_id=iid, error_code=error)
            for (mid, iid), error in zip(leaving, errors)])

    # -- consumer-protocol groups (KIP-848) ---------------------------------------------

    async def consumer_group_heartbeat(self, header, request, client):
        def refused(error: ErrorCode, message: str | None = None):
            return m.ConsumerGroupHeartbeatResponse(error_code=error, error_message=message or error.name,
                                                    member_id=request.member_id or None,
                                                    member_epoch=request.member_epoch)

        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return refused(E.GROUP_AUTHORIZATION_FAILED)
        invalid = _invalid_heartbeat(request, header.api_version, self.coordinator.group_config.max_group_id_length)
        if invalid is not None:
            return refused(E.INVALID_REQUEST, invalid)
        route = self.coordinator.route(request.group_id, empty_ok=False)
        if not isinstance(route, Owned):
            return refused(route)
        names = self.topics.names_by_id
        owned = None if request.topic_partitions is None else [
            (names[t.topic_id], p) for t in request.topic_partitions if t.topic_id in names for p in t.partitions]
        reply = await route.groups.consumer_heartbeat(
            request.group_id, member_id=request.member_id, epoch=request.member_epoch, owned=owned,
            instance_id=request.instance_id, rack_id=request.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms, subscribed=request.subscribed_topic_names,
            regex=request.subscribed_topic_regex, assignor=request.server_assignor,
            client_id=header.client_id or "", client_host=client.host)
        if reply.error != E.NONE:
            return refused(reply.error)
        assignment = None
        if reply.assignment is not None:
            ids = self.topics.topic_ids  # a topic without an id cannot be named to these clients
            assignment = m.ConsumerGroupHeartbeatAssignment(topic_partitions=[
                m.ConsumerGroupHeartbeatTopicPartitions(topic_id=ids[topic], partitions=partitions)
                for topic, partitions in by_topic(reply.assignment).items()
                if ids.get(topic, NO_TOPIC_ID) != NO_TOPIC_ID])
        return m.ConsumerGroupHeartbeatResponse(
            error_code=E.NONE, member_id=reply.member_id, member_epoch=reply.epoch,
            heartbeat_interval_ms=int(reply.heartbeat_interval * 1000), assignment=assignment)

    def consumer_group_describe(self, header, request, client):
        described = []
        for group_id in request.group_ids:
            route = (self.coordinator.route(group_id) if self.allowed(client, Operation.DESCRIBE, ResourceType.GROUP,
                                                                      group_id) else E.GROUP_AUTHORIZATION_FAILED)
            if not isinstance(route, Owned):
                described.append(m.DescribedConsumerGroup(error_code=route, error_message=route.name,
                                                          group_id=group_id))
                continue
            group = route.groups.consumer_groups.get(group_id)
            if group is None:
                message = (f"Group {group_id} is not a consumer group." if route.groups.group(group_id) is not None
                           else f"Group {group_id} not found.")
                described.append(m.DescribedConsumerGroup(error_code=E.GROUP_ID_NOT_FOUND, error_message=message,
                                                          group_id=group_id))
                continue
            described.append(m.DescribedConsumerGroup(
                error_code=E.NONE, group_id=group_id, group_state=group.state.value, group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                assignor_name=group.assignor or group.config.default_assignor,
                members=[m.ConsumerGroupMember(
                    member_id=x.member_id, instance_id=x.instance_id, rack_id=x.rack_id, member_epoch=x.epoch,
                    client_id=x.client_id, client_host=x.client_host, subscribed_topic_names=list(x.subscribed),
                    subscribed_topic_regex=x.regex, assignment=self._described(x.assigned),
                    target_assignment=self._described(group.target.get(x.member_id, frozenset())),
                    member_type=CLASSIC_MEMBER if x.classic is not None else CONSUMER_MEMBER)
                    for x in group.members.values()]))
        return m.ConsumerGroupDescribeResponse(groups=described)

    def _described(self, partitions) -> m.ConsumerGroupDescribeAssignment:
        ids = self.topics.topic_ids
        return m.ConsumerGroupDescribeAssignment(topic_partitions=[
            m.ConsumerGroupDescribeTopicPartitions(topic_id=ids.get(topic, NO_TOPIC_ID), topic_name=topic,
                                                   partitions=ps)
            for topic, ps in by_topic(partitions).items()])

    # -- offsets --------------------------------------------------------------------------

    def offset_commit(self, header, request, client):
        def answer(error_of):
            return m.OffsetCommitResponse(topics=[m.OffsetCommitResponseTopic(name=t.name, partitions=[
                m.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                error_code=error_of(t.name, p.partition_index))
                for p in t.partitions]) for t in request.topics])

        if not self.allowed(client, Operation.READ, ResourceType.GROUP, request.group_id):
            return answer(lambda topic, p: E.GROUP_AUTHORIZATION_FAILED)
        route = self.coordinator.route(request.group_id)
        if not isinstance(route, Owned):
            return answer(lambda topic, p: route)
        if sum(len(t.partitions) for t in request.topics) > self.coordinator.group_config.max_commit_partitions:
            return answer(lambda topic, p: E.INVALID_COMMIT_OFFSET_SIZE)
        error = route.groups.commit_check(request.group_id, request.member_id,
                                          request.generation_id_or_member_epoch, request.group_instance_id,
                                          member_epochs=header.api_version >= 9)
        if error != E.NONE:
            return answer(lambda topic, p: error)
        refused = {(t.name, p.partition_index): E.INVALID_TOPIC_EXCEPTION if len(t.name) > MAX_TOPIC_NAME
                   else E.OFFSET_METADATA_TOO_LARGE
                   for t in request.topics for p in t.partitions
                   if len(t.name) > MAX_TOPIC_NAME or (p.committed_metadata is not None
                                                       and len(p.committed_metadata) > MAX_OFFSET_METADATA)}
        if self.acls is not None:
            for t in request.topics:
                if not self.allowed(client, Operation.READ, ResourceType.TOPIC, t.name):
                    refused.update(dict.fromkeys(((t.name, p.partition_index) for p in t.partitions),
                                                 E.TOPIC_AUTHORIZATION_FAILED))
        now_ms = int(time.time() * 1000)
        entries = {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch,
                                                 p.committed_metadata, now_ms)
                   for t in request.topics for p in t.partitions if (t.name, p.partition_index) not in refused}
        if not entries:
            return answer(lambda topic, p: refused.get((topic, p), E.NONE))
        pending, started = Pending(), time.perf_counter()

        def done(error: Exception | None) -> None:
            pending.resolve(partial(self._committed, request, entries, refused, answer, started, error))
        try:
            route.store.submit(request.group_id, entries, done)
        except (NotOwner, StoreUnavailable, StoreError) as exc:
            code = store_error_code(exc)
            return answer(lambda topic, p: code)
        return pending

    def _committed(self, request, entries, refused, answer, started: float, error: Exception | None):
        """The second half of a commit: its answer once it is durable, or has failed."""
        if error is not None:
            code = store_error_code(error)
            return answer(lambda topic, p: code)
        metrics.OFFSET_COMMITS.inc()
        metrics.OFFSET_COMMIT_PARTITIONS.inc(len(entries))
        metrics.OFFSET_COMMIT_SECONDS.observe(time.perf_counter() - started)
        self.coordinator.events.emit(
            "offsets_committed", request.group_id, generation=request.generation_id_or_member_epoch,
            member=request.member_id or None,
            offsets=[{"topic": t, "partition": p, "offset": o} for (t, p), (o, *_) in entries.items()])
        return answer(lambda topic, p: refused.get((topic, p), E.NONE))

    async def offset_fetch(self, header, request, client):
        if header.api_version >= 8:
            groups = [await self._fetch_group(g.group_id, None if g.topics is None else
                                              [(t.name, t.partition_indexes) for t in g.topics], client,
                                              g.member_id, g.member_epoch)
                      for g in request.groups]
            return m.OffsetFetchResponse(groups=[
                m.OffsetFetchResponseGroup(group_id=gid, error_code=error, topics=[
                    m.OffsetFetchResponseTopics(name=name, partitions=[
                        m.OffsetFetchResponsePartitions(partition_index=p, committed_offset=o,
                                                        committed_leader_epoch=e, metadata=md, error_code=pe)
                        for p, o, e, md, pe in parts]) for name, parts in topics])
                for gid, error, topics in groups])
        topics = None if request.topics is None else [(t.name, t.partition_indexes) for t in request.topics]
        _, error, result = await self._fetch_group(request.group_id, topics, client)
        return m.OffsetFetchResponse(error_code=error, topics=[
            m.OffsetFetchResponseTopic(name=name, partitions=[
                m.OffsetFetchResponsePartition(partition_index=p, committed_offset=o, committed_leader_epoch=e,
                                               metadata=md, error_code=pe if header.api_version >= 2 or error == E.NONE else error)
                for p, o, e, md, pe in parts]) for name, parts in result])

    async def _fetch_group(self, group_id: str, topics, client: Client, member_id: str | None = None,
                           member_epoch: int = -1):
        """(group, error, [(topic, [(partition, offset, epoch, metadata, error)])]): of the
        topics the client may describe; those named that it may not, TOPIC_AUTHORIZATION_FAILED.
        A consumer group's member (v9+) is answered only at its current epoch."""
        route = (self.coordinator.route(group_id) if self.allowed(client, Operation.DESCRIBE, ResourceType.GROUP, group_id)
                 else E.GROUP_AUTHORIZATION_FAILED)
        if isinstance(route, Owned) and (refused := route.groups.fetch_check(group_id, member_id, member_epoch)):
            route = refused
        if isinstance(route, Owned):
            try:  # a write of the group's whose outcome is unknown is read back first
                await route.store.settle(group_id)
            except (NotOwner, StoreUnavailable, StoreError) as exc:
                route = store_error_code(exc)
        if not isinstance(route, Owned):
            return group_id, route, [(name, [(p, -1, -1, "", route) for p in parts]) for name, parts in topics or []]
        committed = route.store.durable.get(group_id, {})
        named = topics is not None
        if not named:  # all of them: those it may not describe left out
            topics = [(name, sorted(parts)) for name, parts in sorted(committed.items())
                      if self.allowed(client, Operation.DESCRIBE, ResourceType.TOPIC, name)]
        result = []
        for name, parts in topics:
            if named and not self.allowed(client, Operation.DESCRIBE, ResourceType.TOPIC, name):
                result.append((name, [(p, -1, -1, "", E.TOPIC_AUTHORIZATION_FAILED) for p in parts]))
                continue
            have = committed.get(name, {})
            result.append((name, [(p, *(_entry(have[p]) if p in have else (-1, -1, "")), E.NONE)
                                  for p in parts]))
        return group_id, E.NONE, result

    # -- administration -------------------------------------------------------------------

    def list_groups(self, header, request, client):
        """Every group served here (v4+: of the states asked for; v5+: of the types asked
        for, classic or consumer, and with its type)."""
        wanted = {s.lower() for s in request.states_filter}
        types = {t.lower() for t in request.types_filter}
        every = self.allowed(client, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
        groups = [m.ListedGroup(group_id=gid, protocol_type=protocol_type, group_state=state, group_type=kind)
                  for gid, protocol_type, state, _, kind in sorted(self.coordinator.all_groups())
                  if (not wanted or state.lower() in wanted) and (not types or kind in types)
                  and (every or self.allowed(client, Operation.DESCRIBE, ResourceType.GROUP, gid))]
        return m.ListGroupsResponse(error_code=E.NONE, groups=groups)

    def describe_groups(self, header, request, client):
        described = []
        for group_id in request.groups:
            route = (self.coordinator.route(group_id) if self.allowed(client, Operation.DESCRIBE, ResourceType.GROUP,
                                                                      group_id) else E.GROUP_AUTHORIZATION_FAILED)
            if not isinstance(route, Owned):
                described.append(m.DescribedGroup(error_code=route, group_id=group_id))
                continue
            group = route.groups.group(group_id)
            if group is None:  # offsets only: Empty; nothing at all, or a consumer group: Dead, as Kafka answers
                consumer = group_id in route.groups.consumer_groups
                state = GroupState.EMPTY if group_id in route.store.durable and not consumer else GroupState.DEAD
                described.append(m.DescribedGroup(error_code=E.NONE, group_id=group_id, group_state=state.value))
                continue
            stable = group.state == GroupState.STABLE
            described.append(m.DescribedGroup(
                error_code=E.NONE, group_id=group_id, group_state=group.state.value,
                protocol_type=group.protocol_type or "", protocol_data=group.protocol_name or "",
                members=[m.DescribedGroupMember(
                    member_id=x.member_id, group_instance_id=x.instance_id, client_id=x.client_id,
                    client_host=x.client_host, member_metadata=x.metadata(group.protocol_name),
                    member_assignment=x.assignment if stable else b"")
                    for x in group.members.values()]))
        return m.DescribeGroupsResponse(groups=described)

    async def delete_groups(self, header, request, client):
        results = []
        for group_id in request.groups_names:
            error = (await self._delete(group_id) if self.allowed(client, Operation.DELETE, ResourceType.GROUP, group_id)
                     else E.GROUP_AUTHORIZATION_FAILED)
            results.append(m.DeletableGroupResult(group_id=group_id, error_code=error))
        return m.DeleteGroupsResponse(results=results)

    async def _delete(self, group_id: str) -> ErrorCode:
        route = self.coordinator.route(group_id)
        if not isinstance(route, Owned):
            return route
        group = route.groups.group(group_id) or route.groups.consumer_groups.get(group_id)
        if group is not None and group.members:
            return E.NON_EMPTY_GROUP
        if group is None and group_id not in route.store.durable and group_id not in route.store.groups:
            return E.GROUP_ID_NOT_FOUND
        try:
            await route.store.delete_group(group_id)
        except (NotOwner, StoreUnavailable, StoreError) as exc:
            return store_error_code(exc)
        route.groups.drop(group_id)
        return E.NONE


def _invalid_heartbeat(request, version: int, max_id: int) -> str | None:
    """What Kafka refuses INVALID_REQUEST in a ConsumerGroupHeartbeat before looking at
    the group, or None. From v1 the member makes up its own id, even to join. Beyond Kafka,
    what the group would keep is bounded: ids as group ids are, topic names as Kafka's, the
    subscription's size."""
    epoch = request.member_epoch
    if any(len(x or "") > max_id for x in (request.member_id, request.instance_id, request.rack_id)):
        return f"MemberId, InstanceId and RackId can't be longer than {max_id} characters."
    names = request.subscribed_topic_names or ()
    if len(names) > MAX_SUBSCRIBED_TOPICS or any(len(name) > MAX_TOPIC_NAME for name in names):
        return f"At most {MAX_SUBSCRIBED_TOPICS} subscribed topics, of at most {MAX_TOPIC_NAME} characters."
    if len(request.subscribed_topic_regex or "") > MAX_TOPIC_REGEX:
        return f"SubscribedTopicRegex can't be longer than {MAX_TOPIC_REGEX} characters."
    if not request.member_id and (epoch != 0 or version >= 1):
        return "MemberId can't be empty."
    if request.instance_id == "":
        return "InstanceId can't be empty."
    if request.rack_id == "":
        return "RackId can't be empty."
    if epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
        return "InstanceId can't be null."
    if epoch == 0 and request.rebalance_timeout_ms == -1:
        return "RebalanceTimeoutMs must be provided in first request."
    if epoch == 0 and request.topic_partitions:
        return "TopicPartitions must be empty when (re-)joining."
    if epoch == 0 and request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
        return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    if epoch < STATIC_LEAVE_EPOCH:
        return "MemberEpoch is invalid."
    return None


def _entry(entry) -> tuple[int, int, str | None]:
    offset, epoch, metadata, _ = entry
    return offset, epoch, metadata
