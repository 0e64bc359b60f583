"""KIP-932's share-group APIs as protocol/schemas/share_groups.py declares them, against
Apache Kafka 4.4's own message definitions (common/message/*.json inside the kafka-clients
jar `make install` caches in var/kafka/libs): every version Kafka declares is declared here,
field by field (name, type, nullability, tag, in wire order), and reads what Kafka writes.
Skipped where the jar is absent (no `make install`)."""

from __future__ import annotations

import json
import re
import uuid
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.gateway.cluster import GatewayClusterApi
from protocol import RequestHeader, decode_request, encode_response
from protocol.codec import decoder, encoder
from protocol.messages import build
from protocol.requests import decode_response, encode_request
from protocol.schema import Array, Primitive, Struct
from protocol.schemas import APIS
from protocol.versions import Versions
from tests.support.protocol_values import values

ROOT = Path(__file__).resolve().parents[2]
CLIENTS_JAR = ROOT / "var" / "kafka" / "libs" / "kafka-clients-4.4.0.jar"
SHARE_APIS = (76, 77, 78, 79, 90, 91, 92)

pytestmark = pytest.mark.skipif(not CLIENTS_JAR.exists(), reason="Kafka 4.4's jars are not cached (make install)")


def kafka_definition(api_key: int, kind: str) -> dict:
    """Kafka's JSON definition of `api_key`'s request or response (its // comments dropped)."""
    with zipfile.ZipFile(CLIENTS_JAR) as jar:
        for name in jar.namelist():
            if name.startswith("common/message/") and name.endswith(f"{kind.capitalize()}.json"):
                text = jar.read(name).decode()
                definition = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))
                if definition.get("apiKey") == api_key and definition["type"] == kind:
                    return definition
    raise LookupError(f"no {kind} of API {api_key} in {CLIENTS_JAR.name}")


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


_PRIMITIVES = {"records": "bytes"}


def kafka_layout(fields: list[dict], version: int, flexible: Versions, common: dict[str, list]) -> list:
    """(name, type, nullable, tag) of each field of `version`, untagged in order, then tagged."""
    out = []
    for f in fields:
        if version not in Versions.parse(f["versions"]):
            continue
        tag = f.get("tag")
        if tag is not None and (version not in flexible or version not in Versions.parse(f["taggedVersions"])):
            continue
        nullable = version in Versions.parse(f.get("nullableVersions", "none"))
        kind = f["type"]
        item = kind[2:] if kind.startswith("[]") else kind
        if "fields" in f or item in common:  # a struct, inline or shared
            shape = ("struct", tuple(kafka_layout(f.get("fields") or common[item], version, flexible, common)))
        else:
            shape = _PRIMITIVES.get(item, item)
        out.append((snake(f["name"]), ("array", shape) if kind.startswith("[]") else shape, nullable, tag))
    return sorted(out, key=lambda x: (x[3] is not None, x[3] or 0))


def our_layout(struct: Struct, version: int, flexible: Versions) -> list:
    out = []
    for f in struct.present(version) + (struct.tagged(version) if version in flexible else ()):
        kind = f.type.item if isinstance(f.type, Array) else f.type
        shape = kind.name if isinstance(kind, Primitive) else ("struct", tuple(our_layout(kind, version, flexible)))
        out.append((f.name, ("array", shape) if isinstance(f.type, Array) else shape, version in f.nullable, f.tag))
    return out


def kafka_versions(api_key: int) -> range:
    declared = Versions.parse(kafka_definition(api_key, "request")["validVersions"])
    return range(declared.low, declared.high + 1)


@pytest.mark.parametrize("api_key", SHARE_APIS)
@pytest.mark.parametrize("kind", ["request", "response"])
def test_every_version_kafka_declares_is_declared_here_field_by_field(api_key, kind):
    definition = kafka_definition(api_key, kind)
    message = getattr(APIS[api_key], kind)
    flexible = Versions.parse(definition["flexibleVersions"])
    common = {s["name"]: s["fields"] for s in definition.get("commonStructs", [])}
    for version in kafka_versions(api_key):
        assert version in message.versions, f"{definition['name']} v{version} is not declared here"
        assert (version in message.flexible) == (version in flexible)
        assert our_layout(message.struct, version, flexible) == kafka_layout(definition["fields"], version,
                                                                              flexible, common), \
            f"{definition['name']} v{version}"


@pytest.mark.parametrize("api_key", SHARE_APIS)
def test_what_kafka_may_write_in_each_version_reads_back_the_same(api_key):
    """Values drawn for each of Kafka's versions, encoded and decoded again (frames with
    their headers, as the gateway reads them)."""
    api = APIS[api_key]

    @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def round_trip(data):
        for version in kafka_versions(api_key):
            request = data.draw(values(api.request.struct, version))
            frame = encode_request(RequestHeader(api_key, version, 7, "c"), build(api.request.struct, request))
            header, decoded = decode_request(frame[4:])
            assert (header.api_key, header.api_version) == (api_key, version)
            assert encoder(api.request, version)(decoded) == encoder(api.request, version)(
                build(api.request.struct, request))
            response = build(api.response.struct, data.draw(values(api.response.struct, version)))
            answer = encode_response(header, response)
            correlation, back = decode_response(api_key, version, answer[4:])
            assert correlation == 7
            assert encoder(api.response, version)(back) == encoder(api.response, version)(response)

    round_trip()


def test_a_describe_share_group_offsets_v1_answer_as_kafka_writes_it_is_read_with_its_lag():
    """DescribeShareGroupOffsetsResponse v1 (KIP-1226, Kafka 4.3+) laid out by hand from
    Kafka's definition: the lag after the leader epoch. Kafka 4.4's admin client sends v1."""
    topic_id = uuid.UUID(int=0x1234)
    body = (b"\x00\x00\x00\x00"  # throttle
            b"\x02" b"\x03sg"  # groups: one; group id
            b"\x02" b"\x02t" + topic_id.bytes +  # topics: one; name, id
            b"\x02" b"\x00\x00\x00\x01"  # partitions: one; index 1
            b"\x00\x00\x00\x00\x00\x00\x00\x19"  # start offset 25
            b"\x00\x00\x00\x00"  # leader epoch
            b"\x00\x00\x00\x00\x00\x00\x00\x05"  # lag 5
            b"\x00\x00" b"\x00" b"\x00"  # error, null message, tags (partition)
            b"\x00"  # tags (topic)
            b"\x00\x00" b"\x00" b"\x00"  # error, null message, tags (group)
            b"\x00")  # tags (top level)
    frame = (7).to_bytes(4, "big") + b"\x00" + body  # correlation id, header v1's tags
    correlation, answer = decode_response(90, 1, frame)
    partition = answer.groups[0].topics[0].partitions[0]
    assert (partition.partition_index, partition.start_offset, partition.lag) == (1, 25, 5)
    assert encoder(APIS[90].response, 1)(answer) == body
    assert decoder(APIS[90].response, 1)(body).groups[0].group_id == "sg"


def test_the_gateway_advertises_share_group_apis_routed_by_group_only_in_versions_it_reads():
    """It decodes them to route them by group: a version it cannot read would close the
    client's connection, so a broker's newer versions are not offered."""
    brokers = {76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 90: (0, 9), 91: (0, 9), 92: (0, 9)}
    advertised = GatewayClusterApi.advertised(object.__new__(GatewayClusterApi), brokers)
    for key in (90, 91, 92):
        assert advertised[key] == (0, APIS[key].versions.high)
    assert advertised[76] == (1, 1) and advertised[78] == (1, 2)
