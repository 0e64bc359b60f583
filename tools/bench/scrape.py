"""`groupkeeper bench scrape`: how long one /metrics scrape holds the serving loop as the
groups grow, with the collectors that read every group (`metrics.LagCollector` and its
sources, `cluster.lag`; `metrics.GroupsCollector`) stepping as they do, beside the same
collectors made in one piece each (how they were made before, the reference) in the same run.

In this process, no I/O: a coordinator's shape as the collectors read it (owned
group-partitions, each a store's confirmed offsets: the shape the tests use too), real
`LogEnds` with every partition's end known, and real `CommitWindows` holding `WINDOW`
commits a partition. `exposition` runs under trio beside a task that stands for the serving
loop and times the gaps between its turns: the longest gap is what a client's request
waited at most, the number of gaps how often the loop ran during the scrape."""

from __future__ import annotations

import gc
import statistics
from time import perf_counter
from types import SimpleNamespace

import trio

from coordinator.cluster import lag
from coordinator.metrics import GroupsCollector, LagCollector, Registry
from coordinator.serving.metrics_http import exposition
from coordinator.topics.log_ends import LogEnds

GROUP_PARTITIONS = 50  # the store's default number of group-partitions (groups hashed over them)
TOPICS = 50
SERIES = 100  # metrics_group_series' default


def _state(groups: int, partitions: int):
    """(coordinator-shaped, LogEnds, CommitWindows) of `groups` groups, each committed on
    `partitions` partitions of one of TOPICS topics, every end known, every window full."""
    now_ms = 1_000_000_000
    ends = LogEnds(max_partitions=TOPICS * partitions + 1)
    for t in range(TOPICS):
        for p in range(partitions):
            ends.seen(f"topic-{t}", p, 10_000_000, now=0)
    stores = [{} for _ in range(GROUP_PARTITIONS)]
    windows = lag.CommitWindows(ends, max_partitions=groups * partitions + 1)
    for g in range(groups):
        group, topic = f"group-{g}", f"topic-{g % TOPICS}"
        for k in range(lag.WINDOW):  # commits a second apart, each further on
            entries = {p: (1_000 * k + g, -1, None, now_ms - 1_000 * (lag.WINDOW - k)) for p in range(partitions)}
            windows.committed(group, topic, entries)
        stores[g % GROUP_PARTITIONS][group] = {topic: entries}
    loaded = trio.Event()
    loaded.set()
    owned = {i: SimpleNamespace(loaded=loaded, releasing=False, store=SimpleNamespace(durable=durable))
             for i, durable in enumerate(stores)}
    return SimpleNamespace(owned=owned), ends, windows, now_ms


class _OnePiece:
    """A collector made in one piece (`collect()` only): the reference."""

    def __init__(self, collector):
        self.collector = collector

    def collect(self):
        return self.collector.collect()

    def describe(self):
        return []


def _registry(groups: int, partitions: int, stepping: bool) -> Registry:
    coordinator, ends, windows, now_ms = _state(groups, partitions)
    collector = LagCollector(lambda: lag.lag_in_steps(coordinator, ends), SERIES, 0,
                             lambda: windows.statuses_in_steps(coordinator, now_ms), lag.SEVERITY)
    listed = [(f"group-{g}", "Stable", 3, "classic") for g in range(groups)]
    made = Registry()
    made.register(collector if stepping else _OnePiece(collector))
    groups = GroupsCollector(lambda: listed, lambda: GROUP_PARTITIONS, lambda: GROUP_PARTITIONS, lambda: 3, SERIES)
    made.register(groups if stepping else _OnePiece(groups))
    return made


async def _scrape(registry: Registry) -> tuple[float, list[float], bytes]:
    """One exposition beside a task that stands for the serving loop: its seconds, the
    gaps between the loop's turns meanwhile, and its text."""
    gaps: list[float] = []
    done, running = trio.Event(), trio.Event()

    async def serving_loop() -> None:
        last = perf_counter()
        running.set()
        while not done.is_set():
            await trio.lowlevel.checkpoint()
            now = perf_counter()
            gaps.append(now - last)
            last = now

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serving_loop)
        await running.wait()  # trio runs a batch's tasks in no set order: the loop's clock first
        began = perf_counter()
        text = await exposition(registry)
        took = perf_counter() - began
        done.set()
    return took, gaps, text


def run(groups: list[int], partitions: int = 6, rounds: int = 3) -> dict:
    """Per group count, each way (stepping, one piece), `rounds` scrapes: the median of
    their seconds and of their longest gaps, and the loop's turns in a scrape."""
    results = []
    for count in groups:
        row = {"groups": count, "partitions": count * partitions}
        texts = {}
        for way, stepping in (("steps", True), ("one_piece", False)):
            registry = _registry(count, partitions, stepping)
            took, longest, turns = [], [], []
            for _ in range(rounds):
                gc.collect()  # each scrape from the same start: not another's garbage
                seconds, gaps, text = trio.run(_scrape, registry)
                took.append(seconds)
                longest.append(max(gaps))
                turns.append(len(gaps))
                texts[way] = text
            row[way] = {"scrape_ms": round(1000 * statistics.median(took), 2),
                        "longest_gap_ms": round(1000 * statistics.median(longest), 2),
                        "longest_gap_ms_worst": round(1000 * max(longest), 2),
                        "loop_turns": int(statistics.median(turns)), "bytes": len(texts[way])}
        row["same_text"] = texts["steps"] == texts["one_piece"]
        results.append(row)
    return {"settings": {"groups": groups, "partitions_per_group": partitions, "rounds": rounds,
                         "series": SERIES, "window": lag.WINDOW}, "results": results}


def table(result: dict) -> str:
    s = result["settings"]
    lines = [f"One /metrics scrape of the lag and group collectors: each group committed on "
             f"{s['partitions_per_group']} partitions, {s['window']} commits a partition kept, every end known; "
             f"median of {s['rounds']} scrapes each way.",
             "",
             f"{'groups':>8} {'partitions':>10}  {'way':<10} {'scrape ms':>10} {'longest wait ms':>16} "
             f"{'(worst)':>8} {'loop turns':>10}  same text"]
    for row in result["results"]:
        for way, label in (("steps", "in steps"), ("one_piece", "one piece")):
            w = row[way]
            lines.append(f"{row['groups']:>8,} {row['partitions']:>10,}  {label:<10} {w['scrape_ms']:>10.1f} "
                         f"{w['longest_gap_ms']:>16.2f} {w['longest_gap_ms_worst']:>8.2f} {w['loop_turns']:>10,}  "
                         + ("yes" if row["same_text"] else "NO"))
    lines += ["", "longest wait: the longest the serving loop waited for its next turn during the scrape "
                  "(a request arriving then waited as long)."]
    return "\n".join(lines)
