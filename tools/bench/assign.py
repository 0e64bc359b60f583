"""Assignment strategies at scale, side by side with kafka-python's assignor classes on the
same input where kafka-python has the strategy.

Three groups: 1,000 members x 10,000 partitions (100 topics) and 5,000 members x 100,000
partitions (100 topics), every member subscribed to every topic; and 1,000 members x 10,000
partitions where each member subscribes to its own random 20 to 80 of the 100 topics (the
general, slower path of the sticky strategies). For each strategy: the
time of a fresh assignment (best of three), the time of the rebalance after one member is
replaced (owned partitions as the fresh assignment left them), and how balanced and how
sticky that rebalance was. kafka-python runs in a child process with a time limit, since
its sticky assignor takes minutes at the larger size.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from collections import namedtuple

from coordinator.assignors import BUILT_IN, MemberSubscription

SCENARIOS = {"1k members x 10k partitions": (1_000, 100, 100, False),
             "5k members x 100k partitions": (5_000, 100, 1_000, False),
             "1k x 10k, mixed subscriptions": (1_000, 100, 100, True)}
REFERENCE = {"range": "kafka.coordinator.assignors.range:RangePartitionAssignor",
             "roundrobin": "kafka.coordinator.assignors.roundrobin:RoundRobinPartitionAssignor",
             "sticky": "kafka.coordinator.assignors.sticky.sticky_assignor:StickyPartitionAssignor",
             "cooperative-sticky": "kafka.coordinator.assignors.cooperative_sticky:CooperativeStickyAssignor"}


def group(members: int, topics: int, partitions: int, mixed: bool):
    """The same group every time (a fixed seed), so both sides and every run see one input."""
    counts = {f"topic-{t:03d}": partitions for t in range(topics)}
    names = list(counts)
    rng = random.Random(20261122)

    def subscription() -> tuple[str, ...]:
        return tuple(sorted(rng.sample(names, rng.randint(topics // 5, topics * 4 // 5)))) if mixed else tuple(names)
    return [MemberSubscription(f"consumer-{i:05d}", subscription()) for i in range(members)], counts


def _best_of(fn, rounds: int = 3) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def _ours(name: str, members, counts) -> dict:
    assignor = BUILT_IN[name]
    fresh_s, fresh = _best_of(lambda: assignor.assign(members, counts))
    replaced = [MemberSubscription(m.member_id, m.topics, owned=fresh.partitions[m.member_id])
                for m in members[1:]] + [MemberSubscription("consumer-new", members[0].topics)]
    rebalance_s, after = _best_of(lambda: assignor.assign(replaced, counts))
    before = {(t, p): m.member_id for m in replaced for t, ps in m.owned.items() for p in ps}
    moved = sum(1 for mid, ts in after.partitions.items() for t, ps in ts.items() for p in ps
                if (t, p) in before and before[(t, p)] != mid)
    loads = [sum(len(ps) for ps in ts.values()) for ts in after.partitions.values()]
    return {"fresh_ms": round(fresh_s * 1000, 1), "rebalance_ms": round(rebalance_s * 1000, 1),
            "min_load": min(loads), "max_load": max(loads), "moved": moved,
            "unassigned": sum(counts.values()) - sum(loads)}


def _reference(target: str, sizes: tuple[int, int, int, bool], memory_gib: float, out) -> None:
    """In a child process: kafka-python's assignor on the same group, seconds to out.
    Its address space may grow by `memory_gib` at most: kafka-python's sticky assignor
    needs over 24 GiB at 5k x 100k, and the kernel's out-of-memory killer should not pick
    the victim."""
    import importlib
    import os
    import resource

    limits = resource.getrlimit(resource.RLIMIT_AS)
    try:
        from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

        pages = int(open("/proc/self/statm").read().split()[0])
        cap = pages * os.sysconf("SC_PAGE_SIZE") + int(memory_gib * 2**30)
        # the soft limit only: lifted again to report running out (reporting needs memory too)
        resource.setrlimit(resource.RLIMIT_AS, (cap, limits[1]))
        members, counts = group(*sizes)
        Member = namedtuple("Member", "member_id group_instance_id metadata")
        kp_members = [Member(m.member_id, None, ConsumerProtocolSubscription(0, list(m.topics), b""))
                      for m in members]

        class Cluster:  # the two calls kafka-python's assignors make of its ClusterMetadata
            def topics(self):
                return set(counts)

            def partitions_for_topic(self, topic):
                return set(range(counts[topic])) if topic in counts else None

        module, _, attribute = target.partition(":")
        cls = getattr(importlib.import_module(module), attribute)
        assignor = cls() if "sticky" in target else cls  # the sticky ones keep state per instance
        start = time.perf_counter()
        assignor.assign(Cluster(), kp_members)
        out.send(("ok", time.perf_counter() - start))
    except MemoryError:
        resource.setrlimit(resource.RLIMIT_AS, limits)
        out.send(("failed", f"out of memory (over {memory_gib:g} GiB more)"))
    except Exception as exc:  # reported by the parent, not mistaken for slowness
        out.send(("failed", f"{type(exc).__name__}: {exc}"))


class ReferenceFailed(Exception):
    """kafka-python's assignor raised on this input (its roundrobin does on mixed subscriptions)."""


