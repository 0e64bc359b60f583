"""The gateway's rewriting of answers that name brokers (coordinator/gateway/rewrite.py).

Realistic answers in every declared version of each API, as kafka-python encodes them,
through `rewrite_frame`, read back by kafka-python; then properties over any answer our
codec can encode: exposed nodes mapped, the others dropped (or, for FindCoordinator, an
error), every other field and the correlation id kept, truncated frames refused.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.gateway.rewrite import (REWRITTEN, describe_cluster, find_coordinator, metadata,
                                         node_endpoints, rewrite_frame)
from protocol import ProtocolError, RequestHeader, decode_response, encode_response, frame
from protocol.messages import build
from protocol.schema import Array, Struct, default_of
from protocol.schemas import DESCRIBE_CLUSTER, FETCH, FIND_COORDINATOR, METADATA, PRODUCE
from protocol.varint import uvarint
from tests.support.protocol_values import as_dict, values
from tools.bench.kafka_python import from_reference, reference_class, reference_object

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))

GW = "gw.example"
EXPOSED = {0: (GW, 19093), 1: (GW, 19094)}  # node 2 is not exposed
EXTRA = [(1_000_000_000, "gk-0.example", 9092), (1_000_000_001, "gk-1.example", 9092)]
NO_OPERATIONS = -(2**31)
NOT_LEADER, COORDINATOR_NOT_AVAILABLE = 6, 15
TOPIC_ID = uuid.UUID("7b1f3c52-1c65-4a5e-9f5d-0c2e4d7a9b10")


def versions(api, low=None):
    return list(range(api.versions.low if low is None else low, api.versions.high + 1))


def project(struct: Struct, version: int, d: dict) -> dict:
    """`d` (fields of every version) as `struct` has it in `version`: the fields of that
    version only, missing ones at their defaults."""
    out = {}
    for f in struct.fields:
        if version not in f.versions:
            continue
        v = d.get(f.name, default_of(f))
        if isinstance(f.type, Array) and isinstance(f.type.item, Struct) and v is not None:
            v = [project(f.type.item, version, e) for e in v]
        out[f.name] = v
    return out


def kp_frame(message, vals: dict, version: int, correlation_id: int, tweak=None) -> bytes:
    """The framed response kafka-python encodes from `vals` (`tweak` edits its object first)."""
    obj = reference_object(message, vals, version)
    if tweak is not None:
        tweak(obj)
    obj.with_header(correlation_id=correlation_id)
    return bytes(obj.encode(header=True, framed=True))


def kp_read(message, data: bytes, version: int):
    """(correlation id, values, kafka-python's object) of a framed response."""
    kp = reference_class(message)
    back = kp.decode(data, version=version, header=True, framed=True)
    return back.header.correlation_id, from_reference(kp.fields, message.struct, back, version), back


def node(n: int, **more) -> dict:
    return {"host": f"kafka-{n}.internal", "port": 9092, "rack": f"rack-{n}", **more}


def at_gateway(entry: dict, n: int) -> dict:
    return {**entry, "host": EXPOSED[n][0], "port": EXPOSED[n][1]}


# -- realistic answers, every version, through kafka-python -------------------------------

METADATA_ANSWER = {
    "throttle_time_ms": 0,
    "brokers": [node(n, node_id=n) for n in (0, 1, 2)],
    "cluster_id": "5L6g3nShT-eMCtK--X86sw",
    "controller_id": 2,
    "topics": [{"error_code": 0, "name": "orders", "topic_id": TOPIC_ID, "is_internal": False,
                "partitions": [{"error_code": 0, "partition_index": i, "leader_id": i, "leader_epoch": 4,
                                "replica_nodes": [i, (i + 1) % 3], "isr_nodes": [i, (i + 1) % 3],
                                "offline_replicas": []} for i in range(3)],
                "topic_authorized_operations": NO_OPERATIONS}],
    "cluster_authorized_operations": NO_OPERATIONS,
    "error_code": 0,
}


@pytest.mark.parametrize("version", versions(METADATA))
def test_metadata_brokers_mapped_unexposed_dropped_coordinators_added(version):
    message = METADATA.response
    vals = project(message.struct, version, METADATA_ANSWER)
    data = kp_frame(message, vals, version, 4711)

    out = rewrite_frame(METADATA.key, version, data[4:], EXPOSED.get, EXTRA)

    correlation_id, got, _ = kp_read(message, out, version)
    assert correlation_id == 4711
    brokers = [at_gateway(node(0, node_id=0), 0), at_gateway(node(1, node_id=1), 1),
               *({"node_id": i, "host": h, "port": p, "rack": None} for i, h, p in EXTRA)]
    # the controller, node 2, is not exposed: no controller; partitions led by 2 stay so
    expected = project(message.struct, version, {**METADATA_ANSWER, "brokers": brokers, "controller_id": -1})
    assert got == expected


@pytest.mark.parametrize("version", versions(METADATA))
def test_metadata_with_every_node_where_it_is_comes_back_byte_for_byte(version):
    """Our decoding and encoding of the answer against kafka-python's: same bytes."""
    message = METADATA.response
    data = kp_frame(message, project(message.struct, version, METADATA_ANSWER), version, 1)
    itself = {n: (f"kafka-{n}.internal", 9092) for n in (0, 1, 2)}.get
    assert rewrite_frame(METADATA.key, version, data[4:], itself) == data


def test_an_extra_broker_never_takes_a_brokers_id():
    message, version = METADATA.response, 12
    data = kp_frame(message, project(message.struct, version, METADATA_ANSWER), version, 1)
    extra = [(2, "gk-0.example", 9092), (1_000_000_000, "gk-1.example", 9092), (1_000_000_000, "gk-2.example", 1)]
    _, got, _ = kp_read(message, rewrite_frame(METADATA.key, version, data[4:], EXPOSED.get, extra), version)
    # 2 is a broker's (not exposed, and still the leader of partition 2): skipped; the
    # second entry for one id too
    assert [(b["node_id"], b["host"]) for b in got["brokers"]] == [(0, GW), (1, GW), (1_000_000_000, "gk-1.example")]


def coordinator(n: int, **more) -> dict:
    return {"node_id": n, "host": f"kafka-{n}.internal", "port": 9092, "error_code": 0, "error_message": None, **more}


NOT_AVAILABLE = {"node_id": -1, "host": "", "port": -1, "error_code": COORDINATOR_NOT_AVAILABLE,
                 "error_message": "The coordinator is not available."}


@pytest.mark.parametrize("version", versions(FIND_COORDINATOR))
@pytest.mark.parametrize("case", ["exposed", "not exposed", "error"])
def test_find_coordinator(version, case):
    message = FIND_COORDINATOR.response
    if version < 4:
        answer = {"throttle_time_ms": 0, **{
            "exposed": coordinator(1),
            "not exposed": coordinator(2),
            "error": {**NOT_AVAILABLE, "error_message": "Coordinator load in progress", "error_code": 14},
        }[case]}
        expected = {"exposed": {**answer, "host": GW, "port": 19094},
                    "not exposed": {**answer, **NOT_AVAILABLE},
                    "error": answer}[case]
    else:  # KIP-699: one entry per key; the case is the second's, beside an exposed one
        first = coordinator(0, key="orders-app")
        second = {**{"exposed": coordinator(1), "not exposed": coordinator(2),
                     "error": {**NOT_AVAILABLE, "error_code": 14, "error_message": None}}[case],
                  "key": "txn-42"}
        answer = {"throttle_time_ms": 7, "coordinators": [first, second]}
        second_after = {"exposed": {**second, "host": GW, "port": 19094},
                        "not exposed": {**second, **NOT_AVAILABLE},
                        "error": second}[case]
        expected = {**answer, "coordinators": [{**first, "host": GW, "port": 19093}, second_after]}
    data = kp_frame(message, project(message.struct, version, answer), version, -5)

    out = rewrite_frame(FIND_COORDINATOR.key, version, data[4:], EXPOSED.get, EXTRA)

    correlation_id, got, _ = kp_read(message, out, version)
    assert correlation_id == -5
    assert got == project(message.struct, version, expected)


DESCRIBE_CLUSTER_ANSWER = {
    "throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
    "cluster_id": "5L6g3nShT-eMCtK--X86sw", "controller_id": 1,
    "brokers": [node(n, broker_id=n, is_fenced=n == 2) for n in (0, 1, 2)],
    "cluster_authorized_operations": 0b1000_0000_0100,
}


@pytest.mark.parametrize("version", versions(DESCRIBE_CLUSTER))
def test_describe_cluster(version):
    message = DESCRIBE_CLUSTER.response
    data = kp_frame(message, project(message.struct, version, DESCRIBE_CLUSTER_ANSWER), version, 99)

    out = rewrite_frame(DESCRIBE_CLUSTER.key, version, data[4:], EXPOSED.get, EXTRA)

    correlation_id, got, _ = kp_read(message, out, version)
    assert correlation_id == 99
    brokers = [at_gateway(DESCRIBE_CLUSTER_ANSWER["brokers"][n], n) for n in (0, 1)]  # no extras here
    assert got == project(message.struct, version, {**DESCRIBE_CLUSTER_ANSWER, "brokers": brokers})
    itself = {n: (f"kafka-{n}.internal", 9092) for n in (0, 1, 2)}.get
    assert rewrite_frame(DESCRIBE_CLUSTER.key, version, data[4:], itself) == data


ENDPOINTS = [node(1, node_id=1), node(2, node_id=2, rack=None)]
RECORDS = bytes(range(61)) * 3  # stands for a record batch: passed on as it came

PRODUCE_ANSWER = {
    "responses": [{"name": "orders", "topic_id": TOPIC_ID, "partition_responses": [
        {"index": 0, "error_code": NOT_LEADER, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1,
         "record_errors": [], "error_message": None},
        {"index": 1, "error_code": NOT_LEADER, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1,
         "record_errors": [], "error_message": None},
        {"index": 2, "error_code": 0, "base_offset": 1234, "log_append_time_ms": -1, "log_start_offset": 0,
         "record_errors": [{"batch_index": 0, "batch_index_error_message": None}], "error_message": None},
    ]}],
    "throttle_time_ms": 0,
    "node_endpoints": ENDPOINTS,
}

FETCH_ANSWER = {
    "throttle_time_ms": 0, "error_code": 0, "session_id": 1_337,
    "responses": [{"topic": "orders", "topic_id": TOPIC_ID, "partitions": [
        {"partition_index": 0, "error_code": NOT_LEADER, "high_watermark": -1, "last_stable_offset": -1,
         "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": None},
        {"partition_index": 1, "error_code": NOT_LEADER, "high_watermark": -1, "last_stable_offset": -1,
         "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": None},
        {"partition_index": 2, "error_code": 0, "high_watermark": 800, "last_stable_offset": 790,
         "log_start_offset": 0, "aborted_transactions": [{"producer_id": 5, "first_offset": 700}],
         "preferred_read_replica": -1, "records": RECORDS},
    ]}],
    "node_endpoints": ENDPOINTS,
}


def kip951_leaders(api):
    """A kafka-python edit: the tagged fields of partitions that our codec does not declare
    (KIP-951's current_leader; Fetch's diverging_epoch and snapshot_id) set, which the
    rewrite must pass on."""
    def tweak(obj):
        for topic in obj.responses:
            if api is PRODUCE:
                parts = topic.partition_responses
                leader = type(topic).PartitionProduceResponse.LeaderIdAndEpoch
            else:
                parts = topic.partitions
                leader = type(topic).PartitionData.LeaderIdAndEpoch
                parts[2].diverging_epoch = type(topic).PartitionData.EpochEndOffset(epoch=3, end_offset=650)
                parts[2].snapshot_id = type(topic).PartitionData.SnapshotId(end_offset=600, epoch=2)
            parts[0].current_leader = leader(leader_id=1, leader_epoch=8)
            parts[1].current_leader = leader(leader_id=2, leader_epoch=9)
    return tweak


def partition_tags(api, obj) -> list:
    names = ("current_leader",) if api is PRODUCE else ("current_leader", "diverging_epoch", "snapshot_id")
    out = []
    for topic in obj.responses:
        for p in (topic.partition_responses if api is PRODUCE else topic.partitions):
            out.append([None if getattr(p, n) is None else getattr(p, n).to_dict() for n in names])
    return out


KIP951 = [(PRODUCE, v) for v in versions(PRODUCE, 10)] + [(FETCH, v) for v in versions(FETCH, 16)]
BEFORE_KIP951 = [(PRODUCE, v) for v in range(PRODUCE.versions.low, 10)] + [(FETCH, v) for v in range(FETCH.versions.low, 16)]
ANSWERS = {PRODUCE.key: PRODUCE_ANSWER, FETCH.key: FETCH_ANSWER}


@pytest.mark.parametrize("api,version", KIP951, ids=[f"{a.name}-v{v}" for a, v in KIP951])
def test_node_endpoints_mapped_and_everything_else_passed_on(api, version):
    message = api.response
    vals = project(message.struct, version, ANSWERS[api.key])
    data = kp_frame(message, vals, version, 31337, tweak=kip951_leaders(api))
    _, _, original = kp_read(message, data, version)

    out = rewrite_frame(api.key, version, data[4:], EXPOSED.get, EXTRA)

    correlation_id, got, back = kp_read(message, out, version)
    assert correlation_id == 31337
    # node 1 at the gateway; node 2, not exposed, dropped: its partition's client looks again
    assert got == {**vals, "node_endpoints": [at_gateway(ENDPOINTS[0], 1)]}
    assert partition_tags(api, back) == partition_tags(api, original)
    assert partition_tags(api, back)[0][0] == {"leader_id": 1, "leader_epoch": 8}
    # the records and everything before the top-level tagged fields: the very same bytes
    bare = kp_frame(message, {**vals, "node_endpoints": []}, version, 31337, tweak=kip951_leaders(api))
    assert out[4:].startswith(bare[4:-1])  # all but its empty tagged-field section

    nobody = rewrite_frame(api.key, version, data[4:], lambda n: None)
    assert kp_read(message, nobody, version)[1] == {**vals, "node_endpoints": []}
    itself = rewrite_frame(api.key, version, data[4:], {n: (f"kafka-{n}.internal", 9092) for n in (1, 2)}.get)
    assert itself == data


@pytest.mark.parametrize("api,version", KIP951, ids=[f"{a.name}-v{v}" for a, v in KIP951])
def test_an_answer_without_node_endpoints_passes_as_it_came(api, version):
    message = api.response
    vals = project(message.struct, version, {**ANSWERS[api.key], "node_endpoints": []})
    data = kp_frame(message, vals, version, 8, tweak=kip951_leaders(api))
    assert rewrite_frame(api.key, version, data[4:], EXPOSED.get) == data


@pytest.mark.parametrize("api,version", BEFORE_KIP951, ids=[f"{a.name}-v{v}" for a, v in BEFORE_KIP951])
def test_produce_and_fetch_before_kip951_are_not_read(api, version):
    message = api.response
    data = kp_frame(message, project(message.struct, version, ANSWERS[api.key]), version, 8)
    assert rewrite_frame(api.key, version, data[4:], EXPOSED.get) == data
    assert rewrite_frame(api.key, version, b"not a response", EXPOSED.get) == frame(b"not a response")


def test_what_is_rewritten():
    assert REWRITTEN == {METADATA.key: 0, FIND_COORDINATOR.key: 0, DESCRIBE_CLUSTER.key: 0,
                         PRODUCE.key: 10, FETCH.key: 16, 78: 0, 79: 0}  # and ShareFetch, ShareAcknowledge
    for api_key in (12, 18, 2, 9):  # Heartbeat, ApiVersions, ListOffsets, OffsetFetch: not decoded
        assert rewrite_frame(api_key, 3, b"\x00\x00\x00\x07anything", EXPOSED.get) == frame(b"\x00\x00\x00\x07anything")


def test_the_functions_on_answers_leave_them_as_they_were():
    cases = [(METADATA, 12, lambda r: metadata(r, EXPOSED.get, EXTRA), METADATA_ANSWER),
             (FIND_COORDINATOR, 2, lambda r: find_coordinator(r, 2, EXPOSED.get), coordinator(2)),
             (FIND_COORDINATOR, 4, lambda r: find_coordinator(r, 4, EXPOSED.get),
              {"coordinators": [coordinator(1, key="a"), coordinator(2, key="b")]}),
             (DESCRIBE_CLUSTER, 2, lambda r: describe_cluster(r, EXPOSED.get), DESCRIBE_CLUSTER_ANSWER),
             (PRODUCE, 12, lambda r: node_endpoints(r, EXPOSED.get), PRODUCE_ANSWER),
             (FETCH, 17, lambda r: node_endpoints(r, EXPOSED.get), FETCH_ANSWER)]
    for api, version, rewrite, answer in cases:
        struct = api.response.struct
        response = build(struct, project(struct, version, answer))
        before = as_dict(struct, response, version)
        after = rewrite(response)
        assert as_dict(struct, response, version) == before
        assert after is not response and as_dict(struct, after, version) != before


# -- properties, over any answer our codec encodes ----------------------------------------

def ours(api, version: int, vals: dict, correlation_id: int) -> bytes:
    return encode_response(RequestHeader(api.key, version, correlation_id, None), build(api.response.struct, vals))


def read(api, version: int, out: bytes) -> tuple[int, dict]:
    assert int.from_bytes(out[:4], "big", signed=True) == len(out) - 4
    correlation_id, body = decode_response(api.key, version, out[4:])
    return correlation_id, as_dict(api.response.struct, body, version)


def mapped(nodes: list[dict], id_field: str, exposed: dict) -> list[dict]:
    """The spec: exposed nodes at their exposed address, in order; the others left out."""
    return [{**n, "host": exposed[n[id_field]][0], "port": exposed[n[id_field]][1]}
            for n in nodes if n[id_field] in exposed]


@st.composite
def exposure(draw, ids: list[int]) -> dict:
    """Some of `ids` (and an id of no node) exposed, at any address."""
    chosen = draw(st.sets(st.sampled_from(ids))) if ids else set()
    address = st.tuples(st.text(max_size=12), st.integers(0, 65535))
    return {i: draw(address) for i in chosen | {draw(st.integers(-(2**31), 2**31 - 1))}}


CORRELATION = st.integers(-(2**31), 2**31 - 1)


def controller(controller_id: int, exposed: dict) -> int:
    return controller_id if controller_id < 0 or controller_id in exposed else -1


@pytest.mark.parametrize("version", versions(METADATA))
@SETTINGS
@given(data=st.data(), correlation_id=CORRELATION)
def test_metadata_property(version, data, correlation_id):
    vals = data.draw(values(METADATA.response.struct, version))
    ids = [b["node_id"] for b in vals["brokers"]]
    exposed = data.draw(exposure(ids))
    extra = data.draw(st.lists(st.tuples(st.sampled_from(ids) if ids and data.draw(st.booleans())
                                         else st.integers(10**9, 2**31 - 1),
                                         st.text(max_size=12), st.integers(0, 65535)), max_size=3))

    got_id, got = read(METADATA, version, rewrite_frame(METADATA.key, version, ours(METADATA, version, vals, correlation_id)[4:],
                                                          exposed.get, extra))

    brokers, taken = mapped(vals["brokers"], "node_id", exposed), set(ids)
    for i, host, port in extra:
        if i not in taken:
            taken.add(i)
            brokers.append(project(METADATA.response.struct.fields[1].type.item, version,
                                   {"node_id": i, "host": host, "port": port, "rack": None}))
    expected = {**vals, "brokers": brokers}
    if "controller_id" in vals:
        expected["controller_id"] = controller(vals["controller_id"], exposed)
    assert (got_id, got) == (correlation_id, expected)


@pytest.mark.parametrize("version", versions(FIND_COORDINATOR))
@SETTINGS
@given(data=st.data(), correlation_id=CORRELATION)
def test_find_coordinator_property(version, data, correlation_id):
    struct = FIND_COORDINATOR.response.struct
    vals = data.draw(values(struct, version))
    entries = [vals] if version < 4 else vals["coordinators"]
    for entry in entries:  # NONE often: the interesting case
        if data.draw(st.booleans()):
            entry["error_code"] = 0
    exposed = data.draw(exposure([e["node_id"] for e in entries]))

    out = rewrite_frame(FIND_COORDINATOR.key, version, ours(FIND_COORDINATOR, version, vals, correlation_id)[4:],
                        exposed.get)

    def spec(entry: dict) -> dict:
        if entry["error_code"] != 0:
            return entry
        if entry["node_id"] not in exposed:
            return {**entry, **{k: v for k, v in NOT_AVAILABLE.items() if k in entry}}
        return {**entry, "host": exposed[entry["node_id"]][0], "port": exposed[entry["node_id"]][1]}

    expected = spec(vals) if version < 4 else {**vals, "coordinators": [spec(e) for e in entries]}
    assert read(FIND_COORDINATOR, version, out) == (correlation_id, expected)


@pytest.mark.parametrize("version", versions(DESCRIBE_CLUSTER))
@SETTINGS
@given(data=st.data(), correlation_id=CORRELATION)
def test_describe_cluster_property(version, data, correlation_id):
    vals = data.draw(values(DESCRIBE_CLUSTER.response.struct, version))
    exposed = data.draw(exposure([b["broker_id"] for b in vals["brokers"]]))

    out = rewrite_frame(DESCRIBE_CLUSTER.key, version, ours(DESCRIBE_CLUSTER, version, vals, correlation_id)[4:],
                        exposed.get, EXTRA)

    expected = {**vals, "brokers": mapped(vals["brokers"], "broker_id", exposed),
                "controller_id": controller(vals["controller_id"], exposed)}
    assert read(DESCRIBE_CLUSTER, version, out) == (correlation_id, expected)


@pytest.mark.parametrize("api,version", KIP951, ids=[f"{a.name}-v{v}" for a, v in KIP951])
@SETTINGS
@given(data=st.data(), correlation_id=CORRELATION)
def test_node_endpoints_property(api, version, data, correlation_id):
    vals = data.draw(values(api.response.struct, version))
    exposed = data.draw(exposure([e["node_id"] for e in vals["node_endpoints"]]))
    data_ = ours(api, version, vals, correlation_id)

    out = rewrite_frame(api.key, version, data_[4:], exposed.get, EXTRA)

    expected = {**vals, "node_endpoints": mapped(vals["node_endpoints"], "node_id", exposed)}
    assert read(api, version, out) == (correlation_id, expected)
    if not vals["node_endpoints"]:
        assert out == data_


PARTITION_TAGS = st.none() | st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1))


