"""Metadata answered from the cache of encoded answers (`api.cluster.MetadataCache`): the
cached answer is the one made afresh, byte for byte but for the correlation id, in every
version served; it is made again after any change of the topic view (the real `TopicView`
and its sources' own ways of changing it), of the live instances, of the ACLs; ACLs still
decide per principal (and per host where a topic's ACL names one); it stays within its
bounds."""

from __future__ import annotations

import json
import struct
import uuid
from types import SimpleNamespace

import pytest
import trio
from kazoo.client import KazooClient

from coordinator import metrics
from coordinator.api.cluster import ClusterApi, MetadataCache
from coordinator.api.versions import SUPPORTED
from coordinator.cluster.membership import Instance
from coordinator.listeners import Listener
from coordinator.security.acls.authorizer import (Acl, Authorizer, Operation, PatternType, Permission, Resource,
                                                  ResourceType)
from coordinator.security.client import Client
from coordinator.serving.interfaces import CloseConnection
from coordinator.store.bridge import ZooKeeperBridge
from coordinator.topics.brokers import BrokerTopics
from coordinator.topics.view import Broker, PartitionState, TopicView
from coordinator.topics.zookeeper import ZooKeeperTopics
from protocol import RequestHeader, decode_request, decode_response, encode_request, encode_response
from protocol import messages as m
from protocol.messages import build
from protocol.schemas import METADATA

PLAINTEXT = Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)
SSL = Listener("SSL", "SSL", "127.0.0.1", 9093)
ME = Instance(1, "127.0.0.1", 9092, (("PLAINTEXT", "127.0.0.1", 9092), ("SSL", "gk-1.example", 9093)))
OTHER = Instance(2, "127.0.0.2", 9092, (("PLAINTEXT", "127.0.0.2", 9092), ("SSL", "gk-2.example", 9093)))
VERSIONS = range(SUPPORTED[METADATA.key][0], SUPPORTED[METADATA.key][1] + 1)
_correlation = iter(range(1, 1 << 30))


def a_view(topics: int = 3, partitions: int = 4) -> TopicView:
    view = TopicView()
    for b in range(3):
        view.brokers[b] = Broker(b, f"kafka-{b}.example", 9092, rack=f"r{b}" if b else None)
    for t in range(topics):
        name = f"topic-{t}"
        replicas = {p: [(p + i) % 3 for i in range(3)] for p in range(partitions)}
        view._set_topic(name, replicas, uuid.uuid4())
        for p in range(partitions - 1):  # the last partition without a known leader
            view.states[(name, p)] = PartitionState(replicas[p][0], tuple(replicas[p][:2]), 7)
    view._set_topic("__consumer_offsets", {0: [0]}, uuid.uuid4())
    view.cluster_id, view.controller_id = "kafka-cluster", 1
    return view


def an_api(view, acls=None, cache_bytes: int = 32 * 2**20, live=None) -> ClusterApi:
    membership = SimpleNamespace(me=ME, live={1: ME} if live is None else live)
    return ClusterApi(SimpleNamespace(membership=membership), view, acls, metadata_cache_bytes=cache_bytes)


def client(principal: str = "User:ANONYMOUS", host: str = "10.0.0.1", listener: Listener = PLAINTEXT) -> Client:
    return Client(host, listener, principal)


def request(version: int, topics=None, *, correlation: int | None = None, client_id: str | None = "rdkafka",
            auto: bool = True, operations: bool = False) -> bytes:
    """A Metadata request frame (no size prefix, as handlers get it): `topics` None for all
    (v0: the empty list), else names, or (v10+) topic ids."""
    if topics is None:
        listed = [] if version == 0 else None
    else:
        listed = [{"topic_id": t, "name": None} if isinstance(t, uuid.UUID) else {"name": t} for t in topics]
    body = build(METADATA.request.struct, {"topics": listed, "allow_auto_topic_creation": auto,
                                           "include_cluster_authorized_operations": operations,
                                           "include_topic_authorized_operations": operations})
    correlation = next(_correlation) if correlation is None else correlation
    return encode_request(RequestHeader(METADATA.key, version, correlation, client_id), body)[4:]


