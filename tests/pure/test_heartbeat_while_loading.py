"""A classic Heartbeat for a group whose group-partition is still being taken or loaded here
is answered NONE, as Kafka's GroupCoordinator answers it ("respond just blindly"): aiokafka
0.14 takes COORDINATOR_LOAD_IN_PROGRESS in a heartbeat answer for a fatal error and stops its
consumer (seen in tests/tansu/test_failover_clients.py). Other refusals pass through."""

from __future__ import annotations

import pytest

from coordinator.api.groups import GroupApi
from coordinator.listeners import Listener
from coordinator.security.client import Client
from protocol import ErrorCode as E, RequestHeader, encode_request
from protocol import messages as m
from protocol.schemas import HEARTBEAT

CLIENT = Client("10.0.0.1", Listener("CLIENTS", "PLAINTEXT", "127.0.0.1", 9092), "User:alice")


class Coordinator:
    """Routes every group to one answer, as ownership.Coordinator.route does while a
    group-partition is on its way here (or elsewhere)."""

    def __init__(self, error: E):
        self.error = error

    def route(self, group_id: str, empty_ok: bool = True, now: float | None = None):
        return self.error


@pytest.mark.parametrize("routed, answered", [(E.COORDINATOR_LOAD_IN_PROGRESS, E.NONE),
                                              (E.NOT_COORDINATOR, E.NOT_COORDINATOR),
                                              (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_NOT_AVAILABLE)])
def test_a_heartbeat_while_the_group_loads_is_answered_as_kafka_does(routed, answered):
    api = GroupApi(Coordinator(routed), topics=None)
    request = m.HeartbeatRequest(group_id="g", generation_id=3, member_id="m", group_instance_id=None)
    header = RequestHeader(HEARTBEAT.key, 4, 7, "client")
    assert api.heartbeat(header, request, CLIENT).error_code == answered
    frame = encode_request(header, request)[4:]
    assert api.stable_heartbeat(frame, 0.0, CLIENT) is None  # the general path answers it
