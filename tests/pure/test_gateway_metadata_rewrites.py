"""Through the gateway, a broker's Metadata answer is rewritten (its brokers at our node
ports, our coordinator nodes added); the rewrite of an answer that is byte for byte one
rewritten before is remembered (`Gateway._metadata_rewriter`). The broker is still asked
every time: a leader that moved is in the next answer. These check that what is remembered
is exactly the fresh rewrite, and is not used once anything it came from differs."""

from __future__ import annotations

import struct
import timeit

import pytest
import trio

from coordinator.gateway import nodes, rewrite
from coordinator.gateway.nodes import MAX_METADATA_REWRITES, Gateway
from coordinator.gateway.ports import PortScheme
from coordinator.listeners import Listener
from coordinator.topics.brokers import BrokerTopics
from protocol import RequestHeader, decode_response, encode_response
from protocol import messages as m
from protocol.schemas import METADATA

LISTENER = Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)
ADVERTISED = Listener("PLAINTEXT", "PLAINTEXT", "gk.example", 9092)
VERSIONS = range(METADATA.response.versions.low, METADATA.response.versions.high + 1)
REWRITE_FRAME = rewrite.rewrite_frame


class Counted:
    """rewrite.rewrite_frame, counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return REWRITE_FRAME(*args, **kwargs)


@pytest.fixture
def gateway(monkeypatch):
    coordinators = [(1_000_000_001, "gk.example", 9092)]
    gw = Gateway(BrokerTopics([("127.0.0.1", 1)], 5.0), [(LISTENER, ADVERTISED)], PortScheme(9092, 9092, 1),
                 lambda listener: list(coordinators), set())
    gw._changed = trio.Event()
    gw.open = {1, 2, 3}
    gw.coordinators = coordinators  # the test's handle on them
    gw.counted = Counted()
    monkeypatch.setattr(nodes.rewrite, "rewrite_frame", gw.counted)
    return gw


def broker_answer(version: int, correlation: int, leader: int = 1, brokers=(1, 2, 3), partitions: int = 4) -> bytes:
    """A broker's Metadata answer as the link hands it over: header and body, no size."""
    body = m.MetadataResponse(
        brokers=[m.MetadataResponseBroker(node_id=b, host=f"kafka-{b}", port=9092) for b in brokers],
        cluster_id="c1", controller_id=brokers[0], topics=[m.MetadataResponseTopic(
            name="orders", partitions=[m.MetadataResponsePartition(
                partition_index=p, leader_id=leader, leader_epoch=2, replica_nodes=list(brokers),
                isr_nodes=list(brokers)) for p in range(partitions)])])
    return encode_response(RequestHeader(METADATA.key, version, correlation, None), body)[4:]


def rewritten(gw: Gateway, version: int, answer: bytes) -> bytes:
    return gw._rewriter(METADATA.key, version, LISTENER.name)(answer)


def fresh(gw: Gateway, version: int, answer: bytes) -> bytes:
    return REWRITE_FRAME(METADATA.key, version, answer, gw.exposed(LISTENER.name),
                                 gw.coordinator_nodes(LISTENER.name))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_remembered_rewrite_is_the_fresh_one_in_every_version(gateway, version):
    first = rewritten(gateway, version, broker_answer(version, 11))
    again = rewritten(gateway, version, broker_answer(version, -3))
    assert gateway.counted.calls == 1  # the second from memory
    assert first == fresh(gateway, version, broker_answer(version, 11))
    assert again == fresh(gateway, version, broker_answer(version, -3))
    assert struct.unpack_from(">i", again, 4)[0] == -3 and first[8:] == again[8:]
    _, answer = decode_response(METADATA.key, version, again[4:])
    assert [(b.node_id, b.port) for b in answer.brokers] == [(1, 9094), (2, 9095), (3, 9096), (1_000_000_001, 9092)]