def cached(api: ClusterApi, frame: bytes, who: Client) -> bytes:
    """The answer's frame (size prefix included) as the server gets it from the cache's route."""
    handler, waits, frame_route = api.route(METADATA.key, struct.unpack_from(">h", frame, 2)[0])
    assert (waits, frame_route) == (False, True) and handler == api.metadata_frame
    out = []
    handler(SimpleNamespace(client=who), frame).on_resolved(lambda answer: out.append(answer()))
    return out[0]


def fresh(api: ClusterApi, frame: bytes, who: Client) -> bytes:
    """The answer made afresh, as the path without the cache makes it."""
    header, body = decode_request(frame)
    return encode_response(header, api.metadata(header, body, who))


def assert_same_answers(api: ClusterApi, frame: bytes, who: Client) -> bytes:
    """Asked twice, the second from the cache: both equal the fresh answer, each with its own
    correlation id. Returns the answer."""
    first = cached(api, frame, who)
    hits = api.metadata_cache.hits
    again = cached(api, _renumbered(frame, -7), who)
    assert api.metadata_cache.hits == hits + 1  # from the cache
    assert first == fresh(api, frame, who)
    assert again == fresh(api, _renumbered(frame, -7), who)
    assert first[8:] == again[8:] and struct.unpack_from(">i", again, 4)[0] == -7
    return first


def _renumbered(frame: bytes, correlation: int) -> bytes:
    return frame[:4] + struct.pack(">i", correlation) + frame[8:]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_cached_answer_is_the_fresh_one_in_every_version(version):
    view = a_view()
    api = an_api(view)
    who = client()
    asks = [request(version), request(version, ["topic-1", "missing", "topic-0"]),
            request(version, auto=False, client_id=None), request(version, ["topic-2"], operations=True)]
    if version >= 10:  # by topic id (one not known: v12, where a topic's name may be null)
        asks.append(request(version, [view.topic_ids["topic-2"]] + [uuid.uuid4()] * (version >= 12)))
    for frame in asks:
        assert_same_answers(api, frame, who)
    cache = api.metadata_cache
    # each made once at most (requests that differ only in flags a version lacks are one)
    assert cache.misses == len(cache) <= len(asks) and cache.hits + cache.misses == 2 * len(asks)
    # another client id, a header's tagged field: the same request, answered from the cache
    hits = cache.hits
    assert cached(api, request(version, client_id="another"), who)[8:] == cached(api, asks[0], who)[8:]
    assert cache.hits == hits + 2
    # the answer is what a client reads: every partition, the leaderless one without a leader
    _, answer = decode_response(METADATA.key, version, cached(api, asks[0], who)[4:])
    assert sum(len(t.partitions) for t in answer.topics) == 3 * 4 + 1
    assert {b.node_id for b in answer.brokers} == {0, 1, 2, 1_000_000_001}


def test_the_listener_is_part_of_the_key():
    api = an_api(a_view())
    plain, ssl = cached(api, request(12), client()), cached(api, request(12), client(listener=SSL))
    assert b"gk-1.example" in ssl and b"gk-1.example" not in plain
    assert_same_answers(api, request(12), client(listener=SSL))
    assert len(api.metadata_cache) == 2


