"""How the gateway reads the answers to the Produce and Fetch requests it relays without ACLs
(`Gateway._reading`): made once per (api, version, listener, broker), not per request, so
what they hold must not go stale: a Fetch answer's high watermarks are kept with the time
each answer came, and a reading made before consumer lag was measured is made again once it is."""

from __future__ import annotations

from types import SimpleNamespace

import trio
import trio.testing

from coordinator.gateway import nodes
from coordinator.gateway.nodes import Gateway
from coordinator.gateway.ports import PortScheme
from coordinator.listeners import Listener
from coordinator.topics.brokers import BrokerTopics
from coordinator.topics.log_ends import LogEnds
from protocol.schemas import FETCH, PRODUCE

LISTENER = Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)
ADVERTISED = Listener("PLAINTEXT", "PLAINTEXT", "gk.example", 9092)


def gateway() -> Gateway:
    gw = Gateway(BrokerTopics([("127.0.0.1", 1)], 5.0), [(LISTENER, ADVERTISED)], PortScheme(9092, 9092, 1),
                 lambda listener: [], set())
    gw.open = {1}
    return gw


def link(port: int = 9092):
    """What `_reading` asks of a link: its client's listener and its broker."""
    return SimpleNamespace(connection=SimpleNamespace(client=SimpleNamespace(listener=LISTENER)),
                           address=("kafka-1", port))


def test_readings_are_made_once_per_api_version_listener_and_broker():
    gw = gateway()
    one = link()
    assert gw._reading(PRODUCE.key, 9, one) is gw._reading(PRODUCE.key, 9, link())
    assert gw._reading(PRODUCE.key, 9, one) is not gw._reading(PRODUCE.key, 9, link(9093))
    assert gw._reading(PRODUCE.key, 10, one) is not gw._reading(PRODUCE.key, 9, one)
    assert gw._reading(FETCH.key, 12, one) == (None, None)  # nothing to rewrite, no lag measured: bytes
    rewriter, walks = gw._reading(FETCH.key, 16, one)  # KIP-951: its answer may name brokers
    assert rewriter is not None and walks.fix is not None and walks.on_partition is None
    assert gw._reading(PRODUCE.key, 10, one)[1] is None  # a Produce's answer is never walked


def test_readings_are_bounded(monkeypatch):
    monkeypatch.setattr(nodes, "MAX_ANSWER_READINGS", 5)
    gw = gateway()
    for port in range(20):
        gw._reading(PRODUCE.key, 9, link(port))
        assert len(gw._readings) <= 5


def test_a_fetch_reading_made_before_lag_was_measured_reads_high_watermarks_once_it_is():
    gw = gateway()
    assert gw._reading(FETCH.key, 12, link())[1] is None
    gw.log_ends = ends = LogEnds()
    walks = gw._reading(FETCH.key, 12, link())[1]
    assert walks is not None and walks.fix is None

    async def main():
        walks.on_partition("orders", 0, 0, 41)
        first = ends.get("orders", 0)
        clock.jump(7.5)
        walks.on_partition("orders", 0, 0, 42)
        walks.on_partition("orders", 1, 6, 9)  # an error: nothing learned
        return first, ends.get("orders", 0), ends.get("orders", 1)

    clock = trio.testing.MockClock()
    first, second, failed = trio.run(main, clock=clock)
    assert second == (42, first[1] + 7.5)  # the time of each answer, not of the reading's making
    assert first[0] == 41 and failed is None
