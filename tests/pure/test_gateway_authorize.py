"""The gateway's authorization of relayed requests (coordinator/gateway/authorize.py), pure:
request frames in as a client writes them, verdicts out: relayed as they are, relayed with
the denied parts removed and their errors merged into the broker's answer, or answered here
as a broker answers a denial. Answers are read back with kafka-python's classes too."""

from __future__ import annotations

import uuid

import pytest

from coordinator.gateway.authorize import AUTHORIZED, Authorization, Refused
from coordinator.gateway.cluster import GatewayClusterApi
from coordinator.listeners import Listener
from coordinator.security.acls.authorizer import Acl, Authorizer, Operation, PatternType, Permission, Resource, ResourceType
from coordinator.security.client import Client
from protocol import ErrorCode as E, RequestHeader, decode_request, decode_response, encode_request, encode_response
from protocol.messages import build
from protocol.schemas import (ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, ALTER_CONFIGS, APIS, CREATE_PARTITIONS,
                              CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CLUSTER, DESCRIBE_CONFIGS, END_TXN, FETCH,
                              FIND_COORDINATOR, INCREMENTAL_ALTER_CONFIGS, INIT_PRODUCER_ID, LIST_OFFSETS, METADATA,
                              OFFSET_FOR_LEADER_EPOCH, PRODUCE)
from tools.bench.kafka_python import reference_class

LISTENER = Listener("CLIENTS", "SASL_PLAINTEXT", "127.0.0.1", 9092)
ALICE, ROOT, NOBODY = (Client("10.0.0.1", LISTENER, p) for p in ("User:alice", "User:root", "User:nobody"))
TOPIC_A, TOPIC_B = "a", "b"
A_ID, B_ID = uuid.uuid4(), uuid.uuid4()


def allow(principal, operation, rtype, name, pattern=PatternType.LITERAL):
    return Resource(rtype, name, pattern), Acl(principal, "*", operation, Permission.ALLOW)


class Store:
    """What the gateway reads of an AclStore: `acls` and the `authorizer` over them."""

    def __init__(self, *entries):
        self.acls = {}
        for resource, acl in entries:
            self.acls[resource] = self.acls.get(resource, frozenset()) | {acl}
        self.authorizer = Authorizer(self.acls, frozenset({"User:root"}))


ACLS = Store(
    allow("User:alice", Operation.WRITE, ResourceType.TOPIC, TOPIC_A),
    allow("User:alice", Operation.READ, ResourceType.TOPIC, TOPIC_A),
    allow("User:alice", Operation.CREATE, ResourceType.TOPIC, "alice-", PatternType.PREFIXED),
    allow("User:alice", Operation.DELETE, ResourceType.TOPIC, "alice-", PatternType.PREFIXED),
    allow("User:bob", Operation.READ, ResourceType.TOPIC, TOPIC_B),
    allow("User:alice", Operation.READ, ResourceType.GROUP, "g"),
    allow("User:alice", Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, TOPIC_A),
    allow("User:alice", Operation.ALTER, ResourceType.TOPIC, TOPIC_A),
    allow("User:alice", Operation.WRITE, ResourceType.TRANSACTIONAL_ID, "alice-tx"),
    allow("User:alice", Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, "peek-", PatternType.PREFIXED),
)


@pytest.fixture
def gate():
    wanted = []
    authorization = Authorization(ACLS, {A_ID: TOPIC_A, B_ID: TOPIC_B}, wanted.append)
    authorization.wanted = wanted
    return authorization


def request(api, version, values, correlation_id=7):
    header = RequestHeader(api.key, version, correlation_id, "client")
    return encode_request(header, build(api.request.struct, values))[4:]


def relayed(frame):
    return decode_request(frame)[1]


def answer_of(api, version, values, correlation_id=7):
    """A broker's answer (a frame without its size, as a relay reads it)."""
    return encode_response(RequestHeader(api.key, version, correlation_id, None), build(api.response.struct, values))[4:]


def read(api, version, framed_or_not, sized=True):
    body = framed_or_not[4:] if sized else framed_or_not
    correlation_id, answer = decode_response(api.key, version, body)
    assert correlation_id == 7
    return answer


def kafka_python_reads(api, version, frame_without_size):
    """kafka-python's class reads the body the same way (an independent check)."""
    header_size = 5 if version in api.response.flexible else 4
    return reference_class(api.response).decode(frame_without_size[header_size:], version=version)


