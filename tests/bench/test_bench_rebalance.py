"""`groupkeeper bench rebalance` as an operator runs it, at a tiny scale (3 members, 12
partitions): every protocol ends with every partition held by exactly one member, the
coordinator agreeing, and figures that are there and positive; eager range pauses more than
cooperative-sticky. (Figures come from full runs, in docs/benchmarks.md, not from this test.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
MEMBERS, PARTITIONS = 3, 12
TINY = ["--members", str(MEMBERS), "--partitions", str(PARTITIONS), "--join-interval", "0.3",
        "--heartbeat-ms", "300", "--session-timeout-ms", "6000", "--settle", "1.5", "--timeout", "20"]


def test_both_protocols_end_with_every_partition_held_once_and_report_their_figures():
    done = subprocess.run([sys.executable, "-m", "tools", "bench", "rebalance", "--json", *TINY],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    rows = {row["row"]: row for row in result["rows"]}
    assert list(rows) == ["cooperative-sticky", "range", "consumer"]
    for name, row in rows.items():
        assert row["stable"], (name, row["final"])
        assert row["final"] == {"unowned": 0, "held_twice_or_more": 0, "members_without_partitions": 0,
                                "partitions_per_member_min": PARTITIONS // MEMBERS,
                                "partitions_per_member_max": PARTITIONS // MEMBERS}, name
        assert row["coordinator_agrees"], name
        assert 0 < row["stable_after_last_join_s"] < row["total_s"], name
        assert row["total_s"] >= row["joins_s"] > 0, name
        # the first member held all 12 and gave most of them up as the others came
        assert row["paused_per_member"]["max"] >= PARTITIONS - PARTITIONS // MEMBERS, name
        assert 0 < row["paused_per_member"]["mean"] <= row["paused_per_member"]["max"], name
        assert row["rebalances"] >= 2 and row["callbacks"] >= MEMBERS, name
        assert row["lost_callbacks"] == 0 and not row["poll_errors"], name
        assert row["cpu_s"]["coordinator"] > 0, name
        assert row["heartbeats"] > 0 and row["zookeeper_writes"] > 0 and row["zookeeper_written_bytes"] > 0, name
        assert row["zookeeper_writes_per_heartbeat"] == round(row["zookeeper_writes"] / row["heartbeats"], 3), name
    assert rows["consumer"]["coordinator"]["group_epoch"] == rows["consumer"]["coordinator"]["assignment_epoch"]
    assert rows["consumer"]["coordinator"]["members_at_group_epoch"] == MEMBERS
    assert rows["consumer"]["requests"].get("ConsumerGroupHeartbeat", 0) > 0
    assert "JoinGroup" not in rows["consumer"]["requests"]
    assert result["zookeeper"]["cpu_target"] == 1.5 and result["zookeeper"]["consumer_writes_per_heartbeat"] > 0
    # eager revokes everything a member holds at every rebalance; cooperative only what moves
    assert rows["range"]["paused_per_member"]["total"] > rows["cooperative-sticky"]["paused_per_member"]["total"]


def test_an_unknown_protocol_is_one_line():
    result = CliRunner().invoke(main, ["bench", "rebalance", "--protocols", "cooperative-sticky,eager"])
    assert result.exit_code != 0
    assert "--protocols: unknown eager" in result.output and "Traceback" not in result.output


def test_an_option_the_scenario_would_ignore_is_one_line():
    for args, said in ((["--records", "--join-interval", "2"], "--join-interval is the scale-up's"),
                       (["--record-cost-ms", "5"], "--record-cost-ms applies only with --records"),
                       (["--batch", "10"], "--batch applies only with --records")):
        result = CliRunner().invoke(main, ["bench", "rebalance", *args])
        assert result.exit_code != 0 and said in result.output and "Traceback" not in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
