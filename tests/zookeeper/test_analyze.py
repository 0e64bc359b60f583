"""The PySpark analysis on a small hand-checked event log (exact values), and end to end:
a real coordinator's event log through `groupkeeper analyze`, its Parquet tables, and its
report rendered in headless Chromium."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tools.analyze import tables
from tools.analyze.job import run
from tools.analyze.read import read_events
from coordinator.events import timestamp
from protocol import ErrorCode
from tests.support.clients import RawMember
from tests.support.coordinator_process import CoordinatorProcess

BASE = datetime(2026, 11, 23, 10, 0, tzinfo=timezone.utc)


def at(h: int, m: int = 0, s: float = 0.0) -> str:
    return timestamp((BASE + timedelta(hours=h - 10, minutes=m, seconds=s)).timestamp())


def utc(h: int, m: int = 0, s: float = 0.0) -> datetime:
    """As Spark hands timestamps back here: naive, in the session's zone (UTC)."""
    return (BASE + timedelta(hours=h - 10, minutes=m, seconds=s)).replace(tzinfo=None)


def event(ts: str, type_: str, group: str | None, **fields) -> dict:
    return {"v": 1, "ts": ts, "instance": 0, "type": type_, "group": group, **fields}


def completed(ts: str, group: str, generation: int, duration: float, reason: str, before: int, after: int,
              moved: int) -> dict:
    return event(ts, "rebalance_completed", group, generation=generation, duration_s=duration, reason=reason,
                 members_before=before, members_after=after, partitions_moved=moved, strategy="range")


def committed(ts: str, group: str, member: str, *offsets: tuple[str, int, int]) -> dict:
    return event(ts, "offsets_committed", group, generation=1, member=member,
                 offsets=[{"topic": t, "partition": p, "offset": o} for t, p, o in offsets])


G1 = [
    event(at(10), "ownership_gained", None, partition=3, epoch=1),
    event(at(10), "member_joined", "g1", generation=0, member="m1", client_id="c1", host="h1"),
    completed(at(10, 0, 1), "g1", 1, 1.0, "member joined", 0, 1, 0),
    committed(at(10, 0, 30), "g1", "m1", ("t", 0, 10), ("t", 1, 20), ("u", 0, 5)),
    committed(at(10, 0, 40), "g1", "m1", ("t", 0, 15)),
    committed(at(10, 1, 10), "g1", "m1", ("t", 1, 25)),
    event(at(10, 10), "member_joined", "g1", generation=1, member="m2", client_id="c2", host="h2"),
    event(at(10, 10), "rebalance_started", "g1", generation=1, reason="member joined"),
    completed(at(10, 10, 3), "g1", 2, 3.0, "member joined", 1, 2, 2),
    event(at(10, 20), "member_expired", "g1", generation=2, member="m2", reason="session timeout",
          client_id="c2", host="h2"),
    completed(at(10, 20, 2), "g1", 3, 2.0, "member expired", 2, 1, 2),
    committed(at(12), "g1", "m1", ("t", 0, 30)),
]
# g2: six rebalances a minute apart (a storm from the fifth: five within ten minutes), then one more
G2 = [completed(at(11, m), "g2", m + 1, 0.5, "member rejoined", 3, 3, 1) for m in range(6)] + [
    event(at(11, 30), "member_left", "g2", generation=6, member="m3", reason="left", client_id="c1", host="h1"),
    completed(at(11, 30), "g2", 7, 0.5, "member left", 3, 2, 1),
]


