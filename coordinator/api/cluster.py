"""The cluster's answers: ApiVersions, Metadata, FindCoordinator, and the APIs that only a
partition's leader serves. The gateway's relaying answers take this part's place.
"""

from __future__ import annotations

from protocol import ErrorCode, messages as m
from protocol.schemas import (API_VERSIONS, APIS, FETCH, FIND_COORDINATOR, LIST_OFFSETS, METADATA, PRODUCE,
                              SASL_AUTHENTICATE, SASL_HANDSHAKE)

from ..cluster.membership import Instance
from ..cluster.node_ids import node_id
from ..security.acls.authorizer import Operation, ResourceType
from ..security.client import Client
from ..serving.interfaces import CloseConnection, Route
from ..topics.view import NO_TOPIC_ID
from .access import ApiPart
from .versions import LEADER_ONLY, SUPPORTED

E = ErrorCode
CLUSTER_ID = "groupkeeper"
# Kafka's internal topics: marked so that clients leave them out of pattern subscriptions
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


class ClusterApi(ApiPart):
    def __init__(self, coordinator, topics, acls=None):
        super().__init__(coordinator, topics, acls)
        self._api_versions: dict[ErrorCode, tuple[dict, m.ApiVersionsResponse]] = {}  # error -> (brokers' ranges, answer)
        self._handlers = self.handlers()

    def handlers(self) -> dict:
        return {API_VERSIONS.key: self.api_versions, METADATA.key: self.metadata,
                FIND_COORDINATOR.key: self.find_coordinator,
                SASL_HANDSHAKE.key: self.sasl_again, SASL_AUTHENTICATE.key: self.sasl_again,
                **dict.fromkeys(LEADER_ONLY, self.not_leader)}

    def route(self, api_key: int, api_version: int) -> Route | None:
        """How (api, version) is answered, if it is one of this part's; None: not served. A
        leader-only API is answered in every version we can read, advertised or not (the
        cluster's ranges may change)."""
        handler = self._handlers.get(api_key)
        if handler is None:
            return None
        lo, hi = SUPPORTED.get(api_key, (0, -1))
        if api_key in LEADER_ONLY:
            versions = APIS[api_key].versions
            lo, hi = versions.low, versions.high
        return (handler, False, False) if lo <= api_version <= hi else None

    def api_versions_response(self, error: ErrorCode = E.NONE) -> m.ApiVersionsResponse:
        """What we serve, and the leader-only APIs in the versions the cluster's brokers and
        we both speak; made again only when the brokers' ranges are (every connection asks,
        and building it was 12 % of a connection's cost: docs/benchmarks.md, Security)."""
        brokers = self.topics.api_versions
        cached = self._api_versions.get(error)
        if cached is not None and cached[0] is brokers:
            return cached[1]
        response = m.ApiVersionsResponse(error_code=error, api_keys=[
            m.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(self.advertised(brokers).items())])
        self._api_versions[error] = (brokers, response)
        return response

    def advertised(self, brokers: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
        """api key -> (lowest, highest) version advertised, given the brokers' ranges."""
        advertised = dict(SUPPORTED)
        cluster = brokers or LEADER_ONLY
        for key in LEADER_ONLY:
            if (both := within(cluster.get(key, (0, -1)), key)) is not None:
                advertised[key] = both
        return advertised

    def api_versions(self, header, request, client):
        return self.api_versions_response()

    def sasl_again(self, header, request, client):
        """SASL on a connection that is through authentication, or on a listener without it:
        ILLEGAL_SASL_STATE, as Kafka answers."""
        if header.api_key == SASL_HANDSHAKE.key:
            return m.SaslHandshakeResponse(error_code=E.ILLEGAL_SASL_STATE)
        return m.SaslAuthenticateResponse(error_code=E.ILLEGAL_SASL_STATE, error_message="not expected now")

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
        instances = self.instances()
        brokers += [m.MetadataResponseBroker(node_id=node, host=host, port=port)
                    for node, host, port in self.coordinator_nodes(client.listener.name, instances)]
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

    def instances(self) -> dict[int, Instance]:
        """The live coordinator instances, this one among them even while unregistered."""
        membership = self.coordinator.membership
        return {membership.me.id: membership.me, **membership.live}

    def coordinator_nodes(self, listener: str, instances: dict[int, Instance] | None = None
                          ) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every live instance as reached through `listener` (a
        name): the nodes a Metadata answer lists beside the brokers, so that a client may
        bootstrap from any of them and never drops its coordinator."""
        return [(node_id(instance), *address) for _, instance in sorted((instances or self.instances()).items())
                if (address := instance.address(listener))]

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


def within(theirs: tuple[int, int], api_key: int, highest: int | None = None) -> tuple[int, int] | None:
    """The versions of `theirs` that our codec declares for `api_key` (and at most
    `highest`), or None if there are none."""
    ours = APIS[api_key].versions
    lo, hi = max(theirs[0], ours.low), min(theirs[1], ours.high, ours.high if highest is None else highest)
    return (lo, hi) if lo <= hi else None