def test_a_leader_that_moved_is_in_the_next_answer(gateway):
    rewritten(gateway, 12, broker_answer(12, 1, leader=1))
    moved = rewritten(gateway, 12, broker_answer(12, 2, leader=2))  # the same size, other bytes
    assert gateway.counted.calls == 2
    _, answer = decode_response(METADATA.key, 12, moved[4:])
    assert {p.leader_id for p in answer.topics[0].partitions} == {2}
    assert moved == fresh(gateway, 12, broker_answer(12, 2, leader=2))


def test_a_change_of_node_ports_or_coordinator_nodes_is_rewritten_afresh(gateway):
    rewritten(gateway, 12, broker_answer(12, 1))
    gateway.open.discard(3)  # its ports closed: left out of the answer now
    without = rewritten(gateway, 12, broker_answer(12, 2))
    assert gateway.counted.calls == 2 and without == fresh(gateway, 12, broker_answer(12, 2))
    assert b"9096" not in without and 3 not in {b.node_id for b in decode_response(METADATA.key, 12, without[4:])[
        1].brokers}
    gateway.open.add(3)  # back as they were when the first was rewritten: that rewrite holds again
    assert rewritten(gateway, 12, broker_answer(12, 3)) == fresh(gateway, 12, broker_answer(12, 3))
    assert gateway.counted.calls == 2
    gateway.open.add(4)  # a node the answer does not name: all the same, rewritten afresh
    rewritten(gateway, 12, broker_answer(12, 4))
    assert gateway.counted.calls == 3
    gateway.coordinators.append((1_000_000_002, "gk-2.example", 9092))
    both = rewritten(gateway, 12, broker_answer(12, 5))
    assert gateway.counted.calls == 4 and b"gk-2.example" in both
    assert both == fresh(gateway, 12, broker_answer(12, 5))


def test_an_answer_naming_a_node_without_ports_is_never_remembered(gateway):
    """Rewriting it looks for the node (the gateway's sync woken, the cluster asked again)."""
    gateway.open = {1, 2}
    for correlation in range(3):
        gateway._changed = trio.Event()
        rewritten(gateway, 12, broker_answer(12, correlation))
        assert gateway._changed.is_set()
    assert gateway.counted.calls == 3 and not gateway._metadata_rewrites


def test_with_acls_the_merged_answer_is_never_remembered(gateway):
    merge = lambda frame: frame  # noqa: E731 - with ACLs, the authorization's errors merged per request
    for correlation in range(3):
        answer = gateway._rewriter(METADATA.key, 12, LISTENER.name, merge)(broker_answer(12, correlation))
        assert answer == fresh(gateway, 12, broker_answer(12, correlation))
    assert gateway.counted.calls == 3 and not gateway._metadata_rewrites


def test_rewrites_remembered_are_bounded(gateway):
    for n in range(MAX_METADATA_REWRITES + 10):
        rewritten(gateway, 12, broker_answer(12, 1, partitions=n + 1))
    assert len(gateway._metadata_rewrites) == MAX_METADATA_REWRITES
    rewritten(gateway, 12, broker_answer(12, 1, partitions=1))  # the oldest went
    rewritten(gateway, 12, broker_answer(12, 1, partitions=MAX_METADATA_REWRITES + 10))  # the newest stayed
    assert gateway.counted.calls == MAX_METADATA_REWRITES + 11


def test_remembering_costs_a_comparison_not_a_rewrite(gateway):
    """1,000 partitions: printed for the record (docs/benchmarks.md), held to a loose bound."""
    answer = broker_answer(12, 1, partitions=1000)
    n = 50
    made = timeit.timeit(lambda: fresh(gateway, 12, answer), number=n) / n
    rewritten(gateway, 12, answer)
    remembered = timeit.timeit(lambda: rewritten(gateway, 12, answer), number=n * 20) / (n * 20)
    print(f"a 1,000-partition Metadata answer rewritten: {made * 1e6:.0f} us; remembered: {remembered * 1e6:.1f} us "
          f"({made / remembered:.0f}x)")
    assert remembered * 10 < made
