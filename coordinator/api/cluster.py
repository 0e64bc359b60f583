"""The cluster's answers: ApiVersions, Metadata, FindCoordinator, and the APIs that only a
partition's leader serves. The gateway's relaying answers take this part's place.

Metadata is answered from a cache of encoded answers (`MetadataCache`): building and
encoding an answer costs about 2.5 us a partition (2.5 ms for 1,000), and clients that
cannot reach their leaders ask about once a second (docs/benchmarks.md, `bench load`).
"""

from __future__ import annotations

import struct
import time
from collections import OrderedDict

from protocol import ErrorCode, ProtocolError, decode_request, encode_response, messages as m
from protocol.requests import skip_tags
from protocol.schemas import (API_VERSIONS, APIS, FETCH, FIND_COORDINATOR, LIST_OFFSETS, METADATA, PRODUCE,
                              SASL_AUTHENTICATE, SASL_HANDSHAKE)

from .. import metrics
from ..cluster.membership import Instance
from ..cluster.node_ids import node_id
from ..security.acls.authorizer import WILDCARD, Operation, ResourceType
from ..security.client import Client
from ..serving.interfaces import CloseConnection, Route
from ..serving.pending import Pending
from ..topics.view import NO_TOPIC_ID
from .access import ApiPart
from .versions import LEADER_ONLY, SUPPORTED

