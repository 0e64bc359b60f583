"""A group member of an unmodified Python client (kafka-python, confluent-kafka's librdkafka,
or aiokafka) run as a process of its own, with the contract of tests/kafka/java/GroupConsumer.java,
so that every client of the conformance tests is driven alike (tests/support/members.py):

    python -m tests.support.pymember --client librdkafka|kafka-python|aiokafka --bootstrap H:P --group G
        [--protocol classic|consumer] [--topics a,b | --pattern REGEX] [--records N]
        [--seconds S] [--stop-file PATH] [--commit] [--instance-id ID] [--strategy NAME]
        [--session-timeout-ms MS]

On stdout, one JSON object a line: {"assigned": [...]} at every change of its assignment,
{"count": N} (distinct values read) at most twice a second while it grows, then
{"read": N, "values": [...], "committed": {"t-0": 12, ...}}.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def names(partitions) -> list[str]:
    return sorted(f"{p.topic}-{p.partition}" for p in partitions)


def librdkafka(options) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException

    config = {"bootstrap.servers": options.bootstrap, "group.id": options.group, "auto.offset.reset": "earliest",
              "enable.auto.commit": bool(options.auto_commit_ms), "group.protocol": options.protocol, "log_level": 3}
    if options.auto_commit_ms:
        config["auto.commit.interval.ms"] = options.auto_commit_ms
    if options.instance_id:
        config["group.instance.id"] = options.instance_id
    if options.protocol == "classic":
        config["session.timeout.ms"] = options.session_timeout_ms
        config["heartbeat.interval.ms"] = min(1000, options.session_timeout_ms // 3)
        if options.strategy:
            config["partition.assignment.strategy"] = options.strategy
    consumer = Consumer(config)
    held: set[str] = set()

    # confluent-kafka (un)assigns by itself after these callbacks, eagerly or incrementally
    # as the protocol says
    def assigned(c, partitions):
        held.update(names(partitions))
        say(assigned=sorted(held))

    def revoked(c, partitions):
        held.difference_update(names(partitions))
        say(assigned=sorted(held))

    topics = [f"^{options.pattern}"] if options.pattern else options.topics.split(",")
    consumer.subscribe(topics, on_assign=assigned, on_revoke=revoked, on_lost=revoked)
    values, distinct = [], set()
    progress = Progress()
    deadline = time.monotonic() + options.seconds
    while len(values) < options.records and time.monotonic() < deadline and not stopped(options):
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value().decode())
            distinct.add(values[-1])
        progress(len(distinct))
    committed = {}
    rebalancing = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
                   KafkaError.STALE_MEMBER_EPOCH, KafkaError._STATE}

    def commit() -> None:
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as error:
            code = error.args[0].code()
            if code in rebalancing:
                raise Rebalancing from error
            if code != KafkaError._NO_OFFSET:  # nothing read since the last commit
                raise

    def poll() -> None:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value().decode())

    if options.commit and commit_at_end(commit, poll, consumer.assignment):
        committed = {f"{p.topic}-{p.partition}": p.offset
                     for p in consumer.committed(consumer.assignment(), timeout=30) if p.offset >= 0}
    say(read=len(values), values=values, committed=committed)
    consumer.close()


def kafka_python(options) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.errors import CommitFailedError, IllegalGenerationError, RebalanceInProgressError, UnknownMemberIdError

    config = {"bootstrap_servers": options.bootstrap, "group_id": options.group, "auto_offset_reset": "earliest",
              "enable_auto_commit": bool(options.auto_commit_ms), "session_timeout_ms": options.session_timeout_ms,
              "heartbeat_interval_ms": min(1000, options.session_timeout_ms // 3)}
    if options.auto_commit_ms:
        config["auto_commit_interval_ms"] = options.auto_commit_ms
    if options.instance_id:
        config["group_instance_id"] = options.instance_id
    if options.strategy:
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
        config["partition_assignment_strategy"] = [{"range": RangePartitionAssignor,
                                                    "roundrobin": RoundRobinPartitionAssignor,
                                                    "sticky": StickyPartitionAssignor}[options.strategy]]
    consumer = KafkaConsumer(**config)
    held: set[str] = set()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            held.difference_update(names(revoked))
            say(assigned=sorted(held))

        def on_partitions_assigned(self, assigned):
            held.update(names(assigned))
            say(assigned=sorted(held))

    if options.pattern:
        consumer.subscribe(pattern=options.pattern, listener=Listener())
    else:
        kp_subscribe(consumer, options.topics.split(","), Listener())
    values, distinct = [], set()
    progress = Progress()
    deadline = time.monotonic() + options.seconds
    while len(values) < options.records and time.monotonic() < deadline and not stopped(options):
        for records in consumer.poll(1000).values():  # returns as soon as records come
            values += [r.value.decode() for r in records]
            distinct.update(r.value.decode() for r in records)
        progress(len(distinct))
    committed = {}

    def commit() -> None:
        try:
            consumer.commit()
        except (CommitFailedError, RebalanceInProgressError, IllegalGenerationError, UnknownMemberIdError) as error:
            raise Rebalancing from error

    def poll() -> None:
        for records in consumer.poll(200).values():
            values.extend(r.value.decode() for r in records)

    if options.commit and commit_at_end(commit, poll, consumer.assignment):
        for partition in consumer.assignment():
            offset = consumer.committed(partition)
            if offset is not None:
                committed[f"{partition.topic}-{partition.partition}"] = offset
    say(read=len(values), values=values, committed=committed)
    consumer.close()


def aiokafka(options) -> None:
    import asyncio

    asyncio.run(aiokafka_member(options))


async def aiokafka_member(options) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    config = {"bootstrap_servers": options.bootstrap, "group_id": options.group, "auto_offset_reset": "earliest",
              "enable_auto_commit": bool(options.auto_commit_ms), "session_timeout_ms": options.session_timeout_ms,
              "heartbeat_interval_ms": min(1000, options.session_timeout_ms // 3)}
    if options.auto_commit_ms:
        config["auto_commit_interval_ms"] = options.auto_commit_ms
    if options.instance_id:
        config["group_instance_id"] = options.instance_id
    if options.strategy:
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
        config["partition_assignment_strategy"] = [{"range": RangePartitionAssignor,
                                                    "roundrobin": RoundRobinPartitionAssignor,
                                                    "sticky": StickyPartitionAssignor}[options.strategy]]
    consumer = AIOKafkaConsumer(**config)
    held: set[str] = set()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            held.difference_update(names(revoked))
            say(assigned=sorted(held))

        def on_partitions_assigned(self, assigned):
            held.update(names(assigned))
            say(assigned=sorted(held))

    await consumer.start()
    try:
        if options.pattern:
            consumer.subscribe(pattern=options.pattern, listener=Listener())  # matched from the start
        else:
            consumer.subscribe(options.topics.split(","), listener=Listener())
        values, distinct = [], set()
        progress = Progress()
        deadline = time.monotonic() + options.seconds
        while len(values) < options.records and time.monotonic() < deadline and not stopped(options):
            for records in (await consumer.getmany(timeout_ms=1000)).values():  # returns as soon as records come
                values += [r.value.decode() for r in records]
                distinct.update(r.value.decode() for r in records)
            progress(len(distinct))
        committed = {}
        if options.commit and await commit_at_end_async(consumer, values):
            for partition in consumer.assignment():
                offset = await consumer.committed(partition)
                if offset is not None:
                    committed[f"{partition.topic}-{partition.partition}"] = offset
        say(read=len(values), values=values, committed=committed)
    finally:
        await consumer.stop()  # a static member does not leave the group (aiokafka sends no LeaveGroup)


class Rebalancing(Exception):
    """The last commit met the group rebalancing (another member left as it stopped)."""


def commit_at_end(commit, poll, assignment, seconds: float = 60.0) -> bool:
    """Commits what was read, as an application stopping does: a commit that meets a
    rebalance is tried again once polls (whose records count as read) have rejoined the
    group, as the clients' documentation says to. Whether anything was left to commit."""
    deadline = time.monotonic() + seconds
    while assignment():
        try:
            commit()
            return True
        except Rebalancing:
            if time.monotonic() > deadline:
                raise
            say(commit="retried after a rebalance")
            for _ in range(5):
                poll()
    return False


