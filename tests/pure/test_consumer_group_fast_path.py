"""The steady ConsumerGroupHeartbeat's fast path (`GroupApi.steady_consumer_heartbeat`)
against the general path (`GroupApi.consumer_group_heartbeat`), for the same state.

Two worlds are driven through the same requests (members joining, reconciling, leaving,
the clock moving, partitions added, the ACLs replaced); at each probe, one world answers
through the fast path (the general path when it declines, as the connection does), the
other through the general path alone. Their answers must be the same bytes and their
states the same afterwards. Deterministic cases show that the fast path does answer the
steady member, and what it leaves to the general path. Under trio's MockClock; no I/O.
"""

from __future__ import annotations

import uuid

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.api.groups import GroupApi
from coordinator.assignors import BUILT_IN, CONSUMER_GROUP_ASSIGNORS
from coordinator.cluster.ownership import Owned
from coordinator.groups.consumer_group import ConsumerGroupConfig
from coordinator.groups.group import GroupConfig
from coordinator.groups.manager import GroupSet
from coordinator.listeners import Listener
from coordinator.security.client import Client
from protocol import ErrorCode as E, RequestHeader, decode_request, decode_response, encode_request, encode_response
from protocol import messages as m
from protocol.schemas import CONSUMER_GROUP_HEARTBEAT as CGH
from tests.support.stored_groups import StoredGroups

TOPIC_IDS = {"t": uuid.UUID(int=1), "u": uuid.UUID(int=2)}
CLIENT = Client("10.0.0.1", Listener("CLIENTS", "PLAINTEXT", "127.0.0.1", 9092), "User:alice")
SESSION = 10.0


class Topics:
    def __init__(self):
        self.topic_ids = dict(TOPIC_IDS)
        self.names_by_id = {v: k for k, v in TOPIC_IDS.items()}


class Authorizer:
    """Allows everything but what `denied` names; a new one is an ACL change."""

    def __init__(self, denied=()):
        self.denied = set(denied)

    def allows(self, principal, host, operation, resource, name) -> bool:
        return name not in self.denied


class Acls:
    def __init__(self):
        self.authorizer = Authorizer()


class Coordinator:
    def __init__(self, groups: GroupSet, config: GroupConfig):
        self.owned = Owned(store=None, groups=groups)
        self.group_config = config

    def route(self, group_id: str, empty_ok: bool = True, now: float | None = None):
        return self.owned if group_id else E.INVALID_GROUP_ID


Store = StoredGroups


class World:
    def __init__(self, acls: bool):
        config = GroupConfig(initial_rebalance_delay=0.0, min_session_timeout=1.0,
                             consumer=ConsumerGroupConfig(session_timeout=SESSION, heartbeat_interval=3.0))
        self.store = Store()
        self.counts = {"t": 6, "u": 4}
        self.asked: list[str] = []  # topics the topic source was asked to look for
        self.groups = GroupSet(config, dict(BUILT_IN), self._partitions_of, self.store,
                               consumer_assignors={"uniform": CONSUMER_GROUP_ASSIGNORS["uniform"]},
                               topic_counts=self.counts)
        self.api = GroupApi(Coordinator(self.groups, config), Topics(), Acls() if acls else None)
        self.fast = 0  # answers the fast path gave

    def _partitions_of(self, topic: str) -> int:
        self.asked.append(topic)
        return self.counts.get(topic, 0)

    async def general(self, frame: bytes) -> bytes:
        header, request = decode_request(frame)
        return encode_response(header, await self.api.consumer_group_heartbeat(header, request, CLIENT))

    async def answer(self, frame: bytes, fast: bool) -> bytes:
        if fast:
            answer = self.api.steady_consumer_heartbeat(frame, trio.current_time(), CLIENT)
            if answer is not None:
                self.fast += 1
                return answer
        return await self.general(frame)

    def state(self):
        group = self.groups.consumer_groups.get("g")
        if group is None:
            return None
        members = {mid: {k: v for k, v in vars(x).items() if k != "may_describe"} | {
            "judged": x.may_describe is not None} for mid, x in group.members.items()}
        return (members, group.group_epoch, group.assignment_epoch, group.target, group.holders, group.version,
                dict(self.groups._stored), set(self.groups._armed), len(self.store.written), list(self.asked))


def frame(member_id: str, epoch: int, correlation_id: int = 1, version: int = 1, **fields) -> bytes:
    request = m.ConsumerGroupHeartbeatRequest(group_id=fields.pop("group_id", "g"), member_id=member_id,
                                              member_epoch=epoch, **fields)
    return encode_request(RequestHeader(CGH.key, version, correlation_id, "client"), request)[4:]


class Member:
    """A cooperating client's view: its epoch and the partitions it was last given."""

    def __init__(self, member_id: str, regex: bool):
        self.member_id, self.regex = member_id, regex
        self.epoch = 0
        self.owned: list | None = None
        self.changed = False  # its assignment changed since it last reported it


