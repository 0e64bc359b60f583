"""`groupkeeper bench rebalance --records` as an operator runs it, at a tiny scale (3 members,
12 partitions, 2 ms a record), eager range and KIP-848: the group is coordinated by groupkeeper
through the gateway, records flowed to every partition's owner, every phase ended with every
partition held once and read again, and the figures are there and sane; KIP-848's published
figures are printed in the same output. (Figures come from full runs, in docs/benchmarks.md.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tools.bench.rebalance_records import table

ROOT = Path(__file__).resolve().parents[2]
MEMBERS, PARTITIONS = 3, 12
TINY = ["--records", "--members", str(MEMBERS), "--partitions", str(PARTITIONS), "--record-cost-ms", "2",
        "--batch", "20", "--heartbeat-ms", "300", "--session-timeout-ms", "6000", "--settle", "1",
        "--timeout", "30", "--protocols", "range,consumer"]


def test_slow_members_read_records_through_the_gateway_and_each_phase_ends_with_every_partition_read_again():
    done = subprocess.run([sys.executable, "-m", "tools", "bench", "rebalance", "--json", *TINY],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["published"]["classic_s"] == 103.0 and result["published"]["consumer_s"] == 5.0
    rows = {row["row"]: row for row in result["rows"]}
    assert list(rows) == ["range", "consumer"]
    for name, row in rows.items():
        assert row["coordinated"]["groupkeeper"] and not row["coordinated"]["broker_knows_group"], name
        assert row["coordinator_agrees"], name
        assert row["delivered_per_partition"]["min"] > 0 and row["delivered"] <= row["produced"], name
        assert not row["consume_errors"] and not row["produce_failures"] and row["lost_callbacks"] == 0, name
        for phase in ("start", "join", "leave"):
            figures = row["phases"][phase]
            assert figures["finished"], (name, phase, figures)
            assert 0 <= figures["stable_s"] and 0 < figures["all_read_again_s"], (name, phase)
            assert figures["delivered"] > 0 and 0 <= figures["read_twice"] <= figures["delivered"], (name, phase)
            assert figures["rebalances"] >= 1, (name, phase)
        # after the join 4 members hold 3 each; after the leave 3 hold 4 each
        assert row["phases"]["join"]["final"]["partitions_per_member_max"] == PARTITIONS // (MEMBERS + 1), name
        assert row["phases"]["leave"]["final"]["partitions_per_member_min"] == PARTITIONS // MEMBERS, name
        # the leaver gave up what it held
        assert row["phases"]["leave"]["revoked_per_member"]["total"] >= PARTITIONS // (MEMBERS + 1), name
    # eager revokes every partition at each rebalance; KIP-848 only those that move to the newcomer
    assert rows["range"]["phases"]["join"]["revoked_per_member"]["total"] >= PARTITIONS
    assert PARTITIONS // (MEMBERS + 1) <= rows["consumer"]["phases"]["join"]["revoked_per_member"]["total"] < PARTITIONS
    assert rows["consumer"]["requests"].get("ConsumerGroupHeartbeat", 0) > 0
    assert "JoinGroup" not in rows["consumer"]["requests"] and rows["range"]["requests"].get("JoinGroup", 0) > 0
    text = table(result)
    assert "published (reference)" in text and "classic 103 s, KIP-848 ~5 s" in text