@pytest.mark.parametrize("api,version", KIP951, ids=[f"{a.name}-v{v}" for a, v in KIP951])
@SETTINGS
@given(data=st.data(), correlation_id=CORRELATION,
       unknown=st.lists(st.tuples(st.integers(1, 300), st.binary(max_size=140)), max_size=2, unique_by=lambda t: t[0]))
def test_undeclared_tags_pass_on(api, version, data, correlation_id, unknown):
    """What our codec does not declare (a partition's current_leader, diverging_epoch and
    snapshot_id, set by kafka-python; top-level tags of a newer Kafka, added by hand) comes
    out as it went in."""
    message = api.response
    vals = data.draw(values(message.struct, version))
    exposed = data.draw(exposure([e["node_id"] for e in vals["node_endpoints"]]))
    counts = [len(t["partition_responses"] if api is PRODUCE else t["partitions"]) for t in vals["responses"]]
    drawn = [[(data.draw(PARTITION_TAGS), data.draw(PARTITION_TAGS)) for _ in range(n)] for n in counts]

    def tweak(obj):
        for topic, tags in zip(obj.responses, drawn):
            if api is PRODUCE:
                cls, parts = type(topic).PartitionProduceResponse, topic.partition_responses
            else:
                cls, parts = type(topic).PartitionData, topic.partitions
            for p, (leader, diverging) in zip(parts, tags):
                if leader is not None:
                    p.current_leader = cls.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])
                if api is FETCH and diverging is not None:
                    p.diverging_epoch = cls.EpochEndOffset(epoch=diverging[0], end_offset=diverging[1])

    # the top-level tagged fields by hand: kafka-python's node_endpoints, then the unknown ones
    with_endpoints = kp_frame(message, vals, version, correlation_id, tweak)
    bare = kp_frame(message, {**vals, "node_endpoints": []}, version, correlation_id, tweak)[4:-1]
    known = with_endpoints[4 + len(bare) + 1:]  # tag 0 (or nothing, when there are no endpoints)
    section = uvarint(bool(known) + len(unknown)) + known + b"".join(
        uvarint(tag) + uvarint(len(payload)) + payload for tag, payload in sorted(unknown))
    data_ = frame(bare + section)
    _, _, original = kp_read(message, data_, version)
    assert original.unknown_tags == ({f"_{t}": p for t, p in unknown} or None)

    out = rewrite_frame(api.key, version, data_[4:], exposed.get)

    got_id, got, back = kp_read(message, out, version)
    assert got_id == correlation_id
    assert got == {**vals, "node_endpoints": mapped(vals["node_endpoints"], "node_id", exposed)}
    assert partition_tags(api, back) == partition_tags(api, original)
    assert back.unknown_tags == original.unknown_tags
    assert out[4:].startswith(bare)