def _every_kind_of_change(view: TopicView):
    """Each change a source makes to a view, in the ways the sources make them."""
    yield "leader", lambda: view.states.__setitem__(("topic-0", 0), PartitionState(2, (2, 0), 8))
    yield "isr", lambda: view.states.__setitem__(("topic-0", 0), PartitionState(2, (2,), 8))
    yield "leader epoch", lambda: view.states.__setitem__(("topic-0", 0), PartitionState(2, (2,), 9))
    yield "leader lost", lambda: view.states.pop(("topic-0", 0))
    yield "leader found", lambda: view.states.__setitem__(("topic-0", 3), PartitionState(0, (0,), 1))
    yield "partitions added", lambda: view._set_topic("topic-1", {p: [0] for p in range(6)}, view.topic_ids["topic-1"])
    yield "replicas moved", lambda: view._set_topic("topic-1", {**{p: [0] for p in range(6)}, 5: [1, 2]},
                                                    view.topic_ids["topic-1"])
    yield "topic created", lambda: view._set_topic("new", {0: [1]}, uuid.uuid4())
    yield "topic re-created", lambda: view._set_topic("new", {0: [1]}, uuid.uuid4())
    yield "topic deleted", lambda: view._forget("topic-2")
    yield "broker joined", lambda: view.brokers.__setitem__(3, Broker(3, "kafka-3.example", 9092))
    yield "broker moved", lambda: view.brokers.__setitem__(3, Broker(3, "kafka-3.example", 9093))
    yield "broker left", lambda: view.brokers.pop(3)
    yield "brokers replaced", lambda: setattr(view, "brokers", {0: Broker(0, "kafka-0.example", 9092)})
    yield "brokers cleared", lambda: view.brokers.clear()
    yield "cluster id", lambda: setattr(view, "cluster_id", "another")
    yield "controller", lambda: setattr(view, "controller_id", 0)
    yield "controller unknown", lambda: setattr(view, "controller_id", None)


@pytest.mark.parametrize("version", [0, 1, 9, 12])
def test_every_change_of_the_topic_view_is_seen(version):
    view = a_view()
    api = an_api(view)
    who = client()
    frames = [request(version), request(version, ["topic-0", "topic-1", "new"])]
    before = [assert_same_answers(api, f, who) for f in frames]
    for kind, change in _every_kind_of_change(view):
        changes = view.changes
        change()
        assert view.changes > changes, kind
        after = [assert_same_answers(api, f, who) for f in frames]
        if version == 12:  # every change shows there (older versions lack epochs, ids, ...)
            assert after[0][8:] != before[0][8:], kind
        before = after


def test_what_is_written_again_unchanged_is_no_change():
    view = a_view()
    changes = view.changes
    view.states[("topic-0", 0)] = PartitionState(*view.states[("topic-0", 0)].__dict__.values())
    view._set_topic("topic-1", {p: list(r) for p, r in view.replicas["topic-1"].items()}, view.topic_ids["topic-1"])
    view.brokers = dict(view.brokers)
    view.cluster_id, view.controller_id = "kafka-cluster", 1
    view.states.pop(("nowhere", 0), None)
    assert view.changes == changes


def test_the_brokers_source_answered_alike_twice_keeps_the_cache():
    """BrokerTopics takes each answer of the cluster in whole (every metadata_max_age_ms):
    the same answer again changes nothing; a new leader does."""
    def cluster_answer(leader: int):
        return m.MetadataResponse(
            brokers=[m.MetadataResponseBroker(node_id=b, host=f"kafka-{b}", port=9092) for b in (1, 2)],
            cluster_id="c1", controller_id=1, topics=[m.MetadataResponseTopic(
                name="orders", topic_id=uuid.UUID(int=5), partitions=[
                    m.MetadataResponsePartition(partition_index=p, leader_id=leader, leader_epoch=3,
                                                replica_nodes=[1, 2], isr_nodes=[1, 2]) for p in range(3)])])

    async def main():
        source = BrokerTopics([("127.0.0.1", 1)], max_age=5.0)
        api = an_api(source)
        source._learn(cluster_answer(1))
        first = assert_same_answers(api, request(12), client())
        changes = source.changes
        source._learn(cluster_answer(1))
        assert source.changes == changes
        assert cached(api, request(12, correlation=0), client())[8:] == first[8:]
        assert api.metadata_cache.misses == 1
        source._learn(cluster_answer(2))
        assert source.changes > changes
        moved = assert_same_answers(api, request(12), client())
        assert moved[8:] != first[8:]
        _, answer = decode_response(METADATA.key, 12, moved[4:])
        assert {p.leader_id for t in answer.topics for p in t.partitions} == {2}
    trio.run(main)


