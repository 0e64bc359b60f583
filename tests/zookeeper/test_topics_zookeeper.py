"""Kafka's topic registry in ZooKeeper: the CLI that writes it and the watch-driven topic
source that reads it; and the announcements every topic source makes (`TopicView`)."""

from __future__ import annotations

import itertools
import json

import trio
from click.testing import CliRunner
from kazoo.client import KazooClient

from tools.cli import main
from coordinator.store.bridge import ZooKeeperBridge
from coordinator.topics.view import NO_TOPIC_ID, PartitionState, TopicChange, TopicView, parse_topic_id, topic_id_text
from coordinator.topics.zookeeper import ZooKeeperTopics, parse_broker, parse_topic
from tests.support.in_process import expire

_names = (f"topic-{i}" for i in itertools.count())


async def _change_of(changes: trio.MemoryReceiveChannel, name: str, timeout: float = 1.0) -> TopicChange:
    """The next change announced for topic `name` (others' are skipped), within `timeout`."""
    with trio.fail_after(timeout):
        while (change := await changes.receive()).topic != name:
            pass
        return change


async def _until(condition) -> None:
    with trio.fail_after(5):
        while not condition():
            await trio.sleep(0.01)


def cli(zookeeper, *args: str):
    return CliRunner().invoke(main, [*args, "--zookeeper", zookeeper.connect_string])


def test_create_list_describe_and_alter(zookeeper):
    name = next(_names)
    assert cli(zookeeper, "topics", "create", name, "--partitions", "3").exit_code == 0
    listed = cli(zookeeper, "topics", "list", "--json")
    assert name in json.loads(listed.output)
    described = json.loads(cli(zookeeper, "topics", "describe", name, "--json").output)
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert all(p["leader"] is None and len(p["replicas"]) == 1 for p in described["partitions"])
    topic_id = described["topic_id"]
    assert len(topic_id) == 22 and parse_topic_id(topic_id) != NO_TOPIC_ID
    text = cli(zookeeper, "topics", "describe", name).output
    assert f"Topic: {name}\tTopicId: {topic_id}\tPartitionCount: 3\tReplicationFactor: 1" in text

    assert cli(zookeeper, "topics", "alter", name, "--partitions", "5").exit_code == 0
    described = json.loads(cli(zookeeper, "topics", "describe", name, "--json").output)
    assert len(described["partitions"]) == 5 and described["topic_id"] == topic_id  # the same topic


def test_a_decrease_is_refused_with_one_clear_line(zookeeper):
    name = next(_names)
    cli(zookeeper, "topics", "create", name, "--partitions", "4")
    result = cli(zookeeper, "topics", "alter", name, "--partitions", "2")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: topic '{name}' has 4 partitions; the count can only be increased, not decreased to 2"]
    described = json.loads(cli(zookeeper, "topics", "describe", name, "--json").output)
    assert len(described["partitions"]) == 4


def test_bad_requests_are_one_line_and_non_zero(zookeeper):
    for args, message in [
        (("topics", "describe", "no-such-topic"), "does not exist"),
        (("topics", "alter", "no-such-topic", "--partitions", "3"), "does not exist"),
        (("topics", "create", "bad/name", "--partitions", "1"), "invalid topic name"),
        (("topics", "create", "x", "--partitions", "0"), "Invalid value"),
    ]:
        result = cli(zookeeper, *args)
        assert result.exit_code != 0, args
        assert message in result.output, (args, result.output)
        assert "Traceback" not in result.output
    name = next(_names)
    cli(zookeeper, "topics", "create", name, "--partitions", "1")
    again = cli(zookeeper, "topics", "create", name, "--partitions", "1")
    assert again.exit_code == 1 and "already exists" in again.output


def test_unreachable_zookeeper_is_one_line():
    result = CliRunner().invoke(main, ["topics", "list", "--zookeeper", "127.0.0.1:1"])
    assert result.exit_code == 1
    assert result.output.strip() == "Error: cannot reach ZooKeeper at 127.0.0.1:1 within 5s"