REWRITABLE = ([(METADATA, v) for v in versions(METADATA)] + [(FIND_COORDINATOR, v) for v in versions(FIND_COORDINATOR)]
              + [(DESCRIBE_CLUSTER, v) for v in versions(DESCRIBE_CLUSTER)] + KIP951)


@pytest.mark.parametrize("api,version", REWRITABLE, ids=[f"{a.name}-v{v}" for a, v in REWRITABLE])
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_truncated_answer_is_refused(api, version, data):
    vals = data.draw(values(api.response.struct, version))
    whole = ours(api, version, vals, 1)[4:]
    cut = data.draw(st.integers(0, len(whole) - 1))
    with pytest.raises(ProtocolError):
        rewrite_frame(api.key, version, whole[:cut], EXPOSED.get, EXTRA)


@pytest.mark.parametrize("api,version", KIP951, ids=[f"{a.name}-v{v}" for a, v in KIP951])
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(junk=st.binary(max_size=200))
def test_garbage_raises_protocol_errors_only(api, version, junk):
    try:
        rewrite_frame(api.key, version, junk, EXPOSED.get)
    except ProtocolError:
        pass


def test_the_new_declarations_are_cross_checked_against_kafka_python():
    """DescribeCluster and the node_endpoints of Produce and Fetch are in test_protocol_crosscheck's
    cases (every declared API kafka-python has, every version, both ways)."""
    from tests.pure.test_protocol_crosscheck import CASES

    wanted = {(DESCRIBE_CLUSTER.key, kind, v) for kind in ("request", "response") for v in versions(DESCRIBE_CLUSTER)}
    wanted |= {(api.key, "response", v) for api, v in KIP951}
    assert wanted <= set(CASES)


