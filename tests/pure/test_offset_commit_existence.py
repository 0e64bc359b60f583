"""OffsetCommit stores offsets only for partitions that exist, as Kafka's
`handleOffsetCommitRequest` answers (issue 38, item 6): UNKNOWN_TOPIC_OR_PARTITION for each
partition of an unknown topic and each unknown partition of a known one, the others stored;
a partition the topic view lacks is asked of the source first (a topic created a moment ago
exists), and where the source cannot say, COORDINATOR_LOAD_IN_PROGRESS (retried by clients).

`OffsetApi` against a fake coordinator, store and topic source; no I/O.
"""

from __future__ import annotations

import math
import uuid
from types import CoroutineType, SimpleNamespace

import pytest
import trio
import trio.testing
from kazoo.exceptions import ConnectionLoss, NoNodeError

from coordinator.api.offsets import OffsetApi, existence_refusals, missing_partitions
from coordinator.cluster.ownership import Owned
from coordinator.listeners import Listener
from coordinator.security.client import Client
from coordinator.serving.pending import Pending
from coordinator.topics.brokers import BrokerTopics
from coordinator.topics.view import TopicView
from coordinator.topics.zookeeper import ZooKeeperTopics, legal_topic_name, topic_data
from protocol import ErrorCode as E, RequestHeader
from protocol.messages import build
from protocol.schemas import OFFSET_COMMIT

CLIENT = Client("10.0.0.1", Listener("CLIENTS", "PLAINTEXT", "127.0.0.1", 9092), "User:alice")
GROUP = "g"


class Store:
    def __init__(self):
        self.written: list[dict] = []  # each submitted commit's entries, in order
        self.durable: dict = {}

    def submit(self, group, entries, on_done, client=None):
        self.written.append({key: entry[0] for key, entry in entries.items()})
        trio.lowlevel.current_trio_token().run_sync_soon(on_done, None)  # confirmed later, as ZooKeeper does
        return []


class Groups:
    def __init__(self):
        self.error = E.NONE
        self.checked: list[tuple] = []

    def commit_check(self, group_id, member_id, generation, instance_id, member_epochs=False):
        self.checked.append((group_id, member_id, generation, member_epochs))
        return self.error


class Coordinator:
    def __init__(self):
        self.store, self.groups = Store(), Groups()
        self.owned = Owned(store=self.store, groups=self.groups)
        self.group_config = SimpleNamespace(max_commit_partitions=10_000)
        self.events = SimpleNamespace(emit=lambda *args, **kwargs: None)

    def route(self, group_id, empty_ok=True, now=None):
        return self.owned


class Source(TopicView):
    """A view of `orders` (3 partitions); `truth` is what the source says when asked (None:
    it cannot say); `gate`, when set, holds every answer until it is set."""

    def __init__(self):
        super().__init__()
        self.partitions = {"orders": 3}
        self.learned_at = 0.0
        self.truth: dict[str, int] | None = {"orders": 3}
        self.asked: list[set[str]] = []
        self.gate: trio.Event | None = None

    async def partition_counts(self, topics, timeout):
        self.asked.append(set(topics))
        if self.gate is not None:
            await self.gate.wait()
        await trio.sleep(0)
        return None if self.truth is None else {t: self.truth.get(t, 0) for t in topics}


def world():
    coordinator, source = Coordinator(), Source()
    return OffsetApi(coordinator, source), coordinator, source