def test_the_zookeeper_source_changes_are_seen(zookeeper):
    """The ZooKeeper source, kept current by watches: a leader elected, a broker gone."""
    name = f"cached-{uuid.uuid4().hex[:8]}"

    async def main():
        zk = ZooKeeperBridge(zookeeper.connect_string)
        await zk.start()
        writer = KazooClient(hosts=zookeeper.connect_string)
        await trio.to_thread.run_sync(lambda: writer.start(timeout=10))
        try:
            async with trio.open_nursery() as nursery:
                registry = ZooKeeperTopics(zk)
                await nursery.start(registry.run)
                api = an_api(registry)

                def leaders():
                    _, answer = decode_response(METADATA.key, 12, cached(api, request(12, [name]), client())[4:])
                    return [p.leader_id for t in answer.topics for p in t.partitions]

                async def until(condition):
                    with trio.fail_after(10):
                        while not condition():
                            await trio.sleep(0.01)

                await trio.to_thread.run_sync(lambda: writer.create(
                    "/brokers/ids/41", json.dumps({"host": "b41", "port": 9092}).encode(), makepath=True))
                await trio.to_thread.run_sync(lambda: writer.create(
                    f"/brokers/topics/{name}", json.dumps({"version": 1, "partitions": {"0": [41]}}).encode(),
                    makepath=True))
                await until(lambda: leaders() == [-1])
                await trio.to_thread.run_sync(lambda: writer.create(
                    f"/brokers/topics/{name}/partitions/0/state",
                    json.dumps({"leader": 41, "leader_epoch": 1, "isr": [41]}).encode(), makepath=True))
                await until(lambda: leaders() == [41])
                assert_same_answers(api, request(12, [name]), client())
                await trio.to_thread.run_sync(lambda: writer.delete("/brokers/ids/41"))
                await until(lambda: leaders() == [-1])  # its leader not live: no leader
                assert_same_answers(api, request(12), client())
                nursery.cancel_scope.cancel()
        finally:
            await trio.to_thread.run_sync(lambda: writer.delete(f"/brokers/topics/{name}", recursive=True))
            await trio.to_thread.run_sync(writer.stop)
            writer.close()
            await zk.stop()
    trio.run(main)


def test_a_change_of_the_live_instances_is_seen():
    view = a_view()
    api = an_api(view)
    membership = api.coordinator.membership
    alone = assert_same_answers(api, request(12), client())
    membership.live = {1: ME, 2: OTHER}  # as Membership replaces it
    both = assert_same_answers(api, request(12), client())
    assert b"127.0.0.2" in both and b"127.0.0.2" not in alone
    membership.live[2] = Instance(2, "127.0.0.3", 9092)  # changed in place, and another address
    moved = assert_same_answers(api, request(12), client())
    assert b"127.0.0.3" in moved and b"127.0.0.2" not in moved
    view.controller_id = None  # the controller is then our lowest instance's node
    assert_same_answers(api, request(12), client())
    membership.live = {2: Instance(2, "127.0.0.3", 9092)}  # we are counted all the same
    membership.live = {0: Instance(0, "127.0.0.9", 9092), 1: ME}
    lowest = assert_same_answers(api, request(12), client())
    _, answer = decode_response(METADATA.key, 12, lowest[4:])
    assert answer.controller_id == 1_000_000_000


class Acls:
    """What the API reads of an AclStore: its ACLs and the authorizer made of them."""

    def __init__(self, acls: dict, super_users=frozenset()):
        self.acls = acls
        self.authorizer = Authorizer(acls, super_users)


