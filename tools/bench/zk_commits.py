"""`groupkeeper bench zk-commits`: committed partition-offsets per second into ZooKeeper.

Three ways of storing the same commits, in one run against the same local ZooKeeper, each
with the same number of concurrent committers (one per group, 10 partitions a request):

- group commit: the stores (`PartitionStore`) of the group-partitions a coordinator spreads
  the groups over, with the instance's writer (`OffsetWriter`), which writes every commit
  that arrived while the previous batch was in flight in as few multi() calls as it can;
- multi per request: each request its own fenced multi(), all in flight at once;
- write per partition: each partition offset its own setData(), unfenced, all in flight.

Then the acknowledgement latency of group commit at a fixed offered load, in steady state
(every group has committed once, so its shards exist): requests start on a fixed schedule
and latency counts from the scheduled start, so a stall is not hidden.
"""

from __future__ import annotations

import gc
import math
import sys
import tempfile
import time

import trio

from coordinator.cluster.placement import DEFAULT_GROUP_PARTITIONS, partition_for
from coordinator.store import layout
from coordinator.store.bridge import ZooKeeperBridge
from coordinator.store.fence import Fence, acquire, fenced_commit
from coordinator.store.partition import PartitionStore
from coordinator.store.writer import OffsetWriter
from coordinator.store.zkserver import ZooKeeperServer, free_port

PARTITIONS_PER_REQUEST = 10
TOPIC = "bench"
BENCH_INSTANCE = 0  # the owner the benchmark writes as


def _entries(seq: int) -> dict[tuple[str, int], tuple]:
    return {(TOPIC, p): (seq, -1, "", seq) for p in range(PARTITIONS_PER_REQUEST)}


async def _run_for(seconds: float, committers: int, commit_once) -> float:
    """Requests per second that `commit_once(worker, seq)` sustained."""
    done = 0
    deadline = trio.current_time() + seconds

    async def worker(w: int) -> None:
        nonlocal done
        seq = 0
        while trio.current_time() < deadline:
            seq += 1
            await commit_once(w, seq)
            done += 1

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for w in range(committers):
            nursery.start_soon(worker, w)
    return done / (trio.current_time() - start)


class _Owner:
    """Group-partitions `first`.. `first + DEFAULT_GROUP_PARTITIONS - 1` owned as a coordinator
    owns its own, with one writer; each group's commits go to the store a coordinator would
    place it in."""

    def __init__(self, zk: ZooKeeperBridge, first: int):
        self.zk = zk
        self.first = first
        self.writer = OffsetWriter(zk)
        self.stores: list[PartitionStore] = []

    async def start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.writer.run)
        for n in range(DEFAULT_GROUP_PARTITIONS):
            store = PartitionStore(self.zk, self.writer, (await acquire(self.zk, self.first + n, BENCH_INSTANCE))[0])
            await store.load()
            await nursery.start(store.run_writer)
            self.stores.append(store)

    async def commit(self, group: str, entries: dict) -> None:
        await self.stores[partition_for(group, DEFAULT_GROUP_PARTITIONS)].commit_offsets(group, entries)


async def _group_commit(zk: ZooKeeperBridge, first: int, seconds: float, committers: int):
    owner = _Owner(zk, first)
    async with trio.open_nursery() as nursery:
        await owner.start(nursery)
        rate = await _run_for(seconds, committers, lambda w, seq: owner.commit(f"g{w}", _entries(seq)))
        nursery.cancel_scope.cancel()
    return rate, owner.writer.multis


async def _prepare_shards(zk: ZooKeeperBridge, fence: Fence, committers: int) -> None:
    for w in range(committers):
        for shard in {layout.shard_of(p) for p in range(PARTITIONS_PER_REQUEST)}:
            await zk.create(layout.shard_path(fence.partition, f"g{w}", TOPIC, shard), b"{}",
                            makepath=True)


async def _multi_per_request(zk: ZooKeeperBridge, partition: int, seconds: float, committers: int):
    fence = (await acquire(zk, partition, BENCH_INSTANCE))[0]
    await _prepare_shards(zk, fence, committers)

    async def commit_once(w: int, seq: int) -> None:
        txn = fence.transaction(zk)
        shards: dict[int, dict] = {}
        for (_, p), entry in _entries(seq).items():
            shards.setdefault(layout.shard_of(p), {})[str(p)] = list(entry)
        for shard, content in shards.items():
            txn.set_data(layout.shard_path(partition, f"g{w}", TOPIC, shard), layout.encode(content))
        await fenced_commit(zk, fence, txn)

    return await _run_for(seconds, committers, commit_once)


async def _write_per_partition(zk: ZooKeeperBridge, partition: int, seconds: float, committers: int):
    base = f"{layout.partition_path(partition)}/flat"
    for w in range(committers):
        for p in range(PARTITIONS_PER_REQUEST):
            await zk.create(f"{base}/g{w}/{p}", b"", makepath=True)

    async def commit_once(w: int, seq: int) -> None:
        async with trio.open_nursery() as nursery:
            for (_, p), entry in _entries(seq).items():
                nursery.start_soon(zk.set, f"{base}/g{w}/{p}", layout.encode(list(entry)))

    return await _run_for(seconds, committers, commit_once)