E = ErrorCode
CLUSTER_ID = "groupkeeper"
# Kafka's internal topics: marked so that clients leave them out of pattern subscriptions
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
# The cache of encoded Metadata answers: at most this many bytes of answers in all, and this
# many answers (least recently used out first); an answer larger than the whole is never
# kept (`metadata_cache_bytes`, 32 MiB by default). 0 turns it off: every answer made
# afresh, as before it (what `bench load` measures it against).
METADATA_CACHE_BYTES = 32 * 2**20
METADATA_CACHE_ANSWERS = 1024
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ClusterApi(ApiPart):
    def __init__(self, coordinator, topics, acls=None, metadata_cache_bytes: int | None = None):
        super().__init__(coordinator, topics, acls)
        self._api_versions: dict[ErrorCode, tuple[dict, m.ApiVersionsResponse]] = {}  # error -> (brokers' ranges, answer)
        self._handlers = self.handlers()
        size = METADATA_CACHE_BYTES if metadata_cache_bytes is None else metadata_cache_bytes
        # none for a view that does not count its changes (a stand-in's): every answer made afresh
        self.metadata_cache = MetadataCache(size) if size > 0 and hasattr(topics, "changes") else None
        self._acl_hosts: tuple[object, bool] = (None, True)  # (the ACLs, whether a topic's names a host)

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
        if not lo <= api_version <= hi:
            return None
        if api_key == METADATA.key and self.metadata_cache is not None:
            # the frame in, the answer's frame out (a relaying route's shape): a cached
            # answer is bytes already, with its correlation id spliced in
            return self.metadata_frame, False, True
        return handler, False, False

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
            # an unknown id has no name: null from v12, where the name is nullable; before, ""
            # (v10-11 carry ids too, but their answers' names may not be null)
            unnamed = None if header.api_version >= 12 else ""
            asked = [(t.name, None) if t.name is not None else (by_id.get(t.topic_id, unnamed), t.topic_id)
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

    def metadata_frame(self, connection, frame: bytes) -> Pending:
        """A Metadata request's frame answered from the cache, or made, encoded and kept.
        The answer depends on what the key holds (the version, the listener, the request's
        body: its topics, by name or id, or all, and its flags; with ACLs the principal, and
        the client's host where a topic's ACL names one) and on what `_made_from` says (the
        topic view, the live instances, the ACLs): a change there empties the cache. Its
        throttle_time_ms is always 0 (no quotas here): should it ever vary, it belongs in
        the key."""
        started = time.perf_counter()
        client = connection.client
        cache = self.metadata_cache
        made_from = self._made_from()
        key = self._metadata_key(frame, client)
        answer = cache.get(key, made_from) if key is not None else None
        if answer is None:
            try:
                header, request = decode_request(frame)
            except ProtocolError as exc:
                raise CloseConnection(f"undecodable request: {exc}") from None
            body = self.metadata(header, request, client)
            answer = CachedAnswer(encode_response(header._replace(correlation_id=0), body), body,
                                  len(self.topics.partitions) - len(body.topics) if _for_all(header, request)
                                  else sum(t.error_code == E.TOPIC_AUTHORIZATION_FAILED for t in body.topics))
            if key is not None:
                cache.put(key, answer, made_from)
        elif answer.denied:  # as many denials as making it again would count
            metrics.AUTHORIZATION_DENIALS.labels(ResourceType.TOPIC.value, Operation.DESCRIBE.value).inc(answer.denied)
        reply = answer.to(_I32.unpack_from(frame, 4)[0])
        metrics.observe_request(METADATA.key, answer.summary, time.perf_counter() - started)
        pending = Pending()
        pending.resolve(lambda: reply)
        return pending

    def _made_from(self) -> tuple:
        """What every Metadata answer depends on beyond its request: the topic view's count of
        changes, this instance, the live instances (their ids and addresses: the nodes
        listed, the controller while the cluster's is not known), the ACLs in force."""
        membership = self.coordinator.membership
        return (self.topics.changes, membership.me, membership.live,
                None if self.acls is None else self.acls.authorizer)

    def _metadata_key(self, frame: bytes, client: Client) -> tuple | None:
        """(version, listener, the request's body[, principal, host]): the request's header
        (its correlation and client id, its tagged fields) changes nothing in the answer.
        None for a frame whose header does not read (decoding it says why)."""
        try:
            version = _I16.unpack_from(frame, 2)[0]
            p = 10 + max(_I16.unpack_from(frame, 8)[0], 0)
            if version in METADATA.request.flexible:
                p = p + 1 if p < len(frame) and not frame[p] else skip_tags(frame, p)
        except (struct.error, ProtocolError):
            return None
        if p > len(frame):
            return None
        if self.acls is None:
            return version, client.listener.name, frame[p:]
        return version, client.listener.name, frame[p:], client.principal, (
            client.host if self._acls_name_hosts() else None)

    def _acls_name_hosts(self) -> bool:
        """Whether any topic's ACL names a host (not *): then a principal's answer may differ
        by the client's host. Worked out once per change of the ACLs."""
        acls = getattr(self.acls, "acls", None)
        if self._acl_hosts[0] is not acls or acls is None:
            self._acl_hosts = (acls, acls is None or any(
                acl.host != WILDCARD for resource, entries in acls.items() if resource.type is ResourceType.TOPIC
                for acl in entries))
        return self._acl_hosts[1]

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


def _for_all(header, request) -> bool:
    """Whether a Metadata request asks for every topic (null, or v0's empty list)."""
    return request.topics is None or (header.api_version == 0 and not request.topics)


class CachedAnswer:
    """An encoded Metadata answer, its correlation id left out; what counting it in the
    metrics needs (`summary`: its first error code, as `metrics` finds it); how many topics
    the ACLs denied in it."""
    __slots__ = ("denied", "head", "size", "summary", "tail")

    def __init__(self, frame: bytes, body, denied: int):
        self.head, self.tail = frame[:4], frame[8:]  # the size; after the correlation id
        self.size = len(frame)
        self.denied = denied
        code = next((c for t in body.topics for c in (t.error_code, *(p.error_code for p in t.partitions)) if c), 0)
        self.summary = m.MetadataResponse(topics=[m.MetadataResponseTopic(error_code=code)] if code else [])

    def to(self, correlation_id: int) -> bytes:
        return b"".join((self.head, _I32.pack(correlation_id), self.tail))


class MetadataCache:
    """Encoded Metadata answers by request, each right while what it was made from is
    unchanged: the answers kept all were made from the same (`made_from`), and a request
    made from anything else empties the cache first. At most `max_bytes` of answers and
    `max_answers` answers, the least recently used dropped first; `hits`, `misses` and
    `bytes` say how it goes."""

    def __init__(self, max_bytes: int, max_answers: int = METADATA_CACHE_ANSWERS):
        self.max_bytes = max_bytes
        self.max_answers = max_answers
        self._answers: OrderedDict[tuple, CachedAnswer] = OrderedDict()
        self._made_from: tuple | None = None
        self.bytes = 0
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._answers)

    def get(self, key: tuple, made_from: tuple) -> CachedAnswer | None:
        if not self._current(made_from):
            self.clear()
            self._made_from = (made_from[0], made_from[1], dict(made_from[2]), made_from[3])
        answer = self._answers.get(key)
        if answer is None:
            self.misses += 1
            return None
        self._answers.move_to_end(key)
        self.hits += 1
        return answer

    def _current(self, made_from: tuple) -> bool:
        kept = self._made_from
        return (kept is not None and kept[0] == made_from[0] and kept[1] is made_from[1]
                and kept[3] is made_from[3] and kept[2] == made_from[2])

    def put(self, key: tuple, answer: CachedAnswer, made_from: tuple) -> None:
        """Keep `answer` to `key`, made from `made_from` (nothing if that is not what the
        answers kept were made from, or if it is larger than the whole cache)."""
        if answer.size > self.max_bytes or not self._current(made_from):
            return
        old = self._answers.pop(key, None)
        if old is not None:
            self.bytes -= old.size
        self._answers[key] = answer
        self.bytes += answer.size
        while self.bytes > self.max_bytes or len(self._answers) > self.max_answers:
            _, dropped = self._answers.popitem(last=False)
            self.bytes -= dropped.size

    def clear(self) -> None:
        self._answers.clear()
        self.bytes = 0


def within(theirs: tuple[int, int], api_key: int, highest: int | None = None) -> tuple[int, int] | None:
    """The versions of `theirs` that our codec declares for `api_key` (and at most
    `highest`), or None if there are none."""
    ours = APIS[api_key].versions
    lo, hi = max(theirs[0], ours.low), min(theirs[1], ours.high, ours.high if highest is None else highest)
    return (lo, hi) if lo <= hi else None
