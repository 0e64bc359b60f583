"""`groupkeeper bench load --loads 10`: Metadata for 1,000 partitions from two coordinators
of the same code, one answering from its cache of encoded answers and one without it.
Correctness only, never a timed assertion: every answer the same bytes as the first, the
same answer from both (but for their own nodes' ports), every partition in it."""

from __future__ import annotations

import json
from dataclasses import replace

from tools.bench.load import suite


def test_the_metadata_load_answers_alike_with_and_without_the_cache():
    standard = suite.standard()[9]  # load 10, in a shorter window
    assert standard.plan.requests == "metadata"
    result = suite.run_load(replace(standard, plan=replace(standard.plan, duration=1.5, warmup=0.5)))
    print(json.dumps({k: result.get(k) for k in ("load", "ratio", "targets")}, indent=1))
    assert "error" not in result, result
    ours, ref = result["ours"], result["ref"]
    assert result["reference"] == "uncached" and result["api"] == "metadata"
    for side in (ours, ref):
        assert side["apis"]["metadata"]["answers"] > 0 and side["apis"]["metadata"]["errors"] == {}
        assert side["metadata"]["partitions"] == 1000 and side["metadata"]["leaderless"] == 0
    assert ours["metadata"]["sha256"] == ref["metadata"]["sha256"]
    assert ours["gateway"]["remembered_us"] < ours["gateway"]["rewritten_us"]
    met = {t["what"]: t["met"] for t in result["targets"]}
    assert met["the same answer as the path without the cache, every time"] and met["partitions answered"]
