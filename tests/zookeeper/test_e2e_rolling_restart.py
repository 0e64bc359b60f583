"""Unmodified clients through a rolling restart of three instances: a kafka-python and a
confluent-kafka consumer in one group, committing all along, while each instance in turn is
stopped (SIGTERM: it hands its group-partitions over) and started again (it takes its share
back). Nothing acknowledged is lost and neither member drops out of the group."""

from __future__ import annotations

import threading
import time

from confluent_kafka import TopicPartition as CKPartition
from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

from protocol import ErrorCode

from tests.support.clients import (CK, RawConnection, committed, described, kp_assigned, kp_commit, kp_consumer,
                      poll_until)
from tests.support.coordinator_process import cluster

TOPIC, PARTITIONS = "orders", 6
ALL = {(TOPIC, p) for p in range(PARTITIONS)}
GROUP = "rolling"


def test_a_rolling_restart_under_a_live_group_loses_nothing(zookeeper, tmp_path):
    instances = cluster(zookeeper, tmp_path, 3)
    for process in instances:
        process.start()
    ports = [p.port for p in instances]
    bootstrap = ",".join(p.bootstrap for p in instances)
    instances[0].topic(TOPIC, PARTITIONS)
    for process in instances[1:]:
        connection = RawConnection(process.port)
        connection.wait_for_topic(TOPIC, PARTITIONS)
        connection.close()
    ck = CK(bootstrap, GROUP, TOPIC)
    kp = None
    acked: dict[tuple[str, int], int] = {}
    try:
        poll_until(lambda: ck.assigned == ALL, ck)
        kp = kp_consumer(bootstrap, GROUP, TOPIC)
        poll_until(lambda: kp_assigned(kp) and ck.assigned and kp_assigned(kp) | ck.assigned == ALL
                   and not kp_assigned(kp) & ck.assigned, kp, ck)
        before = _members(ports)
        offsets = iter(range(1, 1_000_000))

        def commit_round() -> None:
            """Poll both and commit a rising offset on what each holds, as applications do."""
            kp.poll(timeout_ms=50)
            ck.poll()
            mine, theirs = kp_assigned(kp), set(ck.assigned)
            if mine:
                offset = next(offsets)
                kp_commit(kp, {TopicPartition(t, p): OffsetAndMetadata(offset, "", -1) for t, p in mine})
                acked.update({tp: offset for tp in mine})
            if theirs:
                offset = next(offsets)
                done = ck.consumer.commit(offsets=[CKPartition(t, p, offset) for t, p in theirs],
                                          asynchronous=False)
                acked.update({(tp.topic, tp.partition): offset for tp in done if tp.error is None})

        for process in instances:  # one at a time: stop, start again, wait until it serves its share
            restart = threading.Thread(target=_restart, args=(process,), daemon=True)
            restart.start()
            while restart.is_alive():
                commit_round()
            restart.join()
            assert process.returncodes[-1] == 0
            assert process.events()  # started again, with a log of its own
        for _ in range(10):
            commit_round()
        poll_until(lambda: kp_assigned(kp) | ck.assigned == ALL and not kp_assigned(kp) & ck.assigned, kp, ck)
        assert _members(ports) == before  # nobody dropped out or was replaced
        stored = committed(ports, GROUP)
        assert set(acked) == ALL and all(stored[tp] >= offset for tp, offset in acked.items()), (acked, stored)
        for process in instances:  # every instance serves a share again
            process.wait_for_log("group-partitions loaded")
    finally:
        ck.consumer.close()
        if kp is not None:
            kp.close()
        for process in instances:
            process.stop()


def _restart(process) -> None:
    process.returncodes = getattr(process, "returncodes", []) + [process.stop()]
    process.start()


def _members(ports: list[int]) -> set[str]:
    deadline = time.monotonic() + 30
    while True:
        found = described(ports, GROUP)
        if found.error_code == ErrorCode.NONE and found.group_state == "Stable":
            return {m.member_id for m in found.members}
        assert time.monotonic() < deadline, found
        time.sleep(0.1)