def test_share_fetch_and_acknowledge_answers_read_as_kafka_lays_them_out_and_rewritten():
    """No client library here declares KIP-932's messages, so the reference is a ShareFetch v1
    answer assembled by hand from Kafka's definition (ShareFetchResponse.json), byte by byte;
    our codec reads it, writes it back the same, and the rewrite maps its node endpoints."""
    import struct

    def compact(b: bytes | None) -> bytes:
        return b"\x00" if b is None else uvarint(len(b) + 1) + b

    topic = uuid.UUID(int=0x51)
    partition = (struct.pack(">ih", 0, 0) + compact(None) + struct.pack(">h", 0) + compact(None)
                 + struct.pack(">ii", 1, 3) + b"\x00"  # current_leader, its tagged fields
                 + compact(b"REC") + uvarint(2) + struct.pack(">qqh", 10, 12, 1) + b"\x00"  # acquired records
                 + b"\x00")
    body = (struct.pack(">ih", 0, 0) + compact(None) + struct.pack(">i", 30_000)
            + uvarint(2) + topic.bytes + uvarint(2) + partition + b"\x00"
            + uvarint(3) + struct.pack(">i", 1) + compact(b"kafka-1.internal") + struct.pack(">i", 9092) + compact(None)
            + b"\x00" + struct.pack(">i", 2) + compact(b"kafka-2.internal") + struct.pack(">i", 9092)
            + compact(b"r2") + b"\x00"
            + b"\x00")
    answer = struct.pack(">i", 99) + b"\x00" + body  # correlation id, header tags
    correlation_id, read = decode_response(78, 1, answer)
    assert correlation_id == 99 and read.acquisition_lock_timeout_ms == 30_000
    p0 = read.responses[0].partitions[0]
    assert (read.responses[0].topic_id, p0.records, p0.current_leader.leader_epoch) == (topic, b"REC", 3)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for a in p0.acquired_records] == [(10, 12, 1)]
    assert encode_response(RequestHeader(78, 1, 99, None), read) == frame(answer)
    out = rewrite_frame(78, 1, answer, EXPOSED.get)
    _, back = decode_response(78, 1, out[4:])
    assert [(e.node_id, e.host, e.port) for e in back.node_endpoints] == [(1, GW, 19094)]  # node 2 not exposed
    assert back.responses[0].partitions[0].records == b"REC"
    # ShareAcknowledge v2: the lock timeout after the error message, no records
    ack = (struct.pack(">i", 5) + b"\x00" + struct.pack(">ih", 0, 0) + compact(None) + struct.pack(">i", 15_000)
           + uvarint(1) + uvarint(2) + struct.pack(">i", 0) + compact(b"kafka-0.internal") + struct.pack(">i", 9092)
           + compact(None) + b"\x00" + b"\x00")
    _, acked = decode_response(79, 2, ack)
    assert acked.acquisition_lock_timeout_ms == 15_000 and acked.node_endpoints[0].host == "kafka-0.internal"
    _, back = decode_response(79, 2, rewrite_frame(79, 2, ack, EXPOSED.get)[4:])
    assert [(e.node_id, e.host, e.port) for e in back.node_endpoints] == [(0, GW, 19093)]


@pytest.mark.parametrize("version", versions(PRODUCE, 10))
def test_a_produce_answer_cut_anywhere_is_a_decode_error(version):
    vals = project(PRODUCE.response.struct, version, PRODUCE_ANSWER)
    data = kp_frame(PRODUCE.response, vals, version, 7)[4:]
    assert rewrite_frame(PRODUCE.key, version, data, EXPOSED.get)  # whole, it reads
    for end in range(len(data) - 1):  # the last byte is the tagged fields' count: none would be cut
        with pytest.raises(ProtocolError):
            rewrite_frame(PRODUCE.key, version, data[:end], EXPOSED.get)