def produce(version=9, acks=-1, transactional_id=None, topics=(TOPIC_A, TOPIC_B)):
    return request(PRODUCE, version, {"transactional_id": transactional_id, "acks": acks, "timeout_ms": 1000,
                                      "topic_data": [{"name": t, "partition_data": [
                                          {"index": 0, "records": b"r" * 10}, {"index": 1, "records": None}]}
                                          for t in topics]})


# -- Produce ---------------------------------------------------------------------------------

def test_a_produce_to_topics_the_client_may_write_passes_as_its_bytes(gate):
    frame = produce(topics=(TOPIC_A,))
    assert gate.authorize(ALICE, frame).request is frame


def test_a_produce_partly_denied_relays_the_rest_and_merges_topic_authorization_failed(gate):
    verdict = gate.authorize(ALICE, produce())
    assert [t.name for t in relayed(verdict.request).topic_data] == [TOPIC_A]
    assert relayed(verdict.request).topic_data[0].partition_data[0].records == b"r" * 10
    broker = answer_of(PRODUCE, 9, {"responses": [{"name": TOPIC_A, "partition_responses": [
        {"index": 0, "base_offset": 42}, {"index": 1, "base_offset": 7}]}]})
    merged = verdict.merge(broker)
    answer = read(PRODUCE, 9, merged, sized=False)
    codes = {(t.name, p.index): p.error_code for t in answer.responses for p in t.partition_responses}
    assert codes == {("a", 0): 0, ("a", 1): 0, ("b", 0): E.TOPIC_AUTHORIZATION_FAILED,
                     ("b", 1): E.TOPIC_AUTHORIZATION_FAILED}
    theirs = kafka_python_reads(PRODUCE, 9, merged)
    assert [t.name for t in theirs.responses] == ["a", "b"]


def test_a_produce_wholly_denied_is_answered_here_and_with_acks_0_closes(gate):
    verdict = gate.authorize(NOBODY, produce(version=7))
    assert verdict.request is None
    answer = read(PRODUCE, 7, verdict.answer)
    assert {p.error_code for t in answer.responses for p in t.partition_responses} == {E.TOPIC_AUTHORIZATION_FAILED}
    assert all(p.base_offset == -1 for t in answer.responses for p in t.partition_responses)
    with pytest.raises(Refused):
        gate.authorize(ALICE, produce(acks=0))


def test_a_transactional_produce_needs_write_on_the_transactional_id(gate):
    verdict = gate.authorize(ALICE, produce(transactional_id="tx", topics=(TOPIC_A,)))
    answer = read(PRODUCE, 9, verdict.answer)
    assert answer.responses[0].partition_responses[0].error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    frame = produce(transactional_id="tx")
    assert gate.authorize(ROOT, frame).request is frame
    frame = produce(transactional_id="alice-tx", topics=(TOPIC_A,))
    assert gate.authorize(ALICE, frame).request is frame
    verdict = gate.authorize(ALICE, produce(transactional_id="alice-tx"))  # topic b: still Write on it
    assert [t.name for t in relayed(verdict.request).topic_data] == [TOPIC_A]
    answer = read(PRODUCE, 9, gate.authorize(ALICE, produce(transactional_id="peek-1", topics=(TOPIC_A,))).answer)
    assert answer.responses[0].partition_responses[0].error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_a_produce_naming_topics_by_id_is_decided_on_their_names(gate):
    frame = request(PRODUCE, 13, {"acks": 1, "timeout_ms": 1, "topic_data": [
        {"topic_id": A_ID, "partition_data": [{"index": 0, "records": b"x"}]},
        {"topic_id": uuid.uuid4(), "partition_data": [{"index": 0, "records": b"y"}]}]})
    verdict = gate.authorize(ALICE, frame)
    assert [t.topic_id for t in relayed(verdict.request).topic_data] == [A_ID]
    merged = read(PRODUCE, 13, verdict.merge(answer_of(PRODUCE, 13, {"responses": []})), sized=False)
    assert merged.responses[0].partition_responses[0].error_code == E.UNKNOWN_TOPIC_ID
    assert gate.wanted  # the topic source asked to look again


# -- Fetch -----------------------------------------------------------------------------------