def request(topics: dict[str, dict[int, int]], generation: int = 1, member: str = "m-1"):
    return build(OFFSET_COMMIT.request.struct, {
        "group_id": GROUP, "generation_id_or_member_epoch": generation, "member_id": member,
        "topics": [{"name": name, "partitions": [{"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1}
                                                  for p, o in offsets.items()]} for name, offsets in topics.items()]})


def begin(api, req, version: int = 7):
    return api.offset_commit(RequestHeader(OFFSET_COMMIT.key, version, 1, "test"), req, CLIENT)


async def finish(body):
    """The answer, however the handler gave it: at once, from a coroutine, or a Pending."""
    if type(body) is CoroutineType:
        body = await body
    if type(body) is Pending:
        made, resolved = [], trio.Event()
        body.on_resolved(lambda answer: (made.append(answer), resolved.set()))
        await resolved.wait()
        body = made[0]()
    return {(t.name, p.partition_index): E(p.error_code) for t in body.topics for p in t.partitions}


async def commit(api, req, version: int = 7):
    return await finish(begin(api, req, version))


async def test_an_unknown_topic_is_refused_per_partition_and_the_known_ones_stored():
    api, coordinator, source = world()
    answer = await commit(api, request({"nonexistent": {0: 5, 1: 6}, "orders": {0: 10, 2: 12}}))
    assert answer == {("nonexistent", 0): E.UNKNOWN_TOPIC_OR_PARTITION, ("nonexistent", 1): E.UNKNOWN_TOPIC_OR_PARTITION,
                      ("orders", 0): E.NONE, ("orders", 2): E.NONE}
    assert coordinator.store.written == [{("orders", 0): 10, ("orders", 2): 12}]
    assert source.asked == [{"nonexistent"}]  # the source was asked before refusing


async def test_an_unknown_partition_of_a_known_topic_is_refused():
    api, coordinator, source = world()
    answer = await commit(api, request({"orders": {1: 1, 3: 3, 7: 7}}))
    assert answer == {("orders", 1): E.NONE, ("orders", 3): E.UNKNOWN_TOPIC_OR_PARTITION,
                      ("orders", 7): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert coordinator.store.written == [{("orders", 1): 1}]


async def test_a_negative_partition_never_exists_and_is_refused_without_asking():
    api, coordinator, source = world()
    body = begin(api, request({"orders": {-1: 1, 0: 2}}))
    assert type(body) is Pending  # no wait: the view says enough
    assert await finish(body) == {("orders", -1): E.UNKNOWN_TOPIC_OR_PARTITION, ("orders", 0): E.NONE}
    assert source.asked == [] and coordinator.store.written == [{("orders", 0): 2}]


async def test_known_partitions_take_the_path_without_a_wait():
    api, coordinator, source = world()
    body = begin(api, request({"orders": {0: 1, 1: 2, 2: 3}}))
    assert type(body) is Pending and source.asked == []
    assert set((await finish(body)).values()) == {E.NONE}


async def test_a_topic_created_after_the_view_was_read_is_stored():
    """The view has not heard of `fresh` yet; the source, asked, has: not refused wrongly."""
    api, coordinator, source = world()
    source.truth = {"orders": 3, "fresh": 2}
    answer = await commit(api, request({"fresh": {0: 4, 1: 5}, "orders": {0: 1}}))
    assert set(answer.values()) == {E.NONE}
    assert coordinator.store.written == [{("fresh", 0): 4, ("fresh", 1): 5, ("orders", 0): 1}]


async def test_a_topic_grown_after_the_view_was_read_is_stored():
    api, coordinator, source = world()
    source.truth = {"orders": 5}
    answer = await commit(api, request({"orders": {4: 9, 5: 9}}))
    assert answer == {("orders", 4): E.NONE, ("orders", 5): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert coordinator.store.written == [{("orders", 4): 9}]


async def test_where_the_source_cannot_say_the_client_is_told_to_retry():
    api, coordinator, source = world()
    source.truth = None  # never read, or unreachable
    answer = await commit(api, request({"maybe": {0: 1}, "orders": {0: 2}}))
    assert answer == {("maybe", 0): E.COORDINATOR_LOAD_IN_PROGRESS, ("orders", 0): E.NONE}
    assert coordinator.store.written == [{("orders", 0): 2}]


@pytest.mark.parametrize("version", [2, 7, 9])
async def test_outside_a_generation_as_admin_clients_and_standalone_consumers_commit(version):
    """AlterConsumerGroupOffsets and assign()-and-commit consumers send generation -1."""
    api, coordinator, source = world()
    answer = await commit(api, request({"nonexistent": {0: 5}, "orders": {0: 7}}, generation=-1, member=""), version)
    assert answer == {("nonexistent", 0): E.UNKNOWN_TOPIC_OR_PARTITION, ("orders", 0): E.NONE}
    assert coordinator.store.written == [{("orders", 0): 7}]
    assert coordinator.groups.checked[-1][2:] == (-1, version >= 9)


async def test_nothing_that_exists_is_not_asked_of_the_group():
    """All refused before the coordinator: Kafka does not ask it (no generation check)."""
    api, coordinator, source = world()
    coordinator.groups.error = E.ILLEGAL_GENERATION
    answer = await commit(api, request({"nonexistent": {0: 5}}))
    assert answer == {("nonexistent", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert coordinator.groups.checked == [] and coordinator.store.written == []


async def test_a_stale_generation_answers_the_partitions_that_exist_only():
    api, coordinator, source = world()
    coordinator.groups.error = E.ILLEGAL_GENERATION
    answer = await commit(api, request({"nonexistent": {0: 5}, "orders": {0: 1}}))
    assert answer == {("nonexistent", 0): E.UNKNOWN_TOPIC_OR_PARTITION, ("orders", 0): E.ILLEGAL_GENERATION}
    assert coordinator.store.written == []


async def test_the_groups_commits_are_written_in_the_order_they_came_while_one_waits():
    """A commit waiting on the source holds the group's later commits behind it (pipelined
    commits of one partition must not land out of order), whatever order their tasks run in."""
    api, coordinator, source = world()
    source.gate = trio.Event()
    source.truth = {"orders": 3, "fresh": 1}
    first = begin(api, request({"fresh": {0: 1}, "orders": {0: 1}}))
    second = begin(api, request({"orders": {0: 2}}))
    third = begin(api, request({"orders": {0: 3}}))
    assert type(first) is type(second) is type(third) is CoroutineType
    answers = {}
    async with trio.open_nursery() as nursery:
        for name, body in reversed([("first", first), ("second", second), ("third", third)]):
            nursery.start_soon(lambda n=name, b=body: _keep(answers, n, finish(b)))
        await trio.testing.wait_all_tasks_blocked()
        assert coordinator.store.written == []
        source.gate.set()
    assert coordinator.store.written == [{("fresh", 0): 1, ("orders", 0): 1}, {("orders", 0): 2}, {("orders", 0): 3}]
    assert all(set(a.values()) == {E.NONE} for a in answers.values())
    assert api._lines == {}  # the line is gone with its last commit
    assert type(begin(api, request({"orders": {0: 4}}))) is Pending  # and the next takes the path without a wait


async def _keep(answers, name, answering):
    answers[name] = await answering


async def test_a_commit_whose_connection_closed_before_it_ran_does_not_hold_the_line():
    api, coordinator, source = world()
    dead = begin(api, request({"fresh": {0: 1}}))
    dead.close()  # what a connection closed before its task started does
    assert type(begin(api, request({"orders": {0: 2}}))) is Pending  # the line was only the dead one
    waiting = begin(api, request({"fresh": {0: 3}}))
    behind = begin(api, request({"orders": {0: 4}}))
    waiting.close()
    with trio.fail_after(5):
        assert await finish(behind) == {("orders", 0): E.NONE}
    assert coordinator.store.written == [{("orders", 0): 2}, {("orders", 0): 4}]


async def test_a_waiting_commit_cancelled_lets_the_next_go_on():
    api, coordinator, source = world()
    source.gate = trio.Event()
    waiting = begin(api, request({"fresh": {0: 1}}))
    behind = begin(api, request({"orders": {0: 2}}))
    answers = {}
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()
        nursery.start_soon(lambda: _run_in(scope, waiting))
        nursery.start_soon(lambda: _keep(answers, "behind", finish(behind)))
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
    assert answers == {"behind": {("orders", 0): E.NONE}}
    assert coordinator.store.written == [{("orders", 0): 2}]


async def _run_in(scope, body):
    with scope:
        await finish(body)


def test_missing_partitions_and_their_refusals_pure():
    req = request({"orders": {0: 1, 3: 1, -2: 1}, "x": {0: 1}, "denied": {0: 1}})
    missing = missing_partitions(req.topics, {("denied", 0): E.TOPIC_AUTHORIZATION_FAILED}, {"orders": 3})
    assert missing == [("orders", 3), ("orders", -2), ("x", 0)]
    assert existence_refusals(missing, {"orders": 4, "x": 0}) == {
        ("orders", -2): E.UNKNOWN_TOPIC_OR_PARTITION, ("x", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert existence_refusals(missing, None) == {
        ("orders", 3): E.COORDINATOR_LOAD_IN_PROGRESS, ("orders", -2): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("x", 0): E.COORDINATOR_LOAD_IN_PROGRESS}


# -- the sources: what `partition_counts` asks and answers ---------------------------------


async def test_a_view_without_a_source_answers_only_while_current(mock_clock):
    view = TopicView()
    view.partitions = {"t": 2}
    assert await view.partition_counts({"t", "u"}, 1.0) is None  # never learned
    view.learned_at = trio.current_time()
    assert await view.partition_counts({"t", "u"}, 1.0) == {"t": 2, "u": 0}


class ScriptedBrokers(BrokerTopics):
    """Rounds that learn `self.next` (topic -> partitions; None: no broker answers),
    without a broker: each round waits on `self.answer`."""

    def __init__(self):
        super().__init__([("127.0.0.1", 1)], max_age=math.inf)
        self.next: dict[str, int] | None = {}
        self.answer = trio.Event()

    async def _round(self) -> bool:
        await self.answer.wait()
        self.answer = trio.Event()
        if self.next is None:
            return False
        for name, count in self.next.items():
            self._set_topic(name, {p: [1] for p in range(count)}, uuid.UUID(int=0))
        self.learned_at = trio.current_time()
        return True


async def test_the_brokers_source_answers_from_a_round_begun_after_the_question():
    source = ScriptedBrokers()
    async with trio.open_nursery() as nursery:
        source.next = {"old": 1}
        nursery.start_soon(source.run)
        await trio.testing.wait_all_tasks_blocked()  # a round is under way, begun before the question
        got = []
        nursery.start_soon(lambda: _append(got, source.partition_counts({"new"}, 30.0)))
        await trio.testing.wait_all_tasks_blocked()
        source.next = {"old": 1}  # the round begun before: its answer is not taken
        source.answer.set()
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        source.next = {"old": 1, "new": 4}
        with trio.fail_after(5):
            while not got:
                source.answer.set()
                await trio.sleep(0.01)
        assert got == [{"new": 4}]
        source.next = None  # no broker answers
        got.clear()
        nursery.start_soon(lambda: _append(got, source.partition_counts({"new"}, 30.0)))
        with trio.fail_after(5):
            while not got:
                source.answer.set()
                await trio.sleep(0.01)
        assert got == [None]
        nursery.cancel_scope.cancel()


async def test_the_brokers_source_gives_up_after_its_timeout():
    source = ScriptedBrokers()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(source.run)
        await trio.testing.wait_all_tasks_blocked()
        assert await source.partition_counts({"t"}, 0.05) is None  # the round never ends
        nursery.cancel_scope.cancel()


async def _append(into, answering):
    into.append(await answering)


class ReadingBridge:
    def __init__(self, znodes, fail=False):
        self.znodes, self.fail, self.asked = znodes, fail, []

    async def read_many(self, reads):
        self.asked.append([path for _, path in reads])
        if self.fail:
            raise ConnectionLoss()
        return [(self.znodes[path], None) if path in self.znodes else NoNodeError() for _, path in reads]


async def test_the_zookeeper_source_reads_the_registry_now_not_the_view():
    zk = ReadingBridge({"/brokers/topics/fresh": topic_data({0: [1], 1: [1]}, uuid.UUID(int=7))})
    source = ZooKeeperTopics(zk)
    counts = await source.partition_counts({"fresh", "gone", "bad/name", ""}, 1.0)
    assert counts == {"fresh": 2, "gone": 0, "bad/name": 0, "": 0}
    assert zk.asked == [["/brokers/topics/fresh", "/brokers/topics/gone"]]  # one request; illegal names not asked
    assert await ZooKeeperTopics(ReadingBridge({}, fail=True)).partition_counts({"t"}, 1.0) is None


def test_legal_topic_names():
    assert legal_topic_name("orders.v1_x-2") and legal_topic_name("a" * 249)
    assert not any(legal_topic_name(n) for n in ("", ".", "..", "a" * 250, "a/b", "é", "a b"))
