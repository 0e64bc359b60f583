"""The exactly-once read-process-write loop of an unmodified Python client (kafka-python, or
confluent-kafka's librdkafka) run as a process of its own, with the contract of
tests/kafka/java/EosCopier.java, so that the conformance matrix drives every client's loop
alike (tests/support/members.py's `copy_exactly_once`):

    python -m tests.support.pycopier --client librdkafka|kafka-python --bootstrap H:P
        --group G --input T --output T --transactional-id X [--protocol classic|consumer]
        [--records N] [--abort-every N] [--batch N] [--seconds S]

A read_committed consumer in group G and a transactional producer copy every record of the
input topic to the output topic as "out-" + its value, on the same partition, each polled
batch (at most --batch records) in one transaction that also carries the consumer's
positions (send_offsets_to_transaction with the consumer's group metadata). --abort-every N:
every Nth transaction is aborted instead of committed, and the consumer is sent back to its
committed offsets (which a read_committed consumer asks with require_stable) to read the
batch again. It stops once --records input records were copied in committed transactions,
or after --seconds ({"done": false, ...}, exit status 3).

Errors, as EosCopier.java handles them: the producer's fatal ones (fenced by a newer
producer of the transactional id, a broker without transactions, authorization) end the
program ({"fatal": ...}, exit status 2, the transaction not aborted: it is no longer ours);
any other in a transaction aborts it and rewinds as a planned abort does, counted "failed".

On stdout, one JSON object a line: {"initialized": true} once init_transactions returned;
{"assigned": [...]} at every change of the assignment; {"committed": [values...], "offsets":
{"t-0": 12, ...}} per committed transaction; {"aborted": N} per planned abort (N: so far);
{"failed": "..."} per transaction failed; at the end {"done": true, "copied": N,
"transactions": T, "aborted": A, "failed": F} (T: committed).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from tests.support.pymember import kp_subscribe, names, say

TIMEOUT = 30.0  # seconds a transactional call may take: the clients retry within it by themselves


class Fatal(Exception):
    """The producer cannot go on (see the module's doc)."""


class Counts:
    def __init__(self):
        self.copied = self.transactions = self.aborted = self.failed = self.begun = 0

    def done(self, finished: bool) -> None:
        say(done=finished, copied=self.copied, transactions=self.transactions, aborted=self.aborted,
            failed=self.failed)


def run(options, loop) -> None:
    """The loop common to both clients; `loop` is the client's: poll() -> [(topic, partition,
    offset, value)], begin(), produce(partition, value), send_offsets({(topic, partition):
    next offset}), commit(), abort(), rewind(), close(), and error(exception) -> "fatal",
    "abortable" or None (not the client's)."""
    counts = Counts()
    deadline = time.monotonic() + options.seconds
    try:
        while counts.copied < options.records:
            if time.monotonic() > deadline:
                counts.done(False)
                sys.exit(3)
            batch = loop.poll()
            if not batch:
                continue
            positions: dict[tuple[str, int], int] = {}
            planned = abort = False
            try:
                loop.begin()
                counts.begun += 1
                for topic, partition, offset, value in batch:
                    loop.produce(partition, "out-" + value)
                    positions[(topic, partition)] = offset + 1  # the next offset to read
                loop.send_offsets(positions)
                if options.abort_every and counts.begun % options.abort_every == 0:
                    planned = abort = True
                else:
                    loop.commit()
                    counts.transactions += 1
                    counts.copied += len(batch)
                    say(committed=[value for *_, value in batch],
                        offsets={f"{t}-{p}": o for (t, p), o in sorted(positions.items())})
            except Exception as error:  # noqa: BLE001 - sorted by the client's own verdict
                verdict = loop.error(error)
                if verdict is None:
                    raise
                if verdict == "fatal":
                    raise Fatal(error) from error
                counts.failed += 1
                say(failed=repr(error))
                abort = True
            if abort:
                loop.abort()
                if planned:
                    counts.aborted += 1
                    say(aborted=counts.aborted)
                loop.rewind()
    except Fatal as error:
        # a zombie, or a producer that cannot go on: it must not abort (the transaction is
        # no longer its own), only close; its consumer leaves the group
        say(fatal=repr(error.__cause__))
        loop.close()
        sys.exit(2)
    counts.done(True)
    loop.close()


class Librdkafka:
    def __init__(self, options):
        from confluent_kafka import Consumer, Producer

        self.options = options
        config = {"bootstrap.servers": options.bootstrap, "group.id": options.group,
                  "group.protocol": options.protocol, "isolation.level": "read_committed",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 3}
        if options.protocol == "classic":
            config.update({"session.timeout.ms": 10_000, "heartbeat.interval.ms": 1000})
        self.consumer = Consumer(config)
        self.producer = Producer({"bootstrap.servers": options.bootstrap, "transactional.id": options.transactional_id,
                                  "transaction.timeout.ms": 60_000, "log_level": 3})
        self.producer.init_transactions(TIMEOUT)
        say(initialized=True)
        held: set[str] = set()

        def assigned(consumer, partitions):
            held.update(names(partitions))
            say(assigned=sorted(held))

        def revoked(consumer, partitions):
            held.difference_update(names(partitions))
            say(assigned=sorted(held))

        self.consumer.subscribe([options.input], on_assign=assigned, on_revoke=revoked, on_lost=revoked)

    def poll(self):
        return [(m.topic(), m.partition(), m.offset(), m.value().decode())
                for m in self.consumer.consume(self.options.batch, 0.5) if m.error() is None]

    def begin(self):
        self.producer.begin_transaction()

    def produce(self, partition, value):
        self.producer.produce(self.options.output, value.encode(), partition=partition)

    def send_offsets(self, positions):
        from confluent_kafka import TopicPartition

        offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        self._retrying(lambda: self.producer.send_offsets_to_transaction(
            offsets, self.consumer.consumer_group_metadata(), TIMEOUT))

    def commit(self):
        self._retrying(lambda: self.producer.commit_transaction(TIMEOUT))

    def abort(self):
        self._retrying(lambda: self.producer.abort_transaction(TIMEOUT))

    @staticmethod
    def _retrying(call):
        """`call()`, made again while it raises a retriable error (a timeout: the outcome is
        unknown, and calling again is how librdkafka's documentation says to learn it), for a
        minute at most."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + 2 * TIMEOUT
        while True:
            try:
                return call()
            except KafkaException as error:
                if not error.args[0].retriable() or error.args[0].txn_requires_abort() \
                        or time.monotonic() > deadline:
                    raise
                say(retried=str(error))

    def rewind(self):
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        # committed() asks with require_stable (the consumer is read_committed): it waits
        # while the aborted transaction's offsets pend
        for tp in self.consumer.committed(self.consumer.assignment(), TIMEOUT):
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, offset))

    def close(self):
        self.consumer.close()
        self.producer.flush(TIMEOUT)

    @staticmethod
    def error(error):
        from confluent_kafka import KafkaException

        if not isinstance(error, KafkaException):
            return None
        # abortable: what librdkafka flags so, and a retriable error retried past its minute
        return "fatal" if error.args[0].fatal() else "abortable"


class KafkaPython:
    def __init__(self, options):
        from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer

        self.options = options
        self.consumer = KafkaConsumer(bootstrap_servers=options.bootstrap, group_id=options.group,
                                      isolation_level="read_committed", enable_auto_commit=False,
                                      auto_offset_reset="earliest", max_poll_records=options.batch,
                                      session_timeout_ms=10_000, heartbeat_interval_ms=1000)
        self.producer = KafkaProducer(bootstrap_servers=options.bootstrap, transactional_id=options.transactional_id,
                                      transaction_timeout_ms=60_000)
        self.producer.init_transactions()
        say(initialized=True)
        held: set[str] = set()

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                held.difference_update(names(revoked))
                say(assigned=sorted(held))

            def on_partitions_assigned(self, assigned):
                held.update(names(assigned))
                say(assigned=sorted(held))

        kp_subscribe(self.consumer, [options.input], Listener())  # kafka-python 3.0.12 needs it so

    def poll(self):
        return [(r.topic, r.partition, r.offset, r.value.decode())
                for records in self.consumer.poll(500, max_records=self.options.batch).values() for r in records]

    def begin(self):
        self.producer.begin_transaction()

    def produce(self, partition, value):
        self.producer.send(self.options.output, value.encode(), partition=partition)

    def send_offsets(self, positions):
        from kafka.structs import OffsetAndMetadata, TopicPartition

        self.producer.send_offsets_to_transaction(
            {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in positions.items()},
            self.consumer.group_metadata())

    def commit(self):
        self.producer.commit_transaction()

    def abort(self):
        self.producer.abort_transaction()

    def rewind(self):
        # committed() asks with require_stable (the consumer is read_committed), one partition
        # a call: it waits while the aborted transaction's offsets pend
        for tp in self.consumer.assignment():
            offset = self.consumer.committed(tp)
            if offset is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, offset)

    def close(self):
        self.consumer.close()
        self.producer.close(timeout=TIMEOUT)

    @staticmethod
    def error(error):
        from kafka import errors

        if isinstance(error, (errors.ProducerFencedError, errors.InvalidProducerEpochError,
                              errors.OutOfOrderSequenceNumberError, errors.UnsupportedVersionError,
                              errors.AuthorizationError)):
            return "fatal"
        return "abortable" if isinstance(error, errors.KafkaError) else None


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="pycopier")
    parser.add_argument("--client", choices=("kafka-python", "librdkafka"), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--protocol", choices=("classic", "consumer"), default="classic")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--records", type=int, default=sys.maxsize)
    parser.add_argument("--abort-every", type=int, default=0)
    parser.add_argument("--batch", type=int, default=10, help="records a transaction at most (one poll's)")
    parser.add_argument("--seconds", type=float, default=300.0)
    options = parser.parse_args(argv)
    if options.client == "kafka-python" and options.protocol != "classic":
        parser.error("kafka-python speaks the classic protocol only")
    # the client's own log on stderr (the caller keeps it): what it did when a run fails
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run(options, {"librdkafka": Librdkafka, "kafka-python": KafkaPython}[options.client](options))


if __name__ == "__main__":
    main(sys.argv[1:])