def fetch(version=12, topics=(TOPIC_A, TOPIC_B), replica_id=-1, session=(0, 0)):
    return request(FETCH, version, {"replica_id": replica_id, "max_wait_ms": 500, "min_bytes": 1,
                                    "session_id": session[0], "session_epoch": session[1],
                                    "topics": [{"topic": t, "partitions": [{"partition": 0, "fetch_offset": 5,
                                                                            "partition_max_bytes": 100}]}
                                               for t in topics]})


@pytest.mark.parametrize("version", [4, 7, 11, 12, 14])
def test_a_fetch_allowed_is_made_sessionless_and_otherwise_untouched(gate, version):
    topics = (TOPIC_A,) if version < 13 else ()
    frame = fetch(version, topics=topics, session=(0, 0))
    verdict = gate.authorize(ALICE, frame)
    body = relayed(verdict.request)
    assert (body.session_id, body.session_epoch) == (0, -1)
    expected = relayed(frame)
    expected.session_epoch = -1
    assert body == expected
    sessionless = fetch(version, topics=topics, session=(0, -1))
    assert gate.authorize(ALICE, sessionless).request is sessionless


def test_a_fetch_of_a_topic_the_client_may_not_read_is_topic_authorization_failed(gate):
    verdict = gate.authorize(ALICE, fetch())
    assert [t.topic for t in relayed(verdict.request).topics] == [TOPIC_A]
    broker = answer_of(FETCH, 12, {"responses": [{"topic": TOPIC_A, "partitions": [
        {"partition_index": 0, "high_watermark": 9, "records": b"batch"}]}]})
    answer = read(FETCH, 12, verdict.merge(broker), sized=False)
    assert [(t.topic, t.partitions[0].error_code) for t in answer.responses] == [
        (TOPIC_A, 0), (TOPIC_B, E.TOPIC_AUTHORIZATION_FAILED)]
    assert answer.responses[0].partitions[0].records == b"batch"
    assert answer.responses[1].partitions[0].high_watermark == -1
    wholly = read(FETCH, 12, gate.authorize(NOBODY, fetch()).answer)
    assert {t.partitions[0].error_code for t in wholly.responses} == {E.TOPIC_AUTHORIZATION_FAILED}


def test_a_follower_fetch_needs_cluster_action(gate):
    answer = read(FETCH, 11, gate.authorize(ALICE, fetch(11, topics=(TOPIC_A,), replica_id=1)).answer)
    assert answer.responses[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED


# -- ListOffsets, OffsetForLeaderEpoch -----------------------------------------------------

def test_list_offsets_and_offset_for_leader_epoch_need_describe(gate):
    frame = request(LIST_OFFSETS, 7, {"topics": [{"name": t, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                                                 for t in (TOPIC_A, TOPIC_B)]})
    verdict = gate.authorize(ALICE, frame)  # Read or Write implies Describe
    assert [t.name for t in relayed(verdict.request).topics] == [TOPIC_A]
    answer = read(LIST_OFFSETS, 7, verdict.merge(answer_of(LIST_OFFSETS, 7, {"topics": []})), sized=False)
    assert answer.topics[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert answer.topics[0].partitions[0].offset == -1
    frame = request(OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
        {"topic": TOPIC_B, "partitions": [{"partition": 0, "leader_epoch": 3}]}]})
    answer = read(OFFSET_FOR_LEADER_EPOCH, 4, gate.authorize(ALICE, frame).answer)
    assert answer.topics[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    frame = request(OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": 2, "topics": [
        {"topic": TOPIC_A, "partitions": [{"partition": 0, "leader_epoch": 3}]}]})
    answer = read(OFFSET_FOR_LEADER_EPOCH, 4, gate.authorize(ALICE, frame).answer)
    assert answer.topics[0].partitions[0].error_code == E.CLUSTER_AUTHORIZATION_FAILED


# -- Metadata --------------------------------------------------------------------------------

def metadata_answer(version, names):
    return answer_of(METADATA, version, {"brokers": [{"node_id": 1, "host": "b", "port": 1}], "topics": [
        {"name": n, "partitions": [{"partition_index": 0, "leader_id": 1}], "topic_authorized_operations": 1}
        for n in names]})


@pytest.mark.parametrize("version", [4, 9, 12])
def test_metadata_of_every_topic_lists_only_what_the_client_may_describe(gate, version):
    frame = request(METADATA, version, {"topics": None, "allow_auto_topic_creation": True})
    verdict = gate.authorize(ALICE, frame)
    assert verdict.request is frame
    answer = read(METADATA, version, verdict.merge(metadata_answer(version, ["a", "b", "c"])), sized=False)
    assert [t.name for t in answer.topics] == ["a"]
    assert [b.node_id for b in answer.brokers] == [1]