def _describe(topic: str, principal: str, host: str = "*", permission=Permission.ALLOW):
    return Resource(ResourceType.TOPIC, topic, PatternType.LITERAL), Acl(principal, host, Operation.DESCRIBE,
                                                                         permission)


def _acls(*entries) -> Acls:
    acls: dict = {}
    for resource, acl in entries:
        acls[resource] = acls.get(resource, frozenset()) | {acl}
    return Acls(acls, super_users=frozenset({"User:admin"}))


def _topics(frame: bytes, version: int = 12) -> dict[str, int]:
    _, answer = decode_response(METADATA.key, version, frame[4:])
    return {t.name: t.error_code for t in answer.topics}


def test_acls_still_decide_per_principal():
    view = a_view()
    acls = _acls(_describe("topic-0", "User:alice"), _describe("topic-1", "User:bob"))
    api = an_api(view, acls)
    alice, bob, admin = client("User:alice"), client("User:bob"), client("User:admin")
    assert _topics(assert_same_answers(api, request(12), alice)) == {"topic-0": 0}
    assert _topics(assert_same_answers(api, request(12), bob)) == {"topic-1": 0}
    assert set(_topics(assert_same_answers(api, request(12), admin))) == {"topic-0", "topic-1", "topic-2",
                                                                         "__consumer_offsets"}
    assert _topics(assert_same_answers(api, request(12, ["topic-1", "topic-0"]), alice)) == {
        "topic-1": 29, "topic-0": 0}  # TOPIC_AUTHORIZATION_FAILED
    # alice from another host: the same answer, from the cache (no ACL names a host)
    misses = api.metadata_cache.misses
    assert _topics(cached(api, request(12), client("User:alice", host="10.9.9.9"))) == {"topic-0": 0}
    assert api.metadata_cache.misses == misses
    # the ACLs change: made again
    api.acls = _acls(_describe("topic-0", "User:alice"), _describe("topic-2", "User:alice"))
    assert _topics(assert_same_answers(api, request(12), alice)) == {"topic-0": 0, "topic-2": 0}


def test_an_acl_that_names_a_host_keys_answers_by_host_too():
    view = a_view()
    api = an_api(view, _acls(_describe("topic-0", "User:alice", host="10.0.0.1"), _describe("topic-1", "User:alice")))
    here, there = client("User:alice", host="10.0.0.1"), client("User:alice", host="10.0.0.2")
    assert _topics(assert_same_answers(api, request(12), here)) == {"topic-0": 0, "topic-1": 0}
    assert _topics(assert_same_answers(api, request(12), there)) == {"topic-1": 0}


def test_denials_are_counted_for_answers_from_the_cache_too():
    api = an_api(a_view(), _acls(_describe("topic-0", "User:alice")))
    alice = client("User:alice")
    denials = metrics.AUTHORIZATION_DENIALS.labels(ResourceType.TOPIC.value, Operation.DESCRIBE.value)
    before = denials._value.get()
    cached(api, request(12), alice)  # made: 3 topics denied (topic-1, topic-2, __consumer_offsets)
    made = denials._value.get() - before
    cached(api, request(12), alice)  # from the cache
    assert made == 3 and denials._value.get() - before == 2 * made
    cached(api, request(12, ["topic-1"]), alice)
    cached(api, request(12, ["topic-1"]), alice)
    assert denials._value.get() - before == 2 * made + 2