def test_brokers_are_listed_from_kafkas_layout(zookeeper):
    client = KazooClient(hosts=zookeeper.connect_string)
    client.start(timeout=10)
    try:
        client.create("/brokers/ids/7", json.dumps(
            {"host": "broker7.local", "port": 9092, "rack": "r1"}).encode(), makepath=True)
        client.create("/brokers/ids/8", json.dumps(
            {"endpoints": ["PLAINTEXT://[::1]:9093"], "host": None, "port": -1}).encode())
        listed = json.loads(cli(zookeeper, "brokers", "list", "--json").output)
        assert {"id": 7, "host": "broker7.local", "port": 9092, "rack": "r1"} in listed
        assert {"id": 8, "host": "::1", "port": 9093, "rack": None} in listed
        # with brokers registered, replicas are assigned round-robin over them
        name = next(_names)
        cli(zookeeper, "topics", "create", name, "--partitions", "2", "--replication-factor", "2")
        described = json.loads(cli(zookeeper, "topics", "describe", name, "--json").output)
        assert all(sorted(p["replicas"]) == [7, 8] for p in described["partitions"])
        too_many = cli(zookeeper, "topics", "create", next(_names), "--partitions", "1",
                       "--replication-factor", "3")
        assert too_many.exit_code == 1 and "larger than the 2 registered brokers" in too_many.output
    finally:
        client.delete("/brokers/ids", recursive=True)
        client.stop()
        client.close()


def test_broker_entries_that_do_not_parse_are_skipped():
    assert parse_broker("1", b"not json") is None
    assert parse_broker("x", b'{"host": "h", "port": 1}') is None


async def test_every_change_reaches_subscribers_within_a_second_with_its_topic_id(zookeeper):
    """Created, grown, deleted, created again under the same name (another topic id)."""
    zk = ZooKeeperBridge(zookeeper.connect_string)
    await zk.start()
    name = next(_names)
    try:
        async with trio.open_nursery() as nursery:
            topics = ZooKeeperTopics(zk)
            changes = topics.subscribe()
            await nursery.start(topics.run)
            assert topics.age() == 0.0  # watched: current as long as the session is
            await trio.to_thread.run_sync(cli, zookeeper, "topics", "create", name, "--partitions", "2")
            assert await _change_of(changes, name) == TopicChange(name, 0, 2)
            await trio.to_thread.run_sync(cli, zookeeper, "topics", "alter", name, "--partitions", "6")
            assert await _change_of(changes, name) == TopicChange(name, 2, 6)
            assert topics.partitions[name] == 6
            described = await trio.to_thread.run_sync(cli, zookeeper, "topics", "describe", name, "--json")
            first = parse_topic_id(json.loads(described.output)["topic_id"])
            assert topics.topic_ids[name] == first
            await trio.to_thread.run_sync(lambda: zk.client.delete(f"/brokers/topics/{name}", recursive=True))
            assert await _change_of(changes, name) == TopicChange(name, 6, 0)
            await trio.to_thread.run_sync(cli, zookeeper, "topics", "create", name, "--partitions", "2")
            assert await _change_of(changes, name) == TopicChange(name, 0, 2)
            assert topics.topic_ids[name] not in (first, NO_TOPIC_ID)  # another topic of the same name
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


async def test_watches_come_back_after_a_session_expiry(zookeeper):
    zk = ZooKeeperBridge(zookeeper.connect_string, session_timeout=4.0)
    states = zk.subscribe_states()
    await zk.start()
    name = next(_names)
    try:
        async with trio.open_nursery() as nursery:
            registry = ZooKeeperTopics(zk)
            changes = registry.subscribe()
            await nursery.start(registry.run)
            await trio.to_thread.run_sync(expire, zookeeper.connect_string, zk)
            with trio.fail_after(20):
                seen = [await states.receive()]
                while "LOST" not in seen or seen[-1] != "CONNECTED":
                    seen.append(await states.receive())
            await trio.to_thread.run_sync(cli, zookeeper, "topics", "create", name, "--partitions", "3")
            assert await _change_of(changes, name, timeout=2) == TopicChange(name, 0, 3)
            nursery.cancel_scope.cancel()
    finally:
        await zk.stop()