def test_metadata_of_a_named_topic_the_client_may_not_describe_is_topic_authorization_failed(gate):
    frame = request(METADATA, 9, {"topics": [{"name": "a"}, {"name": "b"}], "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": True})
    verdict = gate.authorize(ALICE, frame)
    assert [t.name for t in relayed(verdict.request).topics] == ["a"]
    merged = verdict.merge(metadata_answer(9, ["a"]))
    answer = read(METADATA, 9, merged, sized=False)
    assert [(t.name, t.error_code) for t in answer.topics] == [("a", 0), ("b", E.TOPIC_AUTHORIZATION_FAILED)]
    # Read, Write, Alter, DescribeConfigs and the Describe they imply, from our ACLs (Kafka's
    # AclOperation codes 3, 4, 7, 10, 8), not the broker's view of the gateway
    assert answer.topics[0].topic_authorized_operations == sum(1 << c for c in (3, 4, 7, 8, 10))
    assert [t.name for t in kafka_python_reads(METADATA, 9, merged).topics] == ["a", "b"]


def test_metadata_auto_creation_only_with_create(gate):
    frame = request(METADATA, 9, {"topics": [{"name": "a"}], "allow_auto_topic_creation": True})
    assert relayed(gate.authorize(ALICE, frame).request).allow_auto_topic_creation is False
    frame = request(METADATA, 9, {"topics": [{"name": "alice-new"}], "allow_auto_topic_creation": True})
    assert gate.authorize(ALICE, frame).request is frame  # Create on the topic (prefixed), which implies nothing
    assert gate.authorize(ROOT, frame).request is frame


def test_a_request_is_read_as_a_broker_reads_it_what_follows_its_fields_ignored(gate):
    # librdkafka's Metadata v12 for every topic: 3 zero bytes after its null topic array
    frame = bytes.fromhex("0003000c00000007000772646b61666b610000000000010000")
    verdict = gate.authorize(ALICE, frame)
    assert verdict.request is frame
    answer = read(METADATA, 12, verdict.merge(metadata_answer(12, ["a", "b"])), sized=False)
    assert [t.name for t in answer.topics] == ["a"]


def test_metadata_before_v4_cannot_turn_auto_creation_off_and_is_not_authorized(gate):
    with pytest.raises(Refused):
        gate.authorize(ALICE, request(METADATA, 3, {"topics": [{"name": "a"}]}))


# -- admin and producer set-up ---------------------------------------------------------------