@pytest.fixture
def small_log(tmp_path):
    """G1 as plain JSON lines with a crash's unfinished last line; G2 gzipped; one line of a
    schema version this job does not know."""
    (tmp_path / "events-0-20261123T100000.000000Z.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in G1) + '{"v":1,"ts":"2026-11-23T12:00:01.000Z","ty')
    with gzip.open(tmp_path / "events-1-20261123T110000.000000Z.jsonl.gz", "wt") as packed:
        packed.write("".join(json.dumps(e) + "\n" for e in G2))
        packed.write(json.dumps({**G2[0], "v": 2}) + "\n")
    return tmp_path


def rows(frame, *order) -> list[dict]:
    return [r.asDict() for r in frame.orderBy(*order).collect()]


def test_reading_skips_unfinished_lines_and_unknown_versions(spark, small_log):
    assert read_events(spark, [str(small_log)]).count() == len(G1) + len(G2)


def test_rebalances(spark, small_log):
    found = rows(tables.rebalances(read_events(spark, [str(small_log)])).where("group = 'g1'"), "end")
    assert [(r["generation"], r["start"], r["end"], r["duration_s"], r["reason"], r["members_before"],
             r["members_after"], r["partitions_moved"]) for r in found] == [
        (1, utc(10), utc(10, 0, 1), 1.0, "member joined", 0, 1, 0),
        (2, utc(10, 10), utc(10, 10, 3), 3.0, "member joined", 1, 2, 2),
        (3, utc(10, 20), utc(10, 20, 2), 2.0, "member expired", 2, 1, 2)]


def test_groups(spark, small_log):
    g1, g2 = rows(tables.groups(read_events(spark, [str(small_log)])), "group")
    assert (g1["first_seen"], g1["last_seen"], g1["rebalances"]) == (utc(10), utc(12), 3)
    assert g1["rebalances_per_hour"] == 1.5  # 3 over the two hours it was seen
    assert (g1["duration_p50_s"], g1["duration_p95_s"], g1["duration_p99_s"]) == (2.0, 3.0, 3.0)
    assert (g1["storms"], g1["storm_rebalances"]) == (0, 0)
    assert g1["rebalancing_share"] == pytest.approx(6.0 / 7200)
    assert (g2["rebalances"], g2["rebalances_per_hour"]) == (7, 7.0)  # half an hour seen: counted as one
    assert (g2["storms"], g2["storm_rebalances"]) == (1, 2)
    assert g2["duration_p50_s"] == 0.5 and g2["rebalancing_share"] == pytest.approx(3.5 / 3600)


def test_members(spark, small_log):
    found = rows(tables.members(read_events(spark, [str(small_log)])), "client_id")
    assert found == [
        {"client_id": "c1", "host": "h1", "joins": 1, "leaves": 1, "session_expirations": 0,
         "other_removals": 0, "members": 2, "groups": 2},
        {"client_id": "c2", "host": "h2", "joins": 1, "leaves": 0, "session_expirations": 1,
         "other_removals": 0, "members": 1, "groups": 1}]


def test_commit_rate(spark, small_log):
    found = rows(tables.commit_rate(read_events(spark, [str(small_log)])), "minute", "topic")
    assert [(r["group"], r["topic"], r["minute"], r["commits"], r["partitions"]) for r in found] == [
        ("g1", "t", utc(10), 2, 3), ("g1", "u", utc(10), 1, 1),
        ("g1", "t", utc(10, 1), 1, 1), ("g1", "t", utc(12), 1, 1)]


def test_offsets_latest(spark, small_log):
    found = rows(tables.offsets_latest(read_events(spark, [str(small_log)])), "topic", "partition")
    assert found == [
        {"group": "g1", "topic": "t", "partition": 0, "offset": 30, "ts": utc(12)},
        {"group": "g1", "topic": "t", "partition": 1, "offset": 25, "ts": utc(10, 1, 10)},
        {"group": "g1", "topic": "u", "partition": 0, "offset": 5, "ts": utc(10, 0, 30)}]


def test_the_job_writes_every_table_and_the_report(spark, small_log, tmp_path_factory):
    out = tmp_path_factory.mktemp("analysis")
    counts = run(spark, [str(small_log)], str(out))
    assert counts == {"rebalances": 10, "groups": 2, "members": 2, "commit_rate": 4, "offsets_latest": 3,
                      "events": len(G1) + len(G2)}
    assert spark.read.parquet(str(out / "offsets_latest")).count() == 3
    page = (out / "report.html").read_text()
    for chart in ("rebalance-durations.png", "rebalances-per-group.png", "expirations.png"):
        assert f'src="{chart}"' in page and (out / chart).stat().st_size > 1000


def test_a_real_coordinators_log_through_the_command(zookeeper, tmp_path, spark):
    """The coordinator writes events; `groupkeeper analyze` (its own Spark) reads them; the
    report opens in headless Chromium with its charts drawn."""
    process = CoordinatorProcess(zookeeper, tmp_path, group_min_session_timeout_ms=1000)
    process.start()
    members = []
    try:
        process.topic("orders", 3)
        for name in ("one", "two"):
            member = RawMember(process.port, name, "orders", session_timeout_ms=1000)
            members.append(member)
            member.join_and_sync()
            assert member.commit("orders", {0: 1, 1: 2, 2: 3}) == [ErrorCode.NONE] * 3
        assert members[0].leave() == ErrorCode.NONE  # "two" falls silent: its session expires
        process.wait_for_log("member removed", group="two", reason="session timeout", timeout=30)
    finally:
        for member in members:
            member.close()
        assert process.stop() == 0
    out = tmp_path / "analysis"
    done = subprocess.run([sys.executable, "-m", "tools", "analyze", "--events", str(tmp_path / "events"),
                           "--out", str(out), "--master", "local[2]"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "offsets_latest: 6" in done.stdout and "report: " in done.stdout
    latest = spark.read.parquet(str(out / "offsets_latest")).collect()
    assert {(r["group"], r["partition"]): r["offset"] for r in latest} == {
        (g, p): p + 1 for g in ("one", "two") for p in range(3)}
    screenshot = _render(out / "report.html", tmp_path)
    assert _chart_pixels(screenshot) > 2000, "the charts did not render"


def _render(page: Path, tmp_path: Path) -> Path:
    chromium = shutil.which("chromium")
    assert chromium, "Chromium is installed by `make install` (Debian's chromium)"
    shot = tmp_path / "report.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1200,2200",
                    f"--screenshot={shot}", page.resolve().as_uri()],
                   capture_output=True, timeout=120, check=True)
    return shot


def _chart_pixels(png: Path) -> int:
    """Pixels in matplotlib's first plot colour (#1f77b4): only drawn charts have them."""
    import matplotlib.image

    pixels = matplotlib.image.imread(png)[..., :3]
    blue = (abs(pixels[..., 0] - 0x1F / 255) < 0.08) & (abs(pixels[..., 1] - 0x77 / 255) < 0.08) \
        & (abs(pixels[..., 2] - 0xB4 / 255) < 0.08)
    return int(blue.sum())


def test_a_missing_events_directory_is_one_line(tmp_path):
    from click.testing import CliRunner

    from tools.cli import main
    result = CliRunner().invoke(main, ["analyze", "--events", str(tmp_path), str(tmp_path / "nowhere"),
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: {tmp_path / 'nowhere'}: not a directory of event files"


def test_a_generated_log_agrees_with_a_plain_python_pass(spark, tmp_path):
    """The same answers as an independent single pass over the files (the benchmark's
    reference), on a generated log with compressed files from three instances."""
    from tools.bench.analyze import reference_tables
    from tools.events_generate import Options, generate

    generate(tmp_path / "log", Options(groups=12, hours=1.0, seed=5, file_bytes=1 << 20, compress=True))
    events = read_events(spark, [str(tmp_path / "log")])
    count, latest, rebalances = reference_tables(str(tmp_path / "log"))
    assert events.count() == count
    assert {(r["group"], r["topic"], r["partition"]): r["offset"]
            for r in tables.offsets_latest(events).collect()} == {key: offset for key, (_, offset) in latest.items()}
    assert {r["group"]: r["rebalances"] for r in tables.groups(events).collect() if r["rebalances"]} == rebalances
    assert len(latest) > 50 and sum(rebalances.values()) > 12  # the log has something to agree on
