"""`groupkeeper bench codec`: our codecs against kafka-python's protocol classes.

Each case is what the coordinator's codec does for one request: decode the request body a
client sent and encode the response body. Both libraries work on the same bytes (the
request as kafka-python encodes it) and on the same response values, in one run. The
ratio of a case is ours over kafka-python's for the pair; the decode and encode halves are
reported too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from protocol import messages as m
from protocol.codec import decoder, encoder
from protocol.consumer import encode_subscription
from protocol.schemas import HEARTBEAT, JOIN_GROUP, OFFSET_COMMIT

from .kafka_python import reference_class, reference_object
from .timing import ops_per_second

MEMBER = "consumer-1-6f1c0e0a-4b0c-4d7e-9d8f-3e2a1b0c9d8e"


@dataclass
class Case:
    name: str
    api: Any
    version: int
    request: dict  # field values, nested structs as dicts
    response: dict


def _subscription() -> bytes:
    return encode_subscription(m.ConsumerProtocolSubscription(
        topics=[f"orders-{i}" for i in range(5)], owned_partitions=[], generation_id=-1), 3)


def _cases() -> list[Case]:
    offsets = [{"name": f"orders-{t}", "topic_id": None, "partitions": [
        {"partition_index": p, "committed_offset": 1_000_000 + p, "committed_leader_epoch": 7,
         "commit_timestamp": -1, "committed_metadata": ""} for p in range(25)]} for t in range(4)]
    acks = [{"name": t["name"], "topic_id": None, "partitions": [
        {"partition_index": p["partition_index"], "error_code": 0} for p in t["partitions"]]}
        for t in offsets]
    cases = []
    for version in (4, 3):
        cases.append(Case(f"heartbeat v{version}", HEARTBEAT, version,
                          {"group_id": "orders-processor", "generation_id": 42, "member_id": MEMBER,
                           "group_instance_id": None},
                          {"throttle_time_ms": 0, "error_code": 0}))
    for version in (8, 7):
        cases.append(Case(f"offset_commit v{version} (100 partitions)", OFFSET_COMMIT, version,
                          {"group_id": "orders-processor", "generation_id_or_member_epoch": 42,
                           "member_id": MEMBER, "group_instance_id": None,
                           "retention_time_ms": -1, "topics": offsets},
                          {"throttle_time_ms": 0, "topics": acks}))
    members = [{"member_id": f"{MEMBER}-{i}", "group_instance_id": None, "metadata": _subscription()}
               for i in range(10)]
    for version in (9, 5):
        cases.append(Case(f"join_group v{version} (leader, 10 members)", JOIN_GROUP, version,
                          {"group_id": "orders-processor", "session_timeout_ms": 45000,
                           "rebalance_timeout_ms": 300000, "member_id": MEMBER,
                           "group_instance_id": None, "protocol_type": "consumer",
                           "protocols": [{"name": "range", "metadata": _subscription()}],
                           "reason": None},
                          {"throttle_time_ms": 0, "error_code": 0, "generation_id": 43,
                           "protocol_type": "consumer", "protocol_name": "range",
                           "leader": MEMBER, "skip_assignment": False, "member_id": MEMBER,
                           "members": members}))
    return cases


def run(min_round_s: float = 0.2) -> list[dict]:
    results = []
    for case in _cases():
        request, response = case.api.request, case.api.response
        kp_req = reference_class(request)
        wire = bytes(reference_object(request, case.request, case.version).encode())
        our_resp = m.build(response.struct, case.response)
        their_resp = reference_object(response, case.response, case.version)
        decode = decoder(request, case.version)
        encode = encoder(response, case.version)
        if encode(our_resp) != bytes(their_resp.encode()):
            raise AssertionError(f"{case.name}: the two encodings differ; the bench would compare unlike work")
        v = case.version
        timings: dict[str, Callable[[], object]] = {
            "ours_decode": lambda: decode(wire),
            "kp_decode": lambda: kp_req.decode(wire, version=v),
            "ours_encode": lambda: encode(our_resp),
            "kp_encode": lambda: their_resp.encode(),
        }
        rate = {k: ops_per_second(fn, min_round_s) for k, fn in timings.items()}
        ours = 1 / (1 / rate["ours_decode"] + 1 / rate["ours_encode"])
        theirs = 1 / (1 / rate["kp_decode"] + 1 / rate["kp_encode"])
        results.append({
            "case": case.name,
            "ours_ops_per_s": round(ours),
            "kafka_python_ops_per_s": round(theirs),
            "ratio": round(ours / theirs, 2),
            "decode_request": {"ours_ops_per_s": round(rate["ours_decode"]),
                               "kafka_python_ops_per_s": round(rate["kp_decode"]),
                               "ratio": round(rate["ours_decode"] / rate["kp_decode"], 2)},
            "encode_response": {"ours_ops_per_s": round(rate["ours_encode"]),
                                "kafka_python_ops_per_s": round(rate["kp_encode"]),
                                "ratio": round(rate["ours_encode"] / rate["kp_encode"], 2)},
        })
    return results


def table(results: list[dict]) -> str:
    head = f"{'CASE':<38} {'OURS/S':>10} {'KAFKA-PYTHON/S':>15} {'RATIO':>6}   {'DECODE':>6} {'ENCODE':>6}"
    rows = [head]
    for r in results:
        rows.append(f"{r['case']:<38} {r['ours_ops_per_s']:>10,} {r['kafka_python_ops_per_s']:>15,} "
                    f"{r['ratio']:>6.2f}   {r['decode_request']['ratio']:>6.2f} "
                    f"{r['encode_response']['ratio']:>6.2f}")
    return "\n".join(rows)