def test_create_topics_needs_create_on_the_cluster_or_the_topic(gate):
    frame = request(CREATE_TOPICS, 7, {"topics": [
        {"name": n, "num_partitions": 1, "replication_factor": 1} for n in ("alice-1", "other")]})
    verdict = gate.authorize(ALICE, frame)
    assert [t.name for t in relayed(verdict.request).topics] == ["alice-1"]
    broker = answer_of(CREATE_TOPICS, 7, {"topics": [{"name": "alice-1", "num_partitions": 1, "configs": [
        {"name": "retention.ms", "value": "1"}]}]})
    merged = verdict.merge(broker)
    answer = read(CREATE_TOPICS, 7, merged, sized=False)
    assert [(t.name, t.error_code) for t in answer.topics] == [("alice-1", 0), ("other", E.TOPIC_AUTHORIZATION_FAILED)]
    # no DescribeConfigs on alice-1: its configs are not shown
    assert answer.topics[0].topic_config_error_code == E.TOPIC_AUTHORIZATION_FAILED and answer.topics[0].configs == []
    assert len(kafka_python_reads(CREATE_TOPICS, 7, merged).topics) == 2
    answer = read(CREATE_TOPICS, 4, gate.authorize(NOBODY, request(CREATE_TOPICS, 4, {"topics": [
        {"name": "x", "num_partitions": 1, "replication_factor": 1}]})).answer)
    assert answer.topics[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert gate.authorize(ROOT, frame).request is frame


@pytest.mark.parametrize("version", [1, 5, 6])
def test_delete_topics_needs_delete(gate, version):
    if version < 6:
        frame = request(DELETE_TOPICS, version, {"topic_names": ["alice-1", "a"], "timeout_ms": 1})
    else:
        frame = request(DELETE_TOPICS, version, {"topics": [{"name": "alice-1"}, {"name": None, "topic_id": A_ID}],
                                                 "timeout_ms": 1})
    verdict = gate.authorize(ALICE, frame)
    body = relayed(verdict.request)
    assert (body.topic_names if version < 6 else [t.name for t in body.topics]) == ["alice-1"]
    answer = read(DELETE_TOPICS, version, verdict.merge(answer_of(DELETE_TOPICS, version, {"responses": [
        {"name": "alice-1"}]})), sized=False)
    assert [r.error_code for r in answer.responses] == [0, E.TOPIC_AUTHORIZATION_FAILED]


def test_init_producer_id_idempotent_needs_a_topic_to_write_or_idempotent_write(gate):
    frame = request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 1})
    assert gate.authorize(ALICE, frame).request is frame  # Write on topic a
    answer = read(INIT_PRODUCER_ID, 4, gate.authorize(NOBODY, frame).answer)
    assert (answer.error_code, answer.producer_id) == (E.CLUSTER_AUTHORIZATION_FAILED, -1)
    transactional = request(INIT_PRODUCER_ID, 4, {"transactional_id": "tx", "transaction_timeout_ms": 1})
    answer = read(INIT_PRODUCER_ID, 4, gate.authorize(ALICE, transactional).answer)
    assert answer.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert gate.authorize(ROOT, transactional).request is transactional
    alices = request(INIT_PRODUCER_ID, 4, {"transactional_id": "alice-tx", "transaction_timeout_ms": 1})
    assert gate.authorize(ALICE, alices).request is alices
    answer = read(INIT_PRODUCER_ID, 4, gate.authorize(NOBODY, alices).answer)
    assert answer.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    peek = request(INIT_PRODUCER_ID, 4, {"transactional_id": "peek-1", "transaction_timeout_ms": 1})
    answer = read(INIT_PRODUCER_ID, 4, gate.authorize(ALICE, peek).answer)  # Describe does not imply Write
    assert answer.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_describe_cluster_and_a_transactions_coordinator(gate):
    answer = read(DESCRIBE_CLUSTER, 1, gate.authorize(ALICE, request(DESCRIBE_CLUSTER, 1, {})).answer)
    assert answer.error_code == E.CLUSTER_AUTHORIZATION_FAILED and answer.brokers == []
    frame = request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["t1", "t2"]})
    answer = read(FIND_COORDINATOR, 4, gate.authorize(ALICE, frame).answer)
    assert [(c.key, c.error_code) for c in answer.coordinators] == [
        ("t1", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), ("t2", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]
    assert gate.authorize(ROOT, frame).request is frame


@pytest.mark.parametrize("version", [1, 3])
def test_find_coordinator_for_a_transactional_id_needs_describe_on_it(gate, version):
    for key in ("alice-tx", "peek-1"):  # Describe implied by Write; given by a prefix
        frame = request(FIND_COORDINATOR, version, {"key": key, "key_type": 1})
        assert gate.authorize(ALICE, frame).request is frame
    answer = read(FIND_COORDINATOR, version, gate.authorize(ALICE, request(
        FIND_COORDINATOR, version, {"key": "bobs-tx", "key_type": 1})).answer)
    assert (answer.error_code, answer.node_id) == (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)


def test_find_coordinator_v4_decides_each_transactional_id(gate):
    frame = request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["alice-tx", "peek-1"]})
    assert gate.authorize(ALICE, frame).request is frame
    verdict = gate.authorize(ALICE, request(FIND_COORDINATOR, 4, {"key_type": 1,
                                                                   "coordinator_keys": ["bobs-tx", "alice-tx"]}))
    assert relayed(verdict.request).coordinator_keys == ["alice-tx"]
    merged = verdict.merge(answer_of(FIND_COORDINATOR, 4, {"coordinators": [
        {"key": "alice-tx", "node_id": 1, "host": "broker", "port": 9092}]}))
    answer = read(FIND_COORDINATOR, 4, merged, sized=False)
    assert [(c.key, c.node_id, c.error_code) for c in answer.coordinators] == [
        ("alice-tx", 1, 0), ("bobs-tx", -1, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]
    assert [c.key for c in kafka_python_reads(FIND_COORDINATOR, 4, merged).coordinators] == ["alice-tx", "bobs-tx"]


# -- transactions and configs ---------------------------------------------------------------

def test_the_transaction_apis_need_the_transactional_id_and_their_topics_and_group(gate):
    frame = request(ADD_PARTITIONS_TO_TXN, 3, {"v3_and_below_transactional_id": "tx", "v3_and_below_topics": [
        {"name": TOPIC_A, "partitions": [0, 1]}, {"name": TOPIC_B, "partitions": [0]}]})
    answer = read(ADD_PARTITIONS_TO_TXN, 3, gate.authorize(ALICE, frame).answer)
    assert {r.partition_error_code for t in answer.results_by_topic_v3_and_below for r in t.results_by_partition} == {
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    assert gate.authorize(ROOT, frame).request is frame
    answer = read(ADD_PARTITIONS_TO_TXN, 4, gate.authorize(ALICE, request(ADD_PARTITIONS_TO_TXN, 4, {})).answer)
    assert answer.error_code == E.CLUSTER_AUTHORIZATION_FAILED  # v4+ is the brokers'
    for api, values in ((ADD_OFFSETS_TO_TXN, {"transactional_id": "tx", "group_id": "g"}),
                        (END_TXN, {"transactional_id": "tx", "committed": True})):
        frame = request(api, 3, values)
        assert read(api, 3, gate.authorize(ALICE, frame).answer).error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert gate.authorize(ROOT, frame).request is frame


def test_the_transaction_apis_with_write_on_the_transactional_id(gate):
    frame = request(ADD_PARTITIONS_TO_TXN, 3, {"v3_and_below_transactional_id": "alice-tx", "v3_and_below_topics": [
        {"name": TOPIC_A, "partitions": [0, 1]}]})
    assert gate.authorize(ALICE, frame).request is frame
    answer = read(ADD_PARTITIONS_TO_TXN, 3, gate.authorize(NOBODY, frame).answer)
    assert {r.partition_error_code for t in answer.results_by_topic_v3_and_below for r in t.results_by_partition} == {
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    frame = request(ADD_PARTITIONS_TO_TXN, 3, {"v3_and_below_transactional_id": "alice-tx", "v3_and_below_topics": [
        {"name": TOPIC_A, "partitions": [0]}, {"name": TOPIC_B, "partitions": [0]}]})
    answer = read(ADD_PARTITIONS_TO_TXN, 3, gate.authorize(ALICE, frame).answer)
    assert [(t.name, t.results_by_partition[0].partition_error_code) for t in answer.results_by_topic_v3_and_below] == [
        (TOPIC_A, E.OPERATION_NOT_ATTEMPTED), (TOPIC_B, E.TOPIC_AUTHORIZATION_FAILED)]
    frame = request(ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "alice-tx", "group_id": "g"})
    assert gate.authorize(ALICE, frame).request is frame
    answer = read(ADD_OFFSETS_TO_TXN, 3, gate.authorize(ALICE, request(
        ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "alice-tx", "group_id": "other"})).answer)
    assert answer.error_code == E.GROUP_AUTHORIZATION_FAILED
    frame = request(END_TXN, 3, {"transactional_id": "alice-tx", "committed": True})
    assert gate.authorize(ALICE, frame).request is frame
    assert read(END_TXN, 3, gate.authorize(NOBODY, frame).answer).error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    peek = request(END_TXN, 3, {"transactional_id": "peek-1", "committed": True})
    assert read(END_TXN, 3, gate.authorize(ALICE, peek).answer).error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_a_topic_denied_in_add_partitions_to_txn_leaves_the_rest_not_attempted():
    store = Store(allow("User:root", Operation.WRITE, ResourceType.TOPIC, TOPIC_A),
                  allow("User:root", Operation.WRITE, ResourceType.TRANSACTIONAL_ID, "tx"))
    store.authorizer = Authorizer(store.acls)  # nobody super: root's ACLs decide
    gate = Authorization(store, {})
    frame = request(ADD_PARTITIONS_TO_TXN, 2, {"v3_and_below_transactional_id": "tx", "v3_and_below_topics": [
        {"name": TOPIC_A, "partitions": [0]}, {"name": TOPIC_B, "partitions": [0]}]})
    answer = read(ADD_PARTITIONS_TO_TXN, 2, gate.authorize(ROOT, frame).answer)
    assert [(t.name, t.results_by_partition[0].partition_error_code) for t in answer.results_by_topic_v3_and_below] == [
        (TOPIC_A, E.OPERATION_NOT_ATTEMPTED), (TOPIC_B, E.TOPIC_AUTHORIZATION_FAILED)]


@pytest.mark.parametrize("api,version", [(DESCRIBE_CONFIGS, 4), (DESCRIBE_CONFIGS, 1), (ALTER_CONFIGS, 2),
                                         (INCREMENTAL_ALTER_CONFIGS, 1)])
def test_configs_are_authorized_per_resource(gate, api, version):
    resources = [{"resource_type": 2, "resource_name": TOPIC_A}, {"resource_type": 2, "resource_name": TOPIC_B},
                 {"resource_type": 4, "resource_name": "1"}, {"resource_type": 32, "resource_name": "g"}]
    verdict = gate.authorize(ALICE, request(api, version, {"resources": resources}))
    # DescribeConfigs on a: given; AlterConfigs on a: not (DescribeConfigs does not imply it)
    describe = api is DESCRIBE_CONFIGS
    if describe:
        assert [r.resource_name for r in relayed(verdict.request).resources] == [TOPIC_A]
        answer = read(api, version, verdict.merge(answer_of(api, version, {"results": [
            {"resource_type": 2, "resource_name": TOPIC_A}]})), sized=False)
        results = answer.results
    else:
        results = read(api, version, verdict.answer).responses
    assert [(r.resource_name, r.error_code) for r in results] == ([(TOPIC_A, 0)] if describe else [
        (TOPIC_A, E.TOPIC_AUTHORIZATION_FAILED)]) + [
        (TOPIC_B, E.TOPIC_AUTHORIZATION_FAILED), ("1", E.CLUSTER_AUTHORIZATION_FAILED),
        ("g", E.GROUP_AUTHORIZATION_FAILED)]


def test_create_partitions_needs_alter(gate):
    frame = request(CREATE_PARTITIONS, 3, {"topics": [{"name": t, "count": 4, "assignments": None}
                                                      for t in (TOPIC_A, TOPIC_B)]})
    verdict = gate.authorize(ALICE, frame)
    assert [t.name for t in relayed(verdict.request).topics] == [TOPIC_A]
    answer = read(CREATE_PARTITIONS, 3, verdict.merge(answer_of(CREATE_PARTITIONS, 3, {"results": [
        {"name": TOPIC_A}]})), sized=False)
    assert [(r.name, r.error_code) for r in answer.results] == [(TOPIC_A, 0), (TOPIC_B, E.TOPIC_AUTHORIZATION_FAILED)]


def test_what_is_not_authorized_here_is_refused(gate):
    with pytest.raises(Refused):  # DeleteRecords: not mapped
        gate.authorize(ROOT, b"\x00\x15\x00\x01\x00\x00\x00\x07\xff\xff")
    with pytest.raises(Refused):  # Fetch v15: a follower's replica_state is a tagged field
        gate.authorize(ALICE, b"\x00\x01\x00\x0f\x00\x00\x00\x07\xff\xff\x00")
    with pytest.raises(Refused):
        gate.authorize(ALICE, produce()[:20])


def test_with_acls_the_gateway_advertises_only_what_it_authorizes():
    broker = {0: (3, 11), 1: (4, 17), 2: (0, 9), 3: (0, 12), 10: (0, 6), 19: (2, 7), 20: (1, 6), 22: (0, 5),
              24: (0, 4), 26: (0, 3), 32: (0, 4), 60: (0, 2), 11: (0, 9), 21: (0, 2), 29: (0, 3), 35: (0, 4)}
    api = object.__new__(GatewayClusterApi)
    api.authorization = object()
    advertised = api.advertised(broker)
    assert not {21, 29, 35} & set(advertised)  # DeleteRecords, DescribeAcls, DescribeLogDirs: not authorized
    assert advertised[24] == (0, 4) and advertised[26] == (0, 3) and advertised[32] == (1, 4)
    assert advertised[1] == (4, 14) and advertised[0] == (3, 11) and advertised[3] == (4, 12)
    assert advertised[19] == (2, 7) and advertised[22] == (0, 5) and advertised[2] == (0, 9)
    assert advertised[11] == GatewayClusterApi.advertised(object.__new__(GatewayClusterApi), broker)[11]
    assert set(AUTHORIZED) <= set(APIS)
