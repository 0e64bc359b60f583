"""`bench gateway`'s verdicts from a run's figures (no processes): each target against
HAProxy's figure, and beside each latency target the same difference with nothing between
the clients and the broker (DIRECT), said plainly where the broker alone misses it too."""

from __future__ import annotations

from types import SimpleNamespace

from tools.bench.gateway import Settings, _report, table


def mode(mb_produce: float, mb_fetch: float, p50: float, p99: float, p999: float, relay_cpu: float | None) -> dict:
    cpu = {"relay": relay_cpu, "broker": 1.0, "client": 1.0}
    return {"produce": {"mb_per_s": mb_produce, "rounds_mb_per_s": [mb_produce], "relay_cpu_ms_per_mb": relay_cpu,
                        "cpu_s": cpu, "failed": 0},
            "fetch": {"mb_per_s": mb_fetch, "rounds_mb_per_s": [mb_fetch], "relay_cpu_ms_per_mb": relay_cpu,
                      "cpu_s": cpu, "read": 10, "complete": True},
            "latency": {"p50_ms": p50, "p99_ms": p99, "p999_ms": p999, "max_ms": p999 + 1, "records": 8,
                        "delivered": 8, "failed": 0, "rounds_p50_ms": [p50], "rounds_p99_ms": [p99], "cpu_s": cpu,
                        "relay_cpu_us_per_record": relay_cpu}}


def report(direct: dict, relay: dict, gateway: dict, relay2: dict | None = None) -> dict:
    """The run's report from these modes' figures; with `relay2`, as `--second-relay` has it."""
    modes = {"direct": direct, "relay": relay, "gateway": gateway, **({"relay2": relay2} if relay2 else {})}
    result = _report(Settings(second_relay=relay2 is not None), modes, (0.5, 0.5, 0.5),
                     SimpleNamespace(port=1, node_port=2, node_id=3, offset=4),
                     SimpleNamespace(binary="/usr/sbin/haproxy", threads=1))
    result["clients"] = {}
    return result


def test_each_latency_target_carries_the_brokers_own_difference():
    # the consumer beside on Tansu, as one run had it: the broker alone, directly, misses p99
    result = report(mode(360, 600, 0.139, 17.005, 24.073, None), mode(335, 514, 0.200, 12.455, 18.422, 0.4),
                    mode(363, 556, 0.287, 25.729, 45.545, 0.38))
    by = {t["what"].split(" at ")[0]: t for t in result["targets"]}
    assert (by["produce p50"]["met"], by["produce p99"]["met"], by["produce p99.9"]["met"]) == (True, False, False)
    assert by["produce p50"]["direct_minus_relay"] == -0.061 and by["produce p50"]["direct_met"]
    assert by["produce p99"]["direct_minus_relay"] == 4.55 and not by["produce p99"]["direct_met"]
    assert by["produce p99.9"]["direct_minus_relay"] == 5.651 and not by["produce p99.9"]["direct_met"]
    assert not any("direct_minus_relay" in t for t in result["targets"] if "MB" in t["what"])
    lines = table(result).splitlines()
    p99 = next(line for line in lines if "produce p99 at" in line and line.lstrip().startswith("["))
    assert p99.startswith("  [MISSED]")
    assert p99.endswith("13.274 (DIRECT - RELAY +4.550: the broker alone misses it too)")
    p50 = next(line for line in lines if "produce p50 at" in line and line.lstrip().startswith("["))
    assert p50.startswith("  [met]") and p50.endswith("0.087 (DIRECT - RELAY -0.061)")


def test_a_missing_direct_figure_is_shown_as_unknown_and_decides_nothing():
    direct = mode(360, 600, 0.1, 1.0, 2.0, None)
    direct["latency"]["p99_ms"] = None
    result = report(direct, mode(335, 514, 0.2, 1.0, 2.0, 0.4), mode(363, 556, 0.25, 1.5, 2.5, 0.38))
    p99 = next(t for t in result["targets"] if t["what"].startswith("produce p99 "))
    assert p99["met"] and p99["direct_minus_relay"] is None and not p99["direct_met"]
    line = next(line for line in table(result).splitlines() if line.startswith("  [met] produce p99 "))
    assert line.endswith("0.500 (DIRECT - RELAY -)")


def test_the_second_relay_is_a_column_and_each_latency_target_says_what_one_more_hop_moved():
    # --second-relay: as the consumer beside on Tansu had it, one plain hop more misses p50 as the gateway does
    result = report(mode(360, 600, 0.154, 15.9, 26.1, None), mode(335, 514, 0.200, 14.1, 20.6, 0.4),
                    mode(363, 556, 0.529, 14.9, 22.0, 0.38), relay2=mode(340, 520, 0.521, 14.6, 20.9, 0.8))
    by = {t["what"].split(" at ")[0]: t for t in result["targets"]}
    assert not by["produce p50"]["met"]
    assert by["produce p50"]["second_relay_minus_relay"] == 0.321 and not by["produce p50"]["second_relay_met"]
    assert by["produce p99"]["second_relay_minus_relay"] == 0.5 and by["produce p99"]["second_relay_met"]
    assert not any("second_relay_minus_relay" in t for t in result["targets"] if "MB" in t["what"])
    lines = table(result).splitlines()
    header = next(line for line in lines if "GW/RELAY" in line)
    assert header.split() == ["DIRECT", "RELAY", "RELAY", "x2", "GATEWAY", "GW/RELAY", "GW/DIRECT"]
    p50 = next(line for line in lines if line.startswith("  produce p50 ms"))
    assert p50.split()[-6:] == ["0.15", "0.20", "0.52", "0.53", "+0.33", "+0.38"]  # the ratios still GATEWAY's
    verdict = next(line for line in lines if line.startswith("  [MISSED] produce p50 "))
    assert verdict.endswith("(DIRECT - RELAY -0.046; RELAY x2 - RELAY +0.321: one more plain relay misses it too)")
    p99 = next(line for line in lines if line.startswith("  [met] produce p99 "))
    assert p99.endswith("(DIRECT - RELAY +1.800: the broker alone misses it too; RELAY x2 - RELAY +0.500)")


def test_without_the_second_relay_there_is_no_such_column_nor_figure():
    result = report(mode(360, 600, 0.1, 1.0, 2.0, None), mode(335, 514, 0.2, 1.0, 2.0, 0.4),
                    mode(363, 556, 0.25, 1.5, 2.5, 0.38))
    assert not any("second_relay_minus_relay" in t for t in result["targets"])
    assert "RELAY x2" not in table(result)