def reference_ms(name: str, sizes: tuple[int, int, int, bool], limit_s: float, memory_gib: float) -> float | None:
    """kafka-python's time in ms, or None when it did not finish within `limit_s`."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_reference, args=(REFERENCE[name], sizes, memory_gib, send))
    child.start()
    send.close()  # the child's end only: its death is then an end of file here
    try:
        if not receive.poll(limit_s):
            return None
        try:
            outcome, value = receive.recv()
        except EOFError:
            child.join()
            outcome, value = "failed", f"its process died (exit status {child.exitcode})"
        if outcome != "ok":
            raise ReferenceFailed(f"kafka-python's {name} assignor failed: {value}")
        return round(value * 1000, 1)
    finally:
        child.kill()
        child.join()


def run(reference_limit_s: float, reference_memory_gib: float, scenarios: list[str]) -> list[dict]:
    results = []
    for scenario in scenarios:
        sizes = SCENARIOS[scenario]
        members, counts = group(*sizes)
        for name in sorted(BUILT_IN):
            row = {"scenario": scenario, "strategy": name, **_ours(name, members, counts)}
            if name in REFERENCE:
                try:
                    theirs = reference_ms(name, sizes, reference_limit_s, reference_memory_gib)
                except ReferenceFailed as exc:
                    row["kafka_python_failed"] = str(exc)
                else:
                    row["kafka_python_fresh_ms"] = theirs
                    row["ratio"] = round(theirs / row["fresh_ms"], 1) if theirs else None
            results.append(row)
    return results


def table(results: list[dict], reference_limit_s: float) -> str:
    head = (f"{'SCENARIO':<30} {'STRATEGY':<19} {'FRESH MS':>9} {'KAFKA-PYTHON MS':>16} {'RATIO':>7} "
            f"{'REBALANCE MS':>13} {'MIN':>5} {'MAX':>5} {'MOVED':>6}")
    rows, failures = [head], []
    for r in results:
        if "kafka_python_failed" in r:
            theirs, ratio = "failed", "-"
            failures.append(f"{r['scenario']}: {r['kafka_python_failed']}")
        elif "kafka_python_fresh_ms" not in r:
            theirs, ratio = "-", "-"
        elif r["kafka_python_fresh_ms"] is None:
            theirs, ratio = f">{reference_limit_s * 1000:,.0f}", f">{reference_limit_s * 1000 / r['fresh_ms']:,.0f}"
        else:
            theirs, ratio = f"{r['kafka_python_fresh_ms']:,.1f}", f"{r['ratio']:,.1f}"
        rows.append(f"{r['scenario']:<30} {r['strategy']:<19} {r['fresh_ms']:>9,.1f} {theirs:>16} {ratio:>7} "
                    f"{r['rebalance_ms']:>13,.1f} {r['min_load']:>5} {r['max_load']:>5} {r['moved']:>6}")
    return "\n".join(rows + failures)
