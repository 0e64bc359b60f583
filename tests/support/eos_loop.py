"""confluent-kafka's exactly-once read-process-write loop (librdkafka), run as a process of
its own so that a test can kill groupkeeper instances under it and watch it go on
(tests/kafka/test_transactions_failover.py):

    python -m tests.support.eos_loop --bootstrap H:P,H:P (--group G | --group-file PATH) --input IN
        --output OUT --transactional-id T --stop-file PATH [--window-ms MS] [--hold-ms MS]
        [--seconds S] [--retry-window S] [--debug CONTEXTS]

A read_committed consumer of group G and a transactional producer copy each input record
to OUT as "out-" + its value, record by record in the same partition, in transactions that
also carry the consumer's positions (send_offsets_to_transaction). Errors are handled as
librdkafka's documentation of its transactional API says: a retriable error has the call
made again, one that requires an abort has the transaction aborted and the consumer sent
back to its committed offsets, a fatal one, or a retriable one that lasts (`retry-window`), has
the producer replaced (a new one of the same transactional id, whose InitProducerId has the
transaction coordinator end whatever the old one left open) and the consumer sent back too.
A rebalance aborts the open transaction first: the partitions' new positions come from the
committed offsets, and records copied past them in a transaction still open would be copied
twice.

A transaction stays open for `window-ms` while records come (so that one is open most of
the time, whatever is killed), and after its offsets were sent it waits `hold-ms` before
it commits: offsets pending at groupkeeper are the part of a transaction a group owner's
death can lose, so the loop keeps some pending most of the time.

The producer starts first ({"producer": "ready"} once its InitProducerId was answered); with
`--group-file` the loop then waits for the file to name the group: a test that kills the
instance relaying the producer's requests, or the one coordinating the group, chooses the
group once it knows the relay, so that each is the one it means to kill.

On stdout, one JSON object a line, flushed: {"committed": transactions, "copied": records,
"aborted": ..., "recreated": ...} after every committed transaction, {"error": ...} for every
error the client raised and what was done about it, {"rebalance": ...}, and at the end
{"done": true|false, ...}. It is told to stop by its stop file, which says how many records
the input holds in all (written once the input is complete): it ends once the group's
committed offsets of IN (read back, stable) add up to that, "done": true; or after `seconds`
whatever it copied, "done": false.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

TIMEOUT = 5.0  # seconds a transactional call may take; librdkafka retries within it by itself
# seconds a call is made again while it fails retriably, before the producer is replaced, as
# an application gives up on a call that does not succeed. A group coordinator's failover
# takes groupkeeper's detection (a few seconds here), a transaction coordinator's less (the
# instance asked is the coordinator: another instance names its own node, which librdkafka
# follows); the relay test checks that no producer is replaced when its instance dies.
RETRY_WINDOW = 12.0


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


class Rewind(Exception):
    """The open transaction was aborted (or its producer replaced): what it copied must be
    read again from the committed offsets."""


class Loop:
    def __init__(self, options):
        self.options = options
        self.producer = self._producer()
        say(producer="ready")
        self.consumer = Consumer({
            "bootstrap.servers": options.bootstrap, "group.id": options.group or self._group(),
            "enable.auto.commit": False, "isolation.level": "read_committed", "auto.offset.reset": "earliest",
            # the member rides out its coordinator's failover (groupkeeper's detection: its
            # ZooKeeper session, a few seconds here) without being expelled
            "session.timeout.ms": 20_000, "heartbeat.interval.ms": 1000, "log_level": 4, **self._debug()})
        self.open = False  # a transaction begun and not ended
        self.rebalanced = False  # a rebalance aborted the open transaction: its batch is void
        self.counts = {"committed": 0, "copied": 0, "aborted": 0, "recreated": 0}

    def _group(self) -> str:
        """The group, once the group file names it."""
        deadline = time.monotonic() + self.options.seconds
        while time.monotonic() < deadline:
            try:
                with open(self.options.group_file) as file:
                    if group := file.read().strip():
                        return group
            except OSError:
                pass
            time.sleep(0.05)  # nothing else to do until told
        raise SystemExit("no group named")

    def _producer(self) -> Producer:
        producer = Producer({"bootstrap.servers": self.options.bootstrap,
                             "transactional.id": self.options.transactional_id,
                             "transaction.timeout.ms": 60_000, "linger.ms": 5, "log_level": 4, **self._debug()})
        self._retrying(lambda: producer.init_transactions(TIMEOUT), "init_transactions")
        return producer

    def _debug(self) -> dict:
        """librdkafka's debug contexts, when asked for (its log goes to stderr)."""
        return {"debug": self.options.debug, "log_level": 7} if self.options.debug else {}

    def _retrying(self, call, where: str):
        """`call()`, made again while it raises a retriable error (`retry-window` s at most)."""
        deadline = time.monotonic() + self.options.retry_window
        while True:
            try:
                return call()
            except KafkaException as exc:
                error = exc.args[0]
                retry = error.retriable() and time.monotonic() < deadline
                say(error=error.name(), where=where, message=error.str(), action="retry" if retry else "raise",
                    retriable=error.retriable(), abortable=error.txn_requires_abort(), fatal=error.fatal())
                if not retry:
                    raise

    # -- ends of a transaction -------------------------------------------------------------

    def abort(self, why: str) -> None:
        """Aborts the open transaction, or, when that fails, replaces the producer (whose
        InitProducerId aborts it at the transaction coordinator)."""
        if not self.open:
            return
        self.open = False
        try:
            self._retrying(lambda: self.producer.abort_transaction(TIMEOUT), "abort_transaction")
            self.counts["aborted"] += 1
            say(aborted=self.counts["aborted"], why=why)
        except KafkaException:
            self.recreate("the abort failed")

    def recreate(self, why: str) -> None:
        self.open = False
        self.producer.purge()  # what it still holds belongs to the transaction its successor aborts
        self.producer = None  # destroyed before its successor, so that it sends nothing more
        self.producer = self._producer()
        self.counts["recreated"] += 1
        say(recreated=self.counts["recreated"], why=why)

    def rewind(self) -> None:
        """The consumer back to the group's committed offsets (read with require_stable, as
        librdkafka asks them for a read_committed consumer: once pending ones are resolved)."""
        assignment = self.consumer.assignment()
        if not assignment:
            return
        for tp in self._retrying(lambda: self.consumer.committed(assignment, TIMEOUT), "committed"):
            to = TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
            # a partition just assigned may not take a seek yet (_STATE): a moment later it does;
            # one never sent back would have its next transaction skip what the aborted one read
            self._retrying(lambda: self._seek(to), "seek")

    def _seek(self, to: TopicPartition) -> None:
        try:
            self.consumer.seek(to)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._STATE:
                raise
            time.sleep(0.1)
            raise KafkaException(KafkaError(KafkaError._STATE, "seek refused", retriable=True)) from exc

    def failed(self, exc: BaseException, where: str) -> None:
        """What the documented loop does with a transactional call's error."""
        error = exc.args[0] if isinstance(exc, KafkaException) else None
        if isinstance(error, KafkaError) and error.txn_requires_abort():
            self.abort(f"{where}: {error.name()}")
        else:  # fatal, or retriable for longer than the loop waits: a new producer
            self.recreate(f"{where}: {error.name() if isinstance(error, KafkaError) else exc!r}")
        raise Rewind

    # -- the rebalance callbacks -------------------------------------------------------------

    def on_assign(self, consumer, partitions) -> None:
        say(rebalance="assigned", partitions=sorted(f"{p.topic}-{p.partition}" for p in partitions))

    def on_revoke(self, consumer, partitions) -> None:
        say(rebalance="revoked", partitions=sorted(f"{p.topic}-{p.partition}" for p in partitions))
        if self.open:
            self.rebalanced = True
            self.abort("rebalance")

    # -- the loop -------------------------------------------------------------------------

    def transaction(self) -> None:
        """One transaction: records copied for `window-ms` (it begins with the first), the
        consumer's positions sent, `hold-ms`, committed."""
        options = self.options
        copied, ends = 0, time.monotonic() + options.window_ms / 1000
        self.rebalanced = False
        while time.monotonic() < ends or (not self.open and not self.stopped()):
            for message in self.consumer.consume(100, 0.1):
                if self.rebalanced:  # the transaction was aborted in the callback: the batch is void,
                    raise Rewind  # read again from the committed offsets
                if message.error() is not None:
                    if message.error().fatal():
                        raise SystemExit(f"the consumer failed: {message.error()}")
                    continue
                if not self.open:
                    try:
                        self.producer.begin_transaction()
                    except KafkaException as exc:
                        self.failed(exc, "begin_transaction")
                    self.open = True
                    ends = time.monotonic() + options.window_ms / 1000
                try:
                    self.producer.produce(options.output, b"out-" + message.value(), partition=message.partition())
                except (KafkaException, BufferError) as exc:
                    self.failed(exc, "produce")
                self.producer.poll(0)
                copied += 1
            if self.rebalanced:
                raise Rewind
            if not self.open and self.done():
                return
        if not self.open:
            return
        metadata = self.consumer.consumer_group_metadata()
        positions = self.consumer.position(self.consumer.assignment())
        try:
            self._retrying(lambda: self.producer.send_offsets_to_transaction(positions, metadata, TIMEOUT),
                           "send_offsets_to_transaction")
            time.sleep(options.hold_ms / 1000)
            self._retrying(lambda: self.producer.commit_transaction(TIMEOUT), "commit_transaction")
        except KafkaException as exc:
            self.failed(exc, "commit")
        self.open = False
        self.counts["committed"] += 1
        self.counts["copied"] += copied
        say(**self.counts, positions={f"{p.topic}-{p.partition}": p.offset for p in positions})

    def stopped(self) -> bool:
        return time.monotonic() > self.deadline

    def total(self) -> int | None:
        """How many records the input holds in all, once the stop file says."""
        try:
            with open(self.options.stop_file) as file:
                return int(file.read())
        except (OSError, ValueError):  # not written yet, or being written
            return None

    def done(self) -> bool:
        """Told to stop, and every input record copied: the group's committed offsets add
        up to the input's (asked only once the positions do, so not at every idle poll)."""
        total = self.total()
        if total is None:
            return False
        assignment = self.consumer.assignment()
        positions = self.consumer.position(assignment)
        if sum(max(p.offset, 0) for p in positions) < total:
            return False
        committed = self._retrying(lambda: self.consumer.committed(assignment, TIMEOUT), "committed")
        return sum(max(p.offset, 0) for p in committed) >= total

    def run(self) -> int:
        self.deadline = time.monotonic() + self.options.seconds
        self.consumer.subscribe([self.options.input], on_assign=self.on_assign, on_revoke=self.on_revoke,
                                on_lost=self.on_revoke)
        finished = False
        try:
            while not self.stopped():
                try:
                    self.transaction()
                except Rewind:
                    self.rewind()
                    continue
                if not self.open and self.done():
                    finished = True
                    break
        finally:
            self.abort("stopped")
            say(done=finished, **self.counts)
            self.consumer.close()
            self.producer.flush(10)
        return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--group")
    group.add_argument("--group-file", help="where the group's name will be written")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--window-ms", type=int, default=300)
    parser.add_argument("--hold-ms", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--retry-window", type=float, default=RETRY_WINDOW,
                        help="seconds a failing call is retried before the producer is replaced")
    parser.add_argument("--stop-file", required=True, help="written with the input's count once it is complete")
    parser.add_argument("--debug", help="librdkafka's debug contexts (broker,metadata,eos,...)")
    return Loop(parser.parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