def test_the_cache_keeps_within_its_bounds_least_recently_used_out_first():
    view = a_view(topics=8, partitions=16)
    api = an_api(view)
    who = client()
    one = len(cached(api, request(12, ["topic-0"]), who))
    api.metadata_cache = cache = MetadataCache(max_bytes=one * 3 + one // 2, max_answers=10)
    frames = [request(12, [f"topic-{t}"]) for t in range(6)]
    for frame in frames[:3]:
        cached(api, frame, who)
    cached(api, frames[0], who)  # used again: the least recently used is now topic-1's
    cached(api, frames[3], who)
    assert len(cache) == 3 and cache.bytes <= cache.max_bytes
    hits = cache.hits
    cached(api, frames[0], who)
    cached(api, frames[1], who)
    assert cache.hits == hits + 1  # topic-0's kept, topic-1's dropped
    api.metadata_cache = cache = MetadataCache(max_bytes=10 * 2**20, max_answers=2)
    for frame in frames:
        cached(api, frame, who)
    assert len(cache) == 2
    api.metadata_cache = cache = MetadataCache(max_bytes=100)  # larger than the whole: never kept
    assert cached(api, request(12, correlation=5), who) == fresh(api, request(12, correlation=5), who)
    assert cached(api, request(12, correlation=6), who) == fresh(api, request(12, correlation=6), who)
    assert len(cache) == 0 and cache.bytes == 0 and cache.misses == 2


def test_without_the_cache_metadata_takes_the_path_it_always_took():
    api = an_api(a_view(), cache_bytes=0)
    assert api.metadata_cache is None
    assert api.route(METADATA.key, 12) == (api.metadata, False, False)
    assert an_api(a_view()).route(METADATA.key, 13) is None  # not served: refused, as before


def test_a_malformed_request_closes_the_connection_as_before():
    api = an_api(a_view())
    frame = request(12)
    for bad in (frame[:9], frame[:12], frame[:-3] + b"\xff\xff\xff", frame[:8] + b"\x7f\xff" + frame[10:],
                frame[:-2], frame + b"\x00\x00\x00"):
        with pytest.raises(CloseConnection, match="undecodable request"):
            decode_or_close(bad)
        with pytest.raises(CloseConnection, match="undecodable request"):
            cached(api, bad, client())


def decode_or_close(frame: bytes) -> None:
    try:
        decode_request(frame)
    except Exception as exc:
        raise CloseConnection(f"undecodable request: {exc}") from None


def test_an_unknown_topic_id_is_answered_in_every_version_that_carries_ids():
    """Metadata v10 and v11 name topics by id too, but their answers' names may not be null:
    an unknown id is UNKNOWN_TOPIC_ID with an empty name there, a null one from v12 (before,
    v10 and v11 failed to encode and closed the connection)."""
    api = an_api(a_view())
    for version, name in ((10, ""), (11, ""), (12, None)):
        answer = fresh(api, request(version, [uuid.uuid4()]), client())
        _, body = decode_response(METADATA.key, version, answer[4:])
        assert [(t.error_code, t.name) for t in body.topics] == [(100, name)]  # UNKNOWN_TOPIC_ID


def test_the_cache_is_sized_by_its_key_and_counted_on_metrics():
    """`metadata_cache_bytes` (0: no cache, every answer afresh) reaches the API, and its hits
    and misses are on /metrics."""
    from coordinator.metrics import MetadataCacheCollector
    from coordinator.api.router import Api

    view = a_view()
    membership = SimpleNamespace(me=ME, live={1: ME})
    off = Api(SimpleNamespace(membership=membership), view, metadata_cache_bytes=0)
    assert off.cluster.metadata_cache is None
    api = an_api(view)
    frame = request(12)
    cached(api, frame, client())
    cached(api, _renumbered(frame, 9), client())
    families = {f.name: {tuple(s.labels.values()): s.value for s in f.samples}
                for f in MetadataCacheCollector(lambda: api.metadata_cache).collect()}
    assert families["groupkeeper_metadata_cache_answers"] == {("hit",): 1, ("miss",): 1}
    assert families["groupkeeper_metadata_cache_bytes"][()] > 0
    none = {f.name: [s.value for s in f.samples] for f in MetadataCacheCollector(lambda: None).collect()}
    assert none == {"groupkeeper_metadata_cache_answers": [0, 0], "groupkeeper_metadata_cache_bytes": [0]}
