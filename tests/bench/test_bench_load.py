"""`groupkeeper bench load`, small: correctness under load, never a timed assertion.

Each run starts its own ZooKeeper and coordinator (and the reference), joins every member
for real, loads it for a few seconds, then checks what members would notice: no error
answered, every member still in its generation, every acknowledged commit readable. The
figures are printed for the log.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def bench_load(*args: str) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "tools", "bench", "load", "--json", *args],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)
    print(json.dumps([{k: r[k] for k in ("load", "api", "ratio")} | {"apis": r["ours"]["apis"]}
                      for r in results], indent=1))
    return results


def assert_served_correctly(ours: dict, commits: bool) -> None:
    for api, figures in ours["apis"].items():
        assert figures["answers"] > 0, api
        assert figures["errors"] == {}, (api, figures["errors"])
    assert ours["verify"]["not_in_generation"] == {}
    if commits:
        assert ours["verify"]["commits_checked"] > 0
        assert ours["verify"]["commits_lost"] == 0


def test_heartbeats_and_commits_on_schedule_lose_nothing():
    [result] = bench_load("--groups", "5", "--members", "60", "--connections", "30", "--pipeline", "2",
                          "--rate", "600", "--commit-interval", "250", "--duration", "1.5")
    ours = result["ours"]
    assert set(ours["apis"]) == {"heartbeat", "offset_commit"}
    assert_served_correctly(ours, commits=True)
    assert ours["generations"] == {"1": 60}  # JSON keys: one generation, everyone in it
    assert result["ref"]["apis"]["heartbeat"]["answers"] > 0 and result["ratio"] is not None
    assert ours["server"]["cpu"] is not None and ours["server"]["rss_mb"] > 0


@pytest.mark.parametrize("requests", ["heartbeat", "commit"])
def test_as_fast_as_possible_loses_nothing(requests):
    [result] = bench_load("--groups", "4", "--members", "16", "--connections", "8", "--pipeline", "8",
                          "--rate", "0", "--requests", requests, "--duration", "1")
    ours = result["ours"]
    assert set(ours["apis"]) == {"offset_commit" if requests == "commit" else "heartbeat"}
    assert_served_correctly(ours, commits=requests == "commit")
    assert result["reference"] == ("group commit" if requests == "commit" else "framing")
    assert result["ratio"] is not None and result["ratio"] > 0


def test_a_bad_load_option_is_one_line():
    done = subprocess.run([sys.executable, "-m", "tools", "bench", "load", "--members", "2", "--groups", "5"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "--members must be at least --groups" in done.stderr