async def commit_at_end_async(consumer, values: list[str], seconds: float = 60.0) -> bool:
    """commit_at_end for aiokafka."""
    from aiokafka.errors import CommitFailedError, IllegalGenerationError, RebalanceInProgressError, \
        UnknownMemberIdError

    deadline = time.monotonic() + seconds
    while consumer.assignment():
        try:
            await consumer.commit()
            return True
        except (CommitFailedError, RebalanceInProgressError, IllegalGenerationError, UnknownMemberIdError):
            if time.monotonic() > deadline:
                raise
            say(commit="retried after a rebalance")
            for _ in range(5):
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    values.extend(r.value.decode() for r in records)
    return False


def kp_subscribe(consumer, topics: list[str], listener=None, seconds: float = 60.0) -> None:
    """Subscribes a kafka-python consumer to `topics` as kafka-python 3.0.12 needs.

    Its coordinator keeps a snapshot of the subscribed topics' partitions, rebuilt only when
    metadata arrives; the leader records the snapshot it assigned from and rejoins when the
    two differ. A snapshot taken before `subscribe` is empty, so, left alone, the leader of
    the first generation rejoins by itself as soon as its next metadata comes. A rejoin so
    started that outlives one `poll()` is never completed: the leader's own assignment makes
    the snapshots equal again, the next poll no longer sees a rejoin as needed, and the
    member stays rebalancing with its heartbeats off (its commits fail client-side, "not
    part of an active group"). So: the topics' partitions first, then `subscribe`, then one
    metadata request (`topics()`), which rebuilds the snapshot before the first join."""
    from kafka.errors import KafkaConnectionError

    deadline = time.monotonic() + seconds
    for topic in topics:
        while True:
            try:
                if consumer.partitions_for_topic(topic):
                    break
            except KafkaConnectionError:  # it asked a broker it cannot reach: an application retries
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no metadata for {topic} in {seconds:g} s")
            time.sleep(0.1)
    consumer.subscribe(topics, listener=listener)
    consumer.topics()


