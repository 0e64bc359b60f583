"""The event log: lines as docs/events.md says, rotation by size and by age, closed files
gzipped, nothing lost on shutdown, and a full or unwritable disk costing events (counted)
but never the coordinator."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import trio

from coordinator import metrics
from coordinator.events import EventLog
from protocol import ErrorCode
from tests.support.clients import RawMember
from tests.support.coordinator_process import CoordinatorProcess, read_events

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def dropped(reason: str) -> float:
    return metrics.REGISTRY.get_sample_value("groupkeeper_events_dropped_total", {"reason": reason}) or 0.0


def make_log(directory: Path, **overrides) -> EventLog:
    settings = dict(max_bytes=1 << 20, max_age=3600.0, compress=True, queue_limit=1000) | overrides
    return EventLog(directory, 3, **settings)


async def settle(log: EventLog, directory: Path, count: int) -> list[dict]:
    """Wait (on trio's clock) until `count` events are readable."""
    with trio.fail_after(30):
        while len(found := read_events(directory)) < count:
            await trio.sleep(0.01)
    return found


async def test_lines_carry_the_common_fields(tmp_path):
    log = make_log(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        log.emit("rebalance_started", "orders", generation=4, reason="member left")
        log.emit("ownership_gained", None, partition=7, epoch=2)
        found = await settle(log, tmp_path, 2)
        nursery.cancel_scope.cancel()
    first, second = found
    assert TS.match(first["ts"]) and first["v"] == 1 and first["instance"] == 3
    assert {k: first[k] for k in ("type", "group", "generation", "reason")} == {
        "type": "rebalance_started", "group": "orders", "generation": 4, "reason": "member left"}
    assert second["group"] is None and second["partition"] == 7
    assert [p.name.endswith(".jsonl") for p in tmp_path.iterdir()] == [True]


async def test_rotation_by_size_gzips_closed_files_and_keeps_every_line(tmp_path):
    log = make_log(tmp_path, max_bytes=2000)
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        for i in range(60):  # ten at a time: batches as a busy coordinator's would be
            log.emit("offsets_committed", "g", offsets=[{"topic": "t", "partition": i, "offset": i * 10}])
            if i % 10 == 9:
                await settle(log, tmp_path, i + 1)
        nursery.cancel_scope.cancel()
    names = sorted(p.name for p in tmp_path.iterdir())  # ~6 KB in files of 2,000 bytes and a line
    assert len(names) == 3 and all(n.endswith(".jsonl.gz") for n in names)
    assert [e["offsets"][0]["partition"] for e in read_events(tmp_path)] == list(range(60))


async def test_rotation_by_age_even_when_idle(tmp_path):
    # the real clock: a mock one would jump ahead while the writer's thread is compressing
    log = make_log(tmp_path, max_age=0.5)
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        before = trio.current_time()  # the file is opened after this
        log.emit("member_joined", "g", member="m1")
        await settle(log, tmp_path, 1)
        with trio.fail_after(30):  # nothing else happens: the file still closes after 0.5 s
            while not list(tmp_path.glob("*.jsonl.gz")):
                await trio.sleep(0.01)
        assert trio.current_time() - before >= 0.5
        log.emit("member_left", "g", member="m1")
        await settle(log, tmp_path, 2)
        nursery.cancel_scope.cancel()
    assert [e["type"] for e in read_events(tmp_path)] == ["member_joined", "member_left"]
    assert len(list(tmp_path.iterdir())) == 2


async def test_what_is_queued_is_written_on_shutdown(tmp_path):
    log = make_log(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        for i in range(100):
            log.emit("member_joined", "g", member=f"m{i}")
        nursery.cancel_scope.cancel()  # before the writer had a turn
    assert len(read_events(tmp_path)) == 100


async def test_a_full_queue_sheds_events_and_counts_them(tmp_path):
    log = make_log(tmp_path, queue_limit=3)
    before = dropped("queue full")
    for i in range(5):  # no writer running: the queue fills
        log.emit("member_joined", "g", member=f"m{i}")
    assert dropped("queue full") - before == 2


async def test_an_unwritable_directory_drops_events_until_it_is_fixed(tmp_path):
    blocked = tmp_path / "events"
    blocked.write_text("a file where the directory should be")
    log = make_log(blocked)
    before = dropped("write failed")
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        log.emit("member_joined", "g", member="lost")
        with trio.fail_after(30):
            while dropped("write failed") == before:
                await trio.sleep(0.01)
        blocked.unlink()
        log.emit("member_joined", "g", member="kept")
        found = await settle(log, blocked, 1)
        nursery.cancel_scope.cancel()
    assert [e["member"] for e in found] == ["kept"]
    assert dropped("write failed") - before == 1


def test_a_full_disk_leaves_only_whole_lines(tmp_path):
    """A file size limit makes writes fail the way a full disk does (EFBIG instead of
    ENOSPC): the batch that does not fit is cut back off, later small ones still fit."""
    script = textwrap.dedent(f"""
        import resource, signal, trio
        from coordinator import metrics
        from coordinator.events import EventLog
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))
        log = EventLog({str(tmp_path)!r}, 0, max_bytes=1 << 20, max_age=3600.0, compress=False, queue_limit=100)
        async def main():
            async with trio.open_nursery() as nursery:
                await nursery.start(log.run)
                for size in (1000, 1000, 1500, 10):
                    log.emit("offsets_committed", "g", pad="x" * size)
                    await trio.sleep(0.2)
                nursery.cancel_scope.cancel()
        trio.run(main)
        print(metrics.REGISTRY.get_sample_value("groupkeeper_events_dropped_total", {{"reason": "write failed"}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.strip().splitlines()[-1]) == 1.0
    assert [len(e["pad"]) for e in read_events(tmp_path)] == [1000, 1000, 10]


def test_a_coordinator_run_writes_its_story(zookeeper, tmp_path):
    process = CoordinatorProcess(zookeeper, tmp_path, events_compress=False)
    process.start()
    member = RawMember(process.port, "storied", "t")
    try:
        process.topic("t", 2)
        assert member.join_and_sync() == {"t": [0, 1]}
        assert member.commit("t", {0: 5, 1: 7}) == [ErrorCode.NONE, ErrorCode.NONE]
        assert member.leave() == ErrorCode.NONE
    finally:
        member.close()
        assert process.stop() == 0
    events = read_events(tmp_path / "events")
    story = [e for e in events if e["group"] == "storied"]
    assert [e["type"] for e in story] == ["member_joined", "rebalance_started", "rebalance_completed",
                                          "offsets_committed", "member_left", "rebalance_started",
                                          "rebalance_completed"]
    joined, _, completed, committed, left, _, emptied = story
    assert joined["member"] == member.member_id and joined["client_id"] == "raw" and joined["host"] == "127.0.0.1"
    assert (completed["generation"], completed["members_before"], completed["members_after"]) == (1, 0, 1)
    assert completed["strategy"] == "range" and completed["duration_s"] >= 0
    assert committed["offsets"] == [{"topic": "t", "partition": 0, "offset": 5},
                                    {"topic": "t", "partition": 1, "offset": 7}]
    assert left["member"] == member.member_id and left["reason"] == "left"
    assert (emptied["members_after"], emptied["partitions_moved"]) == (0, 2)
    gained = [e for e in events if e["type"] == "ownership_gained"]
    lost = [e for e in events if e["type"] == "ownership_lost"]
    assert sorted(e["partition"] for e in gained) == sorted(e["partition"] for e in lost) == list(range(50))
    assert {e["reason"] for e in gained} == {"new"} and {e["reason"] for e in lost} == {"shutdown"}
    assert all(TS.match(e["ts"]) and e["v"] == 1 and e["instance"] == 0 for e in events)
