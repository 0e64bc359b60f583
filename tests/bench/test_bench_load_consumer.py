"""`groupkeeper bench load`'s consumer-protocol loads, small: correctness under load, never a
timed assertion. Members join and reconcile through ConsumerGroupHeartbeat, then send the
steady heartbeat, pipelined (beside classic members against a coordinator of the same code)
and on schedule; no error, every answer the bytes a healthy coordinator gives, every member
still steady afterwards. The figures are printed for the log."""

from __future__ import annotations

import json
from dataclasses import replace

from tools.bench.load import suite


def _run(load: suite.Load) -> dict:
    suite.raise_open_files(4096)
    result = suite.run_load(load)
    print(json.dumps({k: result[k] for k in ("load", "api", "ratio")} | {"apis": result["ours"]["apis"]}, indent=1))
    return result


def _served_correctly(ours: dict) -> None:
    figures = ours["apis"]["consumer_heartbeat"]
    assert figures["answers"] > 0
    assert figures["errors"] == {}  # answers not the expected bytes would be counted here
    assert ours["verify"]["not_in_generation"] == {}
    assert "0" not in ours["epochs"]  # every member joined (JSON keys: epochs)


def test_pipelined_steady_heartbeats_beside_the_classic_ones():
    standard = suite.standard()[10]
    load = replace(standard, plan=replace(standard.plan, groups=2, members=8, connections=4, pipeline=4,
                                          duration=1.5, warmup=0.5))
    result = _run(load)
    assert result["api"] == "consumer_heartbeat" and result["reference"] == "classic"
    _served_correctly(result["ours"])
    assert result["ref"]["apis"]["heartbeat"]["answers"] > 0 and result["ratio"] is not None
    assert "consumer_heartbeat" not in result["ref"]["apis"]


def test_steady_heartbeats_on_schedule():
    standard = suite.standard()[11]
    load = replace(standard, plan=replace(standard.plan, groups=5, members=50, connections=50, rate=50 / 0.5,
                                          duration=2, warmup=0.5))
    result = _run(load)
    assert result["reference"] is None
    _served_correctly(result["ours"])