async def test_brokers_and_partition_leaders_follow_the_registry(zookeeper):
    """Leaders come from state znodes written after the topic (watched while absent),
    brokers from /brokers/ids as they come and go, the cluster's id and controller from
    /cluster/id and /controller once a broker writes them."""
    zk = ZooKeeperBridge(zookeeper.connect_string)
    await zk.start()
    name = next(_names)
    writer = KazooClient(hosts=zookeeper.connect_string)
    await trio.to_thread.run_sync(lambda: writer.start(timeout=10))
    try:
        async with trio.open_nursery() as nursery:
            registry = ZooKeeperTopics(zk)
            await nursery.start(registry.run)
            await trio.to_thread.run_sync(cli, zookeeper, "topics", "create", name, "--partitions", "2")
            await _until(lambda: registry.partitions.get(name) == 2)
            assert (name, 0) not in registry.states
            await trio.to_thread.run_sync(lambda: writer.create(
                f"/brokers/topics/{name}/partitions/0/state",
                json.dumps({"leader": 5, "leader_epoch": 3, "isr": [5, 6]}).encode(), makepath=True))
            await _until(lambda: (name, 0) in registry.states)
            assert registry.states[(name, 0)] == PartitionState(5, (5, 6), 3)
            await trio.to_thread.run_sync(lambda: writer.set(
                f"/brokers/topics/{name}/partitions/0/state", json.dumps({"leader": 6, "isr": [6]}).encode()))
            await _until(lambda: registry.states[(name, 0)].leader == 6)

            await trio.to_thread.run_sync(lambda: writer.create(
                "/brokers/ids/5", json.dumps({"host": "b5", "port": 9092}).encode(), makepath=True))
            await _until(lambda: 5 in registry.brokers)
            assert registry.brokers[5].host == "b5"
            await trio.to_thread.run_sync(lambda: writer.delete("/brokers/ids/5"))
            await _until(lambda: 5 not in registry.brokers)

            await trio.to_thread.run_sync(lambda: writer.delete(f"/brokers/topics/{name}", recursive=True))
            await _until(lambda: name not in registry.partitions and (name, 0) not in registry.states)

            assert (registry.cluster_id, registry.controller_id) == (None, None)  # no broker has started yet
            await trio.to_thread.run_sync(lambda: writer.create(
                "/cluster/id", b'{"version":"1","id":"q1Sh-9_ISia_WvZ9uAN1sA"}', makepath=True))
            await trio.to_thread.run_sync(lambda: writer.create("/controller", b'{"version":1,"brokerid":3}'))
            await _until(lambda: (registry.cluster_id, registry.controller_id) == ("q1Sh-9_ISia_WvZ9uAN1sA", 3))
            await trio.to_thread.run_sync(lambda: writer.set("/controller", b'{"version":1,"brokerid":4}'))
            await _until(lambda: registry.controller_id == 4)
            await trio.to_thread.run_sync(lambda: writer.delete("/controller"))  # an election under way
            await _until(lambda: registry.controller_id is None)
            nursery.cancel_scope.cancel()
    finally:
        await trio.to_thread.run_sync(lambda: writer.exists("/cluster") and writer.delete("/cluster", recursive=True))
        await trio.to_thread.run_sync(writer.stop)
        writer.close()
        await zk.stop()


def test_topic_ids_in_kafkas_text_form_and_znodes_before_kafka_2_8():
    # Kafka prints topic ids as URL-safe base64 of the 16 bytes, without padding
    topic_id = parse_topic_id("AAAAAAAAAAAAAAAAAAAAAQ")
    assert topic_id.int == 1 and topic_id_text(topic_id) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert topic_id_text(parse_topic_id("-_-_-_-_-_-_-_-_-_-_-w")) == "-_-_-_-_-_-_-_-_-_-_-w"
    for bad in ("", "short", "AAAAAAAAAAAAAAAAAAAAAAAA"):
        try:
            parse_topic_id(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was read as a topic id")
    assert parse_topic(b'{"version":1,"partitions":{"0":[1],"1":[2]}}') == ({0: [1], 1: [2]}, NO_TOPIC_ID)
    assert parse_topic(b'{"version":3,"partitions":{"0":[1]},"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ"}') == (
        {0: [1]}, topic_id)
    assert parse_topic(b'{"version":3,"partitions":{"0":[1]},"topic_id":"nonsense"}') == ({0: [1]}, NO_TOPIC_ID)


def test_every_change_a_source_makes_is_announced_once():
    view = TopicView()
    changes = view.subscribe()
    first, second = parse_topic_id("AAAAAAAAAAAAAAAAAAAAAQ"), parse_topic_id("AAAAAAAAAAAAAAAAAAAAAg")
    view._set_topic("t", {0: [1], 1: [1]}, first)
    view.states[("t", 1)] = PartitionState(1, (1,), 0)
    view._set_topic("t", {0: [1], 1: [1]}, first)  # read again, unchanged: nothing to say
    view._set_topic("t", {0: [1], 1: [1], 2: [1]}, first)
    view._set_topic("t", {0: [1], 1: [1], 2: [1]}, second)  # deleted and created again between two reads
    assert view.states == {} and view.topic_ids["t"] == second
    view._set_topic("old", {0: [1]}, NO_TOPIC_ID)  # a source without ids cannot tell a re-created topic
    view._set_topic("old", {0: [1]}, NO_TOPIC_ID)
    view._forget("t")
    view._forget("never-known")
    said = []
    while True:
        try:
            said.append(changes.receive_nowait())
        except trio.WouldBlock:
            break
    assert said == [TopicChange("t", 0, 2), TopicChange("t", 2, 3), TopicChange("t", 0, 3, recreated=True),
                    TopicChange("old", 0, 1), TopicChange("t", 3, 0)]
    assert "t" not in view.partitions and "t" not in view.topic_ids