async def _latency(zk: ZooKeeperBridge, first: int, rate: float, seconds: float, groups: int):
    owner = _Owner(zk, first)
    latencies: list[float] = []
    async with trio.open_nursery() as nursery:
        await owner.start(nursery)
        async with trio.open_nursery() as warm_up:  # steady state: every shard exists
            for g in range(groups):
                warm_up.start_soon(owner.commit, f"g{g}", _entries(0))
        multis_before = owner.writer.multis
        gc.freeze()  # as the daemon does once loaded: long-lived objects leave the GC's scans

        async def one(i: int, scheduled: float) -> None:
            await owner.commit(f"g{i % groups}", _entries(i))
            latencies.append(trio.current_time() - scheduled)

        async with trio.open_nursery() as requests:
            start = trio.current_time()
            total, i = int(rate * seconds), 0
            while i < total:  # every millisecond, start the requests that are due
                await trio.sleep_until(start + i / rate)
                now = trio.current_time()
                while i < total and start + i / rate <= now:
                    requests.start_soon(one, i, start + i / rate)
                    i += 1
        elapsed = trio.current_time() - start
        nursery.cancel_scope.cancel()
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, math.ceil(q * len(latencies)) - 1)] * 1000

    return {"offered_requests_per_s": rate, "achieved_requests_per_s": round(len(latencies) / elapsed),
            "requests": len(latencies), "multis": owner.writer.multis - multis_before, "p50_ms": round(pct(0.50), 2),
            "p99_ms": round(pct(0.99), 2), "max_ms": round(latencies[-1] * 1000, 2)}


async def _bench(hosts: str, seconds: float, committers: int, rate: float) -> dict:
    zk = ZooKeeperBridge(hosts, session_timeout=30.0)
    await zk.start()
    run_id = _run_id()  # fresh group-partitions on a reused ensemble
    try:
        group_rate, multis = await _group_commit(zk, run_id, seconds, committers)
        multi_rate = await _multi_per_request(zk, run_id + 2 * DEFAULT_GROUP_PARTITIONS, seconds, committers)
        flat_rate = await _write_per_partition(zk, run_id + 2 * DEFAULT_GROUP_PARTITIONS + 1, seconds, committers)
        latency = await _latency(zk, run_id + DEFAULT_GROUP_PARTITIONS, rate, seconds, groups=1000)
    finally:
        await zk.stop()
    per = PARTITIONS_PER_REQUEST
    return {
        "committers": committers, "partitions_per_request": per, "seconds": seconds,
        "throughput": [
            {"mode": "group commit", "requests_per_s": round(group_rate),
             "partition_offsets_per_s": round(group_rate * per), "multis": multis},
            {"mode": "multi per request", "requests_per_s": round(multi_rate),
             "partition_offsets_per_s": round(multi_rate * per)},
            {"mode": "write per partition", "requests_per_s": round(flat_rate),
             "partition_offsets_per_s": round(flat_rate * per)},
        ],
        "latency": latency,
    }


async def _group_commit_only(hosts: str, seconds: float, committers: int) -> float:
    zk = ZooKeeperBridge(hosts, session_timeout=30.0)
    await zk.start()
    try:
        return (await _group_commit(zk, _run_id(), seconds, committers))[0]
    finally:
        await zk.stop()


def _run_id() -> int:
    """The first group-partition of a run: runs against one ensemble never share one."""
    return int(time.time() * 1000) % 1_000_000 * 4 * DEFAULT_GROUP_PARTITIONS


def group_commit_rate(zookeeper: str, seconds: float, committers: int) -> float:
    """Requests per second of group commit alone: `bench load`'s reference for commits,
    run in a process of its own on the coordinator's core."""
    return trio.run(_group_commit_only, zookeeper, seconds, committers)


def run(zookeeper: str | None, seconds: float, committers: int, rate: float) -> dict:
    """Against `zookeeper`, or a fresh local ZooKeeper in a temporary directory."""
    if zookeeper:
        return trio.run(_bench, zookeeper, seconds, committers, rate)
    with tempfile.TemporaryDirectory(prefix="groupkeeper-bench-") as data_dir:
        with ZooKeeperServer(data_dir, free_port()) as server:
            return trio.run(_bench, server.connect_string, seconds, committers, rate)


def table(result: dict) -> str:
    rows = [f"{'MODE':<22} {'REQUESTS/S':>11} {'PARTITION-OFFSETS/S':>20}"]
    for r in result["throughput"]:
        rows.append(f"{r['mode']:<22} {r['requests_per_s']:>11,} {r['partition_offsets_per_s']:>20,}")
    lat = result["latency"]
    rows.append("")
    rows.append(f"group commit at {lat['offered_requests_per_s']:,.0f} requests/s offered "
                f"({result['partitions_per_request']} partitions each): achieved "
                f"{lat['achieved_requests_per_s']:,}/s, p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms, "
                f"max {lat['max_ms']} ms, {lat['multis']} multi() calls for {lat['requests']:,} requests")
    return "\n".join(rows)


if __name__ == "__main__":  # ZOOKEEPER SECONDS COMMITTERS: group commit's requests/s, for bench load
    print(group_commit_rate(sys.argv[1], float(sys.argv[2]), int(sys.argv[3])))
