"""Relayed requests authorized against groupkeeper's ACLs, for the client's principal, before
they go upstream: the gateway logs in to the brokers with its own credentials, so without this
every client would have the gateway's rights at the broker. Sans I/O: frames in, verdicts out.

Only with ACLs on (`acls` set); without them nothing here runs and relaying stays bytes.
Kafka's operation per API (its docs' "Operations and Resources on Protocols"):

| API | needs | denied: answered as a broker answers |
| --- | --- | --- |
| Produce | Write on each topic; a transactional one also Write on its TransactionalId | the topic's partitions TOPIC_AUTHORIZATION_FAILED (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for all) |
| Fetch | Read on each topic (a follower's: ClusterAction on the cluster) | the partitions TOPIC_AUTHORIZATION_FAILED |
| ListOffsets, OffsetForLeaderEpoch | Describe on each topic (a follower's OffsetForLeaderEpoch: ClusterAction) | the partitions TOPIC_AUTHORIZATION_FAILED |
| Metadata (v4+) | Describe on each topic; auto-creation Create on the cluster or the topic | a named topic TOPIC_AUTHORIZATION_FAILED; every-topic answers list only what may be described; no Create: relayed with allow_auto_topic_creation false |
| FindCoordinator, key type 1 | Describe on the TransactionalId | TRANSACTIONAL_ID_AUTHORIZATION_FAILED |
| DescribeCluster | Describe on the cluster | CLUSTER_AUTHORIZATION_FAILED |
| CreateTopics | Create on the cluster or the topic (its configs in the answer: DescribeConfigs on it) | the topic TOPIC_AUTHORIZATION_FAILED |
| DeleteTopics | Delete on each topic | the topic TOPIC_AUTHORIZATION_FAILED |
| InitProducerId | Write on the TransactionalId; without one IdempotentWrite on the cluster or Write on some topic | TRANSACTIONAL_ID_AUTHORIZATION_FAILED / CLUSTER_AUTHORIZATION_FAILED |
| AddPartitionsToTxn | Write on the TransactionalId and on each topic (v4+, brokers': ClusterAction) | the partitions TRANSACTIONAL_ID_ / TOPIC_AUTHORIZATION_FAILED, the rest OPERATION_NOT_ATTEMPTED |
| AddOffsetsToTxn | Write on the TransactionalId, Read on the group | TRANSACTIONAL_ID_ / GROUP_AUTHORIZATION_FAILED |
| EndTxn | Write on the TransactionalId | TRANSACTIONAL_ID_AUTHORIZATION_FAILED |
| DescribeConfigs, AlterConfigs, IncrementalAlterConfigs | DescribeConfigs / AlterConfigs on each resource (a topic; a group; brokers, their loggers, client metrics: the cluster) | the resource TOPIC_ / GROUP_ / CLUSTER_AUTHORIZATION_FAILED |
| CreatePartitions | Alter on each topic | the topic TOPIC_AUTHORIZATION_FAILED |

A request partly denied is relayed without its denied parts (encoded again by our codec) and
their errors are merged into the broker's answer (`Verdict.merge`); one wholly denied is
answered here (`Verdict.answer`) and never reaches the broker. Authorized operations that
answers report (Metadata's and DescribeCluster's `*_authorized_operations`) are computed
from our ACLs, not the broker's view of the gateway's principal.

A TransactionalId is authorized like a topic: by the ACLs of its literal name, of `*` and of
the prefixes that start it (Write allowing Describe). A Fetch through the gateway is made
sessionless (KIP-227's session id 0, epoch -1): a fetch session at the broker would keep
serving partitions whose ACLs changed since it was made. Fetch is authorized up to v14 (v15 names a follower in a tagged field our codec
does not read), Metadata from v4 (before, auto-creation cannot be turned off). Every other
relayed API is not authorized here: `AUTHORIZED` lists what is. A request is read as a
broker reads it: its fields, whatever follows them ignored.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from protocol import (DecodeError, ErrorCode, ProtocolError, RequestHeader, decode_broker_response, decode_request,
                      encode_request, encode_response)
from protocol import messages as m
from protocol.schemas import (ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, ALTER_CONFIGS, CREATE_PARTITIONS,
                              CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CLUSTER, DESCRIBE_CONFIGS, END_TXN, FETCH,
                              FIND_COORDINATOR, INCREMENTAL_ALTER_CONFIGS, INIT_PRODUCER_ID, LIST_OFFSETS, METADATA,
                              OFFSET_FOR_LEADER_EPOCH, PRODUCE)

from .. import metrics
from ..security.acls.authorizer import CLUSTER_NAME, WILDCARD_PRINCIPAL, Operation, Permission, ResourceType

TOPIC, CLUSTER, GROUP = ResourceType.TOPIC, ResourceType.CLUSTER, ResourceType.GROUP
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
NO_ID = uuid.UUID(int=0)
_UNKNOWN_OPERATIONS = -(2**31)
_AUTHORIZATION_FAILED = "Authorization failed."

# api key -> the versions authorized here (within what our codec declares and the gateway rewrites)
AUTHORIZED: dict[int, tuple[int, int]] = {
    PRODUCE.key: (3, 13), FETCH.key: (4, 14), LIST_OFFSETS.key: (0, 11), METADATA.key: (4, 13),
    OFFSET_FOR_LEADER_EPOCH.key: (2, 4), FIND_COORDINATOR.key: (0, 6), DESCRIBE_CLUSTER.key: (0, 2),
    CREATE_TOPICS.key: (2, 7), DELETE_TOPICS.key: (1, 6), INIT_PRODUCER_ID.key: (0, 5),
    ADD_PARTITIONS_TO_TXN.key: (0, 5), ADD_OFFSETS_TO_TXN.key: (0, 4), END_TXN.key: (0, 5),
    DESCRIBE_CONFIGS.key: (1, 4), ALTER_CONFIGS.key: (0, 2), INCREMENTAL_ALTER_CONFIGS.key: (0, 1),
    CREATE_PARTITIONS.key: (0, 3),
}

# a config resource's type (DescribeConfigs, AlterConfigs) -> the ACL resource it is authorized
# on, and the error that denies it: Kafka's ConfigResource.Type, brokers and their loggers and
# client metrics as the cluster
_CONFIG_RESOURCES = {2: (TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                     4: (CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                     8: (CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                     16: (CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                     32: (GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED)}

# Kafka's AclOperation codes, for the authorized-operations bit fields
_CODES = {Operation.READ: 3, Operation.WRITE: 4, Operation.CREATE: 5, Operation.DELETE: 6, Operation.ALTER: 7,
          Operation.DESCRIBE: 8, Operation.CLUSTER_ACTION: 9, Operation.DESCRIBE_CONFIGS: 10,
          Operation.ALTER_CONFIGS: 11, Operation.IDEMPOTENT_WRITE: 12}
_TOPIC_OPERATIONS = (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER,
                     Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS)
_CLUSTER_OPERATIONS = (Operation.CREATE, Operation.ALTER, Operation.DESCRIBE, Operation.CLUSTER_ACTION,
                       Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE)


class Refused(Exception):
    """A request the gateway does not relay for this client: its connection is closed."""


@dataclass
class Verdict:
    """What becomes of one request: `answer` (a whole framed answer) sent in its place, or
    `request` (a frame without its size: the same one, or what is left of it) relayed, its
    answer (a frame without its size) passed through `merge` if set. (A Produce with acks=0
    that is denied anything raises Refused instead: it has no answer to carry the errors.)"""

    request: bytes | None = None
    answer: bytes | None = None
    merge: Callable[[bytes], bytes] | None = None


class Authorization:
    """The decisions for one gateway: `acls` an AclStore (its current `authorizer` and
    `acls`), `names_by_id` the cluster's topic names by id, `want` asks the topic source
    to look again (a topic id not known yet)."""

    def __init__(self, acls, names_by_id: dict[uuid.UUID, str], want: Callable[[str], None] = lambda _: None):
        self.acls = acls
        self.names_by_id = names_by_id
        self.want = want
        self._apis = {PRODUCE.key: self._produce, FETCH.key: self._fetch, LIST_OFFSETS.key: self._list_offsets,
                      METADATA.key: self._metadata, OFFSET_FOR_LEADER_EPOCH.key: self._offset_for_leader_epoch,
                      FIND_COORDINATOR.key: self._find_coordinator, DESCRIBE_CLUSTER.key: self._describe_cluster,
                      CREATE_TOPICS.key: self._create_topics, DELETE_TOPICS.key: self._delete_topics,
                      INIT_PRODUCER_ID.key: self._init_producer_id,
                      ADD_PARTITIONS_TO_TXN.key: self._add_partitions_to_txn,
                      ADD_OFFSETS_TO_TXN.key: self._add_offsets_to_txn, END_TXN.key: self._end_txn,
                      DESCRIBE_CONFIGS.key: self._describe_configs, ALTER_CONFIGS.key: self._alter_configs,
                      INCREMENTAL_ALTER_CONFIGS.key: self._alter_configs,
                      CREATE_PARTITIONS.key: self._create_partitions}

    # -- decisions -----------------------------------------------------------------------

    def super_user(self, client) -> bool:
        return client.principal in self.acls.authorizer.super_users

    def allowed(self, client, operation: Operation, resource: ResourceType, name: str, count: bool = True) -> bool:
        """Whether the ACLs let `client` do `operation` on the resource; a denial counted
        (unless `count` is false: topics left out of an every-topic Metadata, as Kafka does)."""
        if self.acls.authorizer.allows(client.principal, client.host, operation, resource, name):
            return True
        if count:
            metrics.AUTHORIZATION_DENIALS.labels(resource.value, operation.value).inc()
        return False

    def transactional(self, client, operation: Operation, transactional_id: str) -> bool:
        """Whether the ACLs let `client` do `operation` (Write, Describe) on the TransactionalId;
        a denial counted."""
        return self.allowed(client, operation, TRANSACTIONAL_ID, transactional_id)

    def may_write_some_topic(self, client) -> bool:
        """Kafka 3.x's authorizeByResourceType(Write, Topic), which lets an idempotent producer
        without IdempotentWrite on the cluster have a producer id: some topic that `client`
        may Write on (a literal name, or a prefix taken as a name), allowed by an ACL naming it."""
        if self.super_user(client):
            return True
        authorizer = self.acls.authorizer
        for resource, entries in self.acls.acls.items():
            if resource.type is TOPIC and any(
                    a.permission is Permission.ALLOW and a.operation in (Operation.WRITE, Operation.ALL)
                    and a.principal in (client.principal, WILDCARD_PRINCIPAL) for a in entries) and \
                    authorizer.allows(client.principal, client.host, Operation.WRITE, TOPIC, resource.name):
                return True
        return False

    def operations(self, client, resource: ResourceType, name: str) -> int:
        """Kafka's authorized-operations bit field of `client` on the resource, from our ACLs."""
        wanted = _TOPIC_OPERATIONS if resource is TOPIC else _CLUSTER_OPERATIONS
        bits = 0
        for operation in wanted:
            if self.allowed(client, operation, resource, name, count=False):
                bits |= 1 << _CODES[operation]
        return bits

    def _topic(self, name: str | None, topic_id: uuid.UUID) -> str | None:
        """A topic's name, from its id when it is named by id (None: an id not known)."""
        if topic_id is None or topic_id == NO_ID:
            return name
        found = self.names_by_id.get(topic_id)
        if found is None:
            self.want("")
        return found

    # -- requests ------------------------------------------------------------------------

    def authorize(self, client, frame: bytes) -> Verdict:
        """The verdict on a request `frame` (without its size) from `client`. Raises Refused
        for an API or version not authorized here, or a request that does not read."""
        if len(frame) < 4:
            raise Refused("undecodable request")
        api_key, api_version = int.from_bytes(frame[:2], "big", signed=True), int.from_bytes(frame[2:4], "big")
        versions = AUTHORIZED.get(api_key)
        if versions is None or not versions[0] <= api_version <= versions[1]:
            raise Refused(f"API {api_key} v{api_version} is not authorized through the gateway")
        try:
            header, request = decode_request(frame, whole=False)
        except ProtocolError as exc:
            raise Refused(f"undecodable request: {exc}") from None
        return self._apis[api_key](client, frame, header, request)

    # Produce: Write on each topic
    def _produce(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        acks = request.acks
        if request.transactional_id is not None and not self.transactional(client, Operation.WRITE,
                                                                            request.transactional_id):
            denied = [(t, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for t in request.topic_data]
            kept = []
        else:
            kept, denied = [], []
            for topic in request.topic_data:
                name = self._topic(topic.name, topic.topic_id)
                if name is None:
                    denied.append((topic, ErrorCode.UNKNOWN_TOPIC_ID))
                elif self.allowed(client, Operation.WRITE, TOPIC, name):
                    kept.append(topic)
                else:
                    denied.append((topic, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        if not denied:
            return Verdict(request=frame)
        if acks == 0:  # no answer to carry the errors: a broker closes the connection
            raise Refused("Produce with acks=0 not authorized")
        errors = [m.TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=[
            m.PartitionProduceResponse(index=p.index, error_code=code, base_offset=-1, log_append_time_ms=-1,
                                       log_start_offset=-1) for p in t.partition_data]) for t, code in denied]
        return _partly(header, request, "topic_data", kept, m.ProduceResponse, "responses", errors)

    # Fetch: Read on each topic; made sessionless
    def _fetch(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        code = None
        if request.replica_id >= 0 and not self.allowed(client, Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED  # Kafka's answer to a follower without ClusterAction
        kept, denied = [], []
        for topic in request.topics:
            name = self._topic(topic.topic, topic.topic_id)
            if code is not None:
                denied.append((topic, code))
            elif name is None:
                denied.append((topic, ErrorCode.UNKNOWN_TOPIC_ID))
            elif self.allowed(client, Operation.READ, TOPIC, name):
                kept.append(topic)
            else:
                denied.append((topic, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        sessionless = request.session_id == 0 and request.session_epoch == -1
        if not denied:
            if sessionless:
                return Verdict(request=frame)
            patched = _sessionless(frame, header)
            if patched is not None:
                return Verdict(request=patched)
            request.session_id, request.session_epoch, request.forgotten_topics_data = 0, -1, []
            return Verdict(request=_request(header, request))
        errors = [m.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[
            m.FetchPartitionData(partition_index=p.partition, error_code=code, high_watermark=-1,
                                 last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None,
                                 preferred_read_replica=-1, records=b"") for p in t.partitions])
            for t, code in denied]
        request.session_id, request.session_epoch, request.forgotten_topics_data = 0, -1, []
        return _partly(header, request, "topics", kept, m.FetchResponse, "responses", errors)

    # ListOffsets: Describe on each topic
    def _list_offsets(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        kept, denied = _split(request.topics, lambda t: self.allowed(client, Operation.DESCRIBE, TOPIC, t.name))
        if not denied:
            return Verdict(request=frame)
        errors = [m.ListOffsetsTopicResponse(name=t.name, partitions=[
            m.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                           error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                           old_style_offsets=[], timestamp=-1, offset=-1, leader_epoch=-1)
            for p in t.partitions]) for t in denied]
        return _partly(header, request, "topics", kept, m.ListOffsetsResponse, "topics", errors)

    # OffsetForLeaderEpoch: Describe on each topic (a follower: ClusterAction on the cluster)
    def _offset_for_leader_epoch(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        if request.replica_id >= 0:
            follower = self.allowed(client, Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)
            kept, denied = (request.topics, []) if follower else ([], request.topics)
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        else:
            kept, denied = _split(request.topics,
                                  lambda t: self.allowed(client, Operation.DESCRIBE, TOPIC, t.topic))
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if not denied:
            return Verdict(request=frame)
        errors = [m.OffsetForLeaderTopicResult(topic=t.topic, partitions=[
            m.EpochEndOffset(error_code=code, partition=p.partition, leader_epoch=-1, end_offset=-1)
            for p in t.partitions]) for t in denied]
        return _partly(header, request, "topics", kept, m.OffsetForLeaderEpochResponse, "topics", errors)

    # Metadata: Describe per topic, Create for auto-creation; answers filtered
    def _metadata(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        version = header.api_version
        changed = False
        denied: list[str] = []
        if request.topics:  # named topics (null: every topic)
            kept = []
            for topic in request.topics:
                name = topic.name if topic.name is not None else self._topic(None, topic.topic_id)
                if name is None or self.allowed(client, Operation.DESCRIBE, TOPIC, name):
                    kept.append(topic)  # an unknown id: the broker answers it; the answer is filtered
                else:
                    denied.append(name)
            if denied:
                changed = True
                request.topics = kept  # v4+: an empty list asks for no topic (v0's asked for all)
            if request.allow_auto_topic_creation and not self.allowed(
                    client, Operation.CREATE, CLUSTER, CLUSTER_NAME, count=False):
                names = [t.name for t in request.topics if t.name]
                if not all(self.allowed(client, Operation.CREATE, TOPIC, n) for n in names):
                    request.allow_auto_topic_creation = False
                    changed = True
        topic_operations = version >= 8 and request.include_topic_authorized_operations
        cluster_operations = 8 <= version <= 10 and request.include_cluster_authorized_operations

        def merge(answer: Any) -> None:
            shown = []
            for topic in answer.topics:
                name = topic.name if topic.name is not None else self._topic(None, topic.topic_id)
                if name is None:
                    if topic.error_code != ErrorCode.NONE and not topic.partitions:
                        shown.append(topic)  # an error about an id: names nothing
                    continue
                if not self.allowed(client, Operation.DESCRIBE, TOPIC, name, count=False):
                    continue
                if topic_operations:
                    topic.topic_authorized_operations = self.operations(client, TOPIC, name)
                shown.append(topic)
            shown += [m.MetadataResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name,
                                              topic_id=NO_ID, is_internal=False, partitions=[],
                                              topic_authorized_operations=_UNKNOWN_OPERATIONS)
                      for name in denied]
            answer.topics = shown
            if cluster_operations:
                answer.cluster_authorized_operations = self.operations(client, CLUSTER, CLUSTER_NAME)
        return Verdict(request=_request(header, request) if changed else frame, merge=_merging(header, merge))

    # FindCoordinator for a transaction (key type 1): Describe on the TransactionalId
    def _find_coordinator(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        if request.key_type != 1:  # a group's is answered by groupkeeper; a share group's is refused
            raise Refused(f"FindCoordinator key type {request.key_type} is not authorized through the gateway")
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if header.api_version < 4:
            if self.transactional(client, Operation.DESCRIBE, request.key):
                return Verdict(request=frame)
            return Verdict(answer=encode_response(header, m.FindCoordinatorResponse(
                error_code=code, error_message=None, node_id=-1, host="", port=-1)))
        # v4+: each key decided on its own, as a broker does
        kept, denied = _split(request.coordinator_keys,
                              lambda key: self.transactional(client, Operation.DESCRIBE, key))
        if not denied:
            return Verdict(request=frame)
        errors = [m.Coordinator(key=key, node_id=-1, host="", port=-1, error_code=code, error_message=None)
                  for key in denied]
        if not kept:
            return Verdict(answer=encode_response(header, m.FindCoordinatorResponse(coordinators=errors)))
        request.coordinator_keys = kept

        def merge(answer: Any) -> None:
            answer.coordinators.extend(errors)
        return Verdict(request=_request(header, request), merge=_merging(header, merge))

    # DescribeCluster: Describe on the cluster
    def _describe_cluster(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        if not self.allowed(client, Operation.DESCRIBE, CLUSTER, CLUSTER_NAME):
            return Verdict(answer=encode_response(header, m.DescribeClusterResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=None,
                endpoint_type=request.endpoint_type, cluster_id="", controller_id=-1, brokers=[])))
        if not request.include_cluster_authorized_operations:
            return Verdict(request=frame)

        def merge(answer: Any) -> None:
            answer.cluster_authorized_operations = self.operations(client, CLUSTER, CLUSTER_NAME)
        return Verdict(request=frame, merge=_merging(header, merge))

    # CreateTopics: Create on the cluster or on the topic
    def _create_topics(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        on_cluster = self.allowed(client, Operation.CREATE, CLUSTER, CLUSTER_NAME, count=False)
        kept, denied = _split(request.topics, lambda t: on_cluster or self.allowed(
            client, Operation.CREATE, TOPIC, t.name))
        errors = [m.CreatableTopicResult(name=t.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                         error_message=_AUTHORIZATION_FAILED, num_partitions=-1,
                                         replication_factor=-1, configs=[])
                  for t in denied]
        if not kept:
            return Verdict(answer=encode_response(header, m.CreateTopicsResponse(topics=errors)))
        if denied:
            request.topics = kept
        version = header.api_version

        def merge(answer: Any) -> None:
            if version >= 5:  # the configs answered: DescribeConfigs on the topic
                for topic in answer.topics:
                    if topic.error_code == ErrorCode.NONE and not self.allowed(
                            client, Operation.DESCRIBE_CONFIGS, TOPIC, topic.name):
                        topic.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        topic.configs = []
            answer.topics.extend(errors)
        return Verdict(request=_request(header, request) if denied else frame, merge=_merging(header, merge))

    # DeleteTopics: Delete on each topic
    def _delete_topics(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        version = header.api_version
        errors = []
        if version >= 6:
            kept = []
            for topic in request.topics:
                name = self._topic(topic.name, topic.topic_id) if topic.name is None else topic.name
                if name is None:
                    errors.append(m.DeletableTopicResult(name=None, topic_id=topic.topic_id,
                                                         error_code=ErrorCode.UNKNOWN_TOPIC_ID))
                elif self.allowed(client, Operation.DELETE, TOPIC, name):
                    kept.append(topic)
                else:
                    errors.append(m.DeletableTopicResult(name=topic.name, topic_id=topic.topic_id,
                                                         error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            if errors:
                request.topics = kept
            left = bool(kept)
        else:
            kept, denied = _split(request.topic_names, lambda n: self.allowed(client, Operation.DELETE, TOPIC, n))
            errors = [m.DeletableTopicResult(name=n, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED) for n in denied]
            if denied:
                request.topic_names = kept
            left = bool(kept)
        if not errors:
            return Verdict(request=frame)
        if not left:
            return Verdict(answer=encode_response(header, m.DeleteTopicsResponse(responses=errors)))

        def merge(answer: Any) -> None:
            answer.responses.extend(errors)
        return Verdict(request=_request(header, request), merge=_merging(header, merge))

    # InitProducerId: Write on the TransactionalId, or IdempotentWrite on the cluster / Write on a topic
    def _init_producer_id(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        if request.transactional_id is not None:
            if self.transactional(client, Operation.WRITE, request.transactional_id):
                return Verdict(request=frame)
            code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            if (self.allowed(client, Operation.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME, count=False)
                    or self.may_write_some_topic(client)):
                return Verdict(request=frame)
            metrics.AUTHORIZATION_DENIALS.labels(CLUSTER.value, Operation.IDEMPOTENT_WRITE.value).inc()
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return Verdict(answer=encode_response(header, m.InitProducerIdResponse(
            error_code=code, producer_id=-1, producer_epoch=-1)))

    # AddPartitionsToTxn: Write on the TransactionalId and on each topic (v4+, brokers': ClusterAction)
    def _add_partitions_to_txn(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        if header.api_version >= 4:
            if self.allowed(client, Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
                return Verdict(request=frame)
            return Verdict(answer=encode_response(header, m.AddPartitionsToTxnResponse(
                error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)))
        topics = request.v3_and_below_topics
        if not self.transactional(client, Operation.WRITE, request.v3_and_below_transactional_id):
            codes = {t.name: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for t in topics}
        else:
            codes = {t.name: ErrorCode.TOPIC_AUTHORIZATION_FAILED for t in topics
                     if not self.allowed(client, Operation.WRITE, TOPIC, t.name)}
            if not codes:
                return Verdict(request=frame)
        # nothing is added when anything is denied: Kafka answers the rest OPERATION_NOT_ATTEMPTED
        return Verdict(answer=encode_response(header, m.AddPartitionsToTxnResponse(results_by_topic_v3_and_below=[
            m.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
                m.AddPartitionsToTxnPartitionResult(
                    partition_index=p, partition_error_code=codes.get(t.name, ErrorCode.OPERATION_NOT_ATTEMPTED))
                for p in t.partitions]) for t in topics])))

    # AddOffsetsToTxn: Write on the TransactionalId, Read on the group
    def _add_offsets_to_txn(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        if not self.transactional(client, Operation.WRITE, request.transactional_id):
            code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not self.allowed(client, Operation.READ, GROUP, request.group_id):
            code = ErrorCode.GROUP_AUTHORIZATION_FAILED
        else:
            return Verdict(request=frame)
        return Verdict(answer=encode_response(header, m.AddOffsetsToTxnResponse(error_code=code)))

    # EndTxn: Write on the TransactionalId
    def _end_txn(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        if self.transactional(client, Operation.WRITE, request.transactional_id):
            return Verdict(request=frame)
        return Verdict(answer=encode_response(header, m.EndTxnResponse(
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)))

    def _config_resources(self, client, resources: list, operation: Operation) -> tuple[list, list]:
        """(allowed resources, [(denied resource, error)]) of a configs request."""
        kept, denied = [], []
        for resource in resources:
            found = _CONFIG_RESOURCES.get(resource.resource_type)
            if found is None:
                denied.append((resource, ErrorCode.INVALID_REQUEST))
                continue
            kind, code = found
            name = CLUSTER_NAME if kind is CLUSTER else resource.resource_name
            if self.allowed(client, operation, kind, name):
                kept.append(resource)
            else:
                denied.append((resource, code))
        return kept, denied

    # DescribeConfigs: DescribeConfigs on each resource
    def _describe_configs(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        kept, denied = self._config_resources(client, request.resources, Operation.DESCRIBE_CONFIGS)
        if not denied:
            return Verdict(request=frame)
        errors = [m.DescribeConfigsResult(error_code=code, error_message=None, resource_type=r.resource_type,
                                          resource_name=r.resource_name, configs=[]) for r, code in denied]
        return _partly(header, request, "resources", kept, m.DescribeConfigsResponse, "results", errors)

    # AlterConfigs, IncrementalAlterConfigs: AlterConfigs on each resource
    def _alter_configs(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        kept, denied = self._config_resources(client, request.resources, Operation.ALTER_CONFIGS)
        if not denied:
            return Verdict(request=frame)
        incremental = header.api_key == INCREMENTAL_ALTER_CONFIGS.key
        result = m.IncrementalAlterConfigsResourceResponse if incremental else m.AlterConfigsResourceResponse
        errors = [result(error_code=code, error_message=None, resource_type=r.resource_type,
                         resource_name=r.resource_name) for r, code in denied]
        response = m.IncrementalAlterConfigsResponse if incremental else m.AlterConfigsResponse
        return _partly(header, request, "resources", kept, response, "responses", errors)

    # CreatePartitions: Alter on each topic
    def _create_partitions(self, client, frame: bytes, header: RequestHeader, request: Any) -> Verdict:
        kept, denied = _split(request.topics, lambda t: self.allowed(client, Operation.ALTER, TOPIC, t.name))
        if not denied:
            return Verdict(request=frame)
        errors = [m.CreatePartitionsTopicResult(name=t.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                error_message=None) for t in denied]
        return _partly(header, request, "topics", kept, m.CreatePartitionsResponse, "results", errors)


def _split(items: list, allowed: Callable[[Any], bool]) -> tuple[list, list]:
    kept, denied = [], []
    for item in items:
        (kept if allowed(item) else denied).append(item)
    return kept, denied


def _partly(header: RequestHeader, request: Any, kept_field: str, kept: list, response: type, errors_field: str,
            errors: list) -> Verdict:
    """A request some of whose entries are denied (`errors`, as its answer's entries): answered
    here, a `response` of the errors alone, when none is left; else sent on with only `kept`
    (as its `kept_field`), the errors added to the broker's answer's `errors_field`."""
    if not kept:
        return Verdict(answer=encode_response(header, response(**{errors_field: errors})))
    setattr(request, kept_field, kept)

    def merge(answer: Any) -> None:
        getattr(answer, errors_field).extend(errors)
    return Verdict(request=_request(header, request), merge=_merging(header, merge))


def _request(header: RequestHeader, body: Any) -> bytes:
    """`body` encoded again as the request of `header` (no size prefix)."""
    return encode_request(header, body)[4:]


def _merging(header: RequestHeader, change: Callable[[Any], None]) -> Callable[[bytes], bytes]:
    """An answer-frame transformation (no size prefix in or out): decoded, `change`d in
    place, encoded again. Anything that goes wrong is an answer that does not read."""
    api_key, api_version = header.api_key, header.api_version

    def merge(frame: bytes) -> bytes:
        try:
            correlation_id, answer, _ = decode_broker_response(api_key, api_version, frame)  # as clients read it
            change(answer)
            return encode_response(RequestHeader(api_key, api_version, correlation_id, None), answer)[4:]
        except ProtocolError:
            raise
        except Exception as exc:  # noqa: BLE001 - a broker's answer we cannot merge into
            raise DecodeError(f"cannot merge the gateway's authorization errors: {exc!r}") from None
    return merge


def _sessionless(frame: bytes, header: RequestHeader) -> bytes | None:
    """A Fetch v7-14 frame with its session id 0 and epoch -1 (KIP-227: a full fetch that
    makes no session), patched in place: the body begins with replica_id, max_wait_ms,
    min_bytes, max_bytes, isolation_level, session_id, session_epoch. None: a header with
    tagged fields, where the body does not begin at a known place."""
    p = 10 + (len(header.client_id.encode()) if header.client_id is not None else 0)
    if header.api_version >= 12:  # request header v2: its tagged fields
        if frame[p] != 0:
            return None  # header tagged fields (none that Kafka declares): encoded again instead
        p += 1
    p += 17
    return frame[:p] + b"\x00\x00\x00\x00\xff\xff\xff\xff" + frame[p + 8:]