OPS = st.lists(st.one_of(
    st.tuples(st.just("join"), st.integers(0, 3)),
    st.tuples(st.just("beat"), st.integers(0, 3)),
    st.tuples(st.just("probe"), st.integers(0, 3), st.sampled_from(["-1", "same", "other", "stale", "ahead",
                                                                     "unknown", "v0"])),
    st.tuples(st.just("leave"), st.integers(0, 3)),
    st.tuples(st.just("jump"), st.floats(0.1, 3.0)),
    st.tuples(st.just("grow"), st.just("u")),
    st.tuples(st.just("acls"), st.just(0)),
), min_size=1, max_size=30)
VARIANTS = st.sampled_from(["-1", "-1", "same", "other", "stale", "ahead", "unknown", "v0"])


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(ops=OPS, acls=st.booleans(), regex=st.lists(st.booleans(), min_size=4, max_size=4),
       variants=st.lists(VARIANTS, min_size=4, max_size=4))
def test_the_fast_path_answers_as_the_general_path_or_declines(ops, acls, regex, variants):
    async def main():
        fast, general = World(acls), World(acls)
        members = [Member(f"member-{i}", regex[i]) for i in range(4)]
        correlation = 0

        async def both(f: bytes, probe: bool = False) -> bytes:
            a = await fast.answer(f, fast=probe)
            b = await general.answer(f, fast=False)
            assert a == b
            assert fast.state() == general.state()
            return a

        # after each step, every member that has an epoch is probed (a variant of its steady
        # heartbeat each): most probes find a state that is not steady, enough find one that is
        steps = [step for op in ops for step in (op, *[("probe", i, variants[(i + len(op)) % 4]) for i in range(4)])]
        for op in steps:
            correlation += 1
            kind = op[0]
            if kind == "probe" and members[op[1]].epoch <= 0 and op[2] != "unknown":
                continue
            if kind in ("join", "beat", "probe", "leave"):
                x = members[op[1]]
                if kind == "join":
                    # member 3 also names a topic that does not exist (yet): the source is asked for it
                    subscription = ({"subscribed_topic_regex": "t|u"} if x.regex else
                                    {"subscribed_topic_names": ["t", "x"] if op[1] == 3 else ["t"]})
                    f = frame(x.member_id, 0, correlation, rebalance_timeout_ms=30_000, topic_partitions=[],
                              **subscription)
                elif kind == "beat":  # reports what it holds: reconciles
                    f = frame(x.member_id, x.epoch, correlation, topic_partitions=[
                        m.ConsumerGroupHeartbeatTopicPartitions(topic_id=TOPIC_IDS[t], partitions=ps)
                        for t, ps in (x.owned or [])])
                elif kind == "leave":
                    f = frame(x.member_id, -1, correlation)
                else:
                    variant = op[2]
                    epoch = x.epoch + {"stale": -1, "ahead": 1}.get(variant, 0)
                    timeout = {"-1": -1, "other": 12_345}.get(variant, 30_000)
                    f = frame("nobody" if variant == "unknown" else x.member_id, epoch, correlation,
                              version=0 if variant == "v0" else 1, rebalance_timeout_ms=timeout)
                answer = await both(f, probe=kind == "probe")
                _, body = decode_response(CGH.key, 0 if (kind == "probe" and op[2] == "v0") else 1, answer[4:])
                if body.error_code == E.NONE and body.member_id == x.member_id:
                    x.epoch = body.member_epoch
                    if body.assignment is not None:
                        names = {v: k for k, v in TOPIC_IDS.items()}
                        x.owned = [(names[t.topic_id], t.partitions) for t in body.assignment.topic_partitions]
                    if x.epoch < 0:
                        x.epoch, x.owned = 0, None
            elif kind == "jump":
                clock.jump(op[1])
            elif kind == "grow":
                for w in (fast, general):
                    w.counts["u"] += 1
                    group = w.groups.consumer_groups.get("g")
                    if group is not None and group.topics_changed():
                        w.groups._consumer_settled(group, trio.current_time())
                        await w.groups._stored_now(group)
                assert fast.state() == general.state()
            elif kind == "acls" and acls:
                for w in (fast, general):
                    w.api.acls.authorizer = Authorizer()
        ANSWERED.append(fast.fast)

    clock = trio.testing.MockClock()
    trio.run(main, clock=clock)


ANSWERED: list[int] = []  # per example, how many probes the fast path answered


def test_the_property_test_above_saw_the_fast_path_answer():
    """Not vacuous: across its examples the fast path answered probes (run after it; alone, it runs it)."""
    if not ANSWERED:
        test_the_fast_path_answers_as_the_general_path_or_declines()
    assert sum(ANSWERED) >= 50, ANSWERED


async def _settle(w: World, member_id: str = "m1", regex: bool = False) -> int:
    """The member joins, reports what it was given, and is steady: its epoch."""
    subscription = {"subscribed_topic_regex": "t"} if regex else {"subscribed_topic_names": ["t"]}
    await w.general(frame(member_id, 0, rebalance_timeout_ms=30_000, topic_partitions=[], **subscription))
    group = w.groups.consumer_groups["g"]
    member = group.members[member_id]
    epoch = member.epoch
    owned = [m.ConsumerGroupHeartbeatTopicPartitions(topic_id=TOPIC_IDS[t], partitions=ps)
             for t, ps in sorted({t: sorted(p for tt, p in member.assigned if tt == t)
                                  for t, _ in member.assigned}.items())]
    await w.general(frame(member_id, epoch, topic_partitions=owned))
    return group.members[member_id].epoch


