"""One consumer of `groupkeeper bench failover --clients`, a process of its own:

    python -m tools.bench.failover_member --client librdkafka|kafka-python|aiokafka
        --protocol classic|consumer --bootstrap H:P[,H:P] --group G --topic T
        --session-timeout-ms MS --auto-commit-ms MS --stop-file PATH

It subscribes to the topic (auto.offset.reset earliest, the client's auto-commit at the given
interval) and reads until the stop file appears. The records' values are integers (the
producer's numbering). On stdout, one JSON object a line, each with the wall time `t` it
was written:

- {"t", "held": N} at every change of its assignment (partitions held);
- {"t", "count": N, "last": T} twice a second: records read so far (every read, repeats
  included) and when it last read one;
- {"t", "gap": [A, B]} when it reads again after more than a second without a record: it
  last read at A and read again at B;
- at the end {"t", "batches": [[T, [values...]], ...]}: everything it read, by the time of
  the poll that returned it.

The bench decides what was read twice and what was lost from the batches.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

GAP = 1.0  # seconds without a record that count as a pause


def say(**fields) -> None:
    print(json.dumps({"t": time.time(), **fields}), flush=True)


class Reads:
    """What the consumer read, when, and its pauses; says so on stdout."""

    def __init__(self) -> None:
        self.batches: list[list] = []
        self.count = 0
        self.last: float | None = None
        self.said = 0.0

    def got(self, values: list[int]) -> None:
        now = time.time()
        if values:
            if self.last is not None and now - self.last > GAP:
                say(gap=[self.last, now])
            self.last = now
            self.count += len(values)
            self.batches.append([now, values])
        if now - self.said >= 0.5:
            self.said = now
            say(count=self.count, last=self.last)

    def end(self) -> None:
        say(batches=self.batches)


def stopped(options) -> bool:
    return os.path.exists(options.stop_file)


def heartbeat_ms(options) -> int:
    return max(100, min(3000, options.session_timeout_ms // 3))  # the clients' default (3 s) where it fits


def librdkafka(options) -> None:
    from confluent_kafka import Consumer

    config = {"bootstrap.servers": options.bootstrap, "group.id": options.group, "group.protocol": options.protocol,
              "auto.offset.reset": "earliest", "enable.auto.commit": True,
              "auto.commit.interval.ms": options.auto_commit_ms, "log_level": 3}
    if options.protocol == "classic":  # KIP-848: the session is the coordinator's setting
        config["session.timeout.ms"] = options.session_timeout_ms
        config["heartbeat.interval.ms"] = heartbeat_ms(options)
    consumer = Consumer(config)
    held: set[tuple[str, int]] = set()

    def assigned(_, partitions) -> None:
        held.update((p.topic, p.partition) for p in partitions)
        say(held=len(held))

    def revoked(_, partitions) -> None:
        held.difference_update((p.topic, p.partition) for p in partitions)
        say(held=len(held))

    consumer.subscribe([options.topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
    reads = Reads()
    try:
        while not stopped(options):
            messages = consumer.consume(1000, 0.1)
            reads.got([int(m.value()) for m in messages if m.error() is None])
        reads.end()
    finally:
        consumer.close()


def kafka_python(options) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.errors import KafkaConnectionError

    consumer = KafkaConsumer(bootstrap_servers=options.bootstrap.split(","), group_id=options.group,
                             auto_offset_reset="earliest", enable_auto_commit=True,
                             auto_commit_interval_ms=options.auto_commit_ms,
                             session_timeout_ms=options.session_timeout_ms, heartbeat_interval_ms=heartbeat_ms(options))
    held: set = set()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            held.difference_update(revoked)
            say(held=len(held))

        def on_partitions_assigned(self, assigned):
            held.update(assigned)
            say(held=len(held))

    # kafka-python 3.0.12 can wedge a member whose first join comes before it knows the
    # topic's partitions (the rejoin its metadata change asks for is never completed):
    # subscribe once it knows them
    deadline = time.monotonic() + 60
    while True:
        try:
            if consumer.partitions_for_topic(options.topic):
                break
        except KafkaConnectionError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"no metadata for {options.topic} in 60 s")
        time.sleep(0.1)
    consumer.subscribe([options.topic], listener=Listener())
    reads = Reads()
    try:
        while not stopped(options):
            polled = consumer.poll(timeout_ms=100)
            reads.got([int(r.value) for records in polled.values() for r in records])
        reads.end()
    finally:
        consumer.close()


def aiokafka(options) -> None:
    import asyncio

    asyncio.run(_aiokafka(options))


async def _aiokafka(options) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    consumer = AIOKafkaConsumer(bootstrap_servers=options.bootstrap.split(","), group_id=options.group,
                                auto_offset_reset="earliest", enable_auto_commit=True,
                                auto_commit_interval_ms=options.auto_commit_ms,
                                session_timeout_ms=options.session_timeout_ms,
                                heartbeat_interval_ms=heartbeat_ms(options))
    held: set = set()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            held.difference_update(revoked)
            say(held=len(held))

        def on_partitions_assigned(self, assigned):
            held.update(assigned)
            say(held=len(held))

    await consumer.start()
    try:
        consumer.subscribe([options.topic], listener=Listener())
        reads = Reads()
        while not stopped(options):
            polled = await consumer.getmany(timeout_ms=100)
            reads.got([int(r.value) for records in polled.values() for r in records])
        reads.end()
    finally:
        await consumer.stop()


CLIENTS = {"librdkafka": librdkafka, "kafka-python": kafka_python, "aiokafka": aiokafka}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.failover_member")
    parser.add_argument("--client", choices=sorted(CLIENTS), required=True)
    parser.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--session-timeout-ms", type=int, default=10_000)
    parser.add_argument("--auto-commit-ms", type=int, default=1000)
    parser.add_argument("--stop-file", required=True)
    options = parser.parse_args(argv)
    if options.client != "librdkafka" and options.protocol != "classic":
        parser.error(f"{options.client} speaks the classic protocol only")
    CLIENTS[options.client](options)


if __name__ == "__main__":
    main(sys.argv[1:])