class Progress:
    """Says how many records were read, at most twice a second, when that changed."""

    def __init__(self):
        self.said, self.at = 0, 0.0

    def __call__(self, count: int) -> None:
        if count != self.said and time.monotonic() - self.at > 0.5:
            self.said, self.at = count, time.monotonic()
            say(count=count)


def stopped(options) -> bool:
    return bool(options.stop_file) and os.path.exists(options.stop_file)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="pymember")
    parser.add_argument("--client", choices=("kafka-python", "librdkafka", "aiokafka"), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    parser.add_argument("--topics", default="")
    parser.add_argument("--pattern", default="")
    parser.add_argument("--records", type=int, default=sys.maxsize)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--commit", action="store_true")
    parser.add_argument("--instance-id", default="")
    parser.add_argument("--strategy", default="")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--auto-commit-ms", type=int, default=0, help="commit by the client's own auto-commit, "
                        "at this interval (0: only --commit's, at the end)")
    options = parser.parse_args(argv)
    if options.client in ("kafka-python", "aiokafka") and options.protocol != "classic":
        parser.error(f"{options.client} speaks the classic protocol only")
    if options.pattern:
        re.compile(options.pattern)
    # the client's own log on stderr (the test keeps it): what it did when a test fails
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    {"librdkafka": librdkafka, "kafka-python": kafka_python, "aiokafka": aiokafka}[options.client](options)


if __name__ == "__main__":
    main(sys.argv[1:])