def test_a_steady_member_is_answered_by_the_fast_path_as_the_general_path_answers():
    async def main():
        fast, general = World(False), World(False)
        for w in (fast, general):
            await _settle(w)
        epoch = fast.groups.consumer_groups["g"].members["m1"].epoch
        assert epoch > 0
        clock.jump(4.0)
        for timeout in (-1, 30_000):
            f = frame("m1", epoch, 9, rebalance_timeout_ms=timeout)
            answer = fast.api.steady_consumer_heartbeat(f, trio.current_time(), CLIENT)
            assert answer is not None
            assert answer == await general.general(f)
            assert fast.state() == general.state()
        member = fast.groups.consumer_groups["g"].members["m1"]
        assert member.session_deadline == trio.current_time() + SESSION  # kept alive

    clock = trio.testing.MockClock()
    trio.run(main, clock=clock)


def test_what_is_not_steady_is_left_to_the_general_path():
    async def main():
        w = World(True)
        epoch = await _settle(w, regex=True)
        now = trio.current_time
        steady = frame("m1", epoch)
        assert w.api.steady_consumer_heartbeat(steady, now(), CLIENT) is not None
        for f in (frame("m1", epoch + 1), frame("m1", epoch - 1), frame("m2", epoch), frame("m1", 0),
                  frame("m1", epoch, rebalance_timeout_ms=1_000), frame("m1", epoch, rack_id="r"),
                  frame("m1", epoch, topic_partitions=[]), frame("m1", epoch, subscribed_topic_names=["t"]),
                  frame("m1", epoch, group_id="h")):
            assert w.api.steady_consumer_heartbeat(f, now(), CLIENT) is None
        # the ACLs changed: a new decider, which the general path judges the expression by
        w.api.acls.authorizer = Authorizer()
        assert w.api.steady_consumer_heartbeat(steady, now(), CLIENT) is None
        await w.general(steady)
        assert w.api.steady_consumer_heartbeat(steady, now(), CLIENT) is not None
        # the group may not be read: the general path refuses it
        w.api.acls.authorizer = Authorizer(denied={"g"})
        assert w.api.steady_consumer_heartbeat(steady, now(), CLIENT) is None
        w.api.acls.authorizer = Authorizer()
        await w.general(steady)
        # another member joins: the group epoch moves, the first member has a step to take
        await w.general(frame("m2", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=["t"],
                              topic_partitions=[]))
        assert w.api.steady_consumer_heartbeat(steady, now(), CLIENT) is None

    trio.run(main, clock=trio.testing.MockClock())


def test_nothing_is_answered_fast_while_a_change_waits_to_be_stored():
    async def main():
        w = World(False)
        epoch = await _settle(w)
        steady = frame("m1", epoch)
        assert w.api.steady_consumer_heartbeat(steady, trio.current_time(), CLIENT) is not None
        w.store.gate = trio.Event()
        async with trio.open_nursery() as nursery:
            # a change (its rebalance timeout) on its way to the store: the general path waits for it
            nursery.start_soon(w.general, frame("m1", epoch, rebalance_timeout_ms=60_000))
            await trio.testing.wait_all_tasks_blocked()
            assert w.api.steady_consumer_heartbeat(frame("m1", epoch, rebalance_timeout_ms=60_000),
                                                   trio.current_time(), CLIENT) is None
            w.store.gate.set()
        assert w.api.steady_consumer_heartbeat(frame("m1", epoch, rebalance_timeout_ms=60_000),
                                               trio.current_time(), CLIENT) is not None

    trio.run(main, clock=trio.testing.MockClock())


def test_a_group_whose_timer_is_not_armed_is_left_to_the_general_path():
    async def main():
        w = World(False)
        epoch = await _settle(w)
        w.groups._armed.clear()  # as a group just loaded by a new owner
        assert w.api.steady_consumer_heartbeat(frame("m1", epoch), trio.current_time(), CLIENT) is None
        await w.general(frame("m1", epoch))
        assert "g" in w.groups._armed
        assert w.api.steady_consumer_heartbeat(frame("m1", epoch), trio.current_time(), CLIENT) is not None

    trio.run(main, clock=trio.testing.MockClock())


def test_a_member_subscribed_to_a_topic_not_known_yet_is_left_to_the_general_path():
    async def main():
        w = World(False)
        epoch = await _settle(w)
        steady = frame("m1", epoch)
        assert w.api.steady_consumer_heartbeat(steady, trio.current_time(), CLIENT) is not None
        w.counts.pop("t")  # gone from the source's view: the general path has the source look for it
        asked = len(w.asked)
        assert w.api.steady_consumer_heartbeat(steady, trio.current_time(), CLIENT) is None
        await w.general(steady)
        assert w.asked[asked:] == ["t"]

    trio.run(main, clock=trio.testing.MockClock())
