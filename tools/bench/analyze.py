"""The analysis at scale: `groupkeeper analyze` on an event log, its wall time and the peak
memory of its whole process tree (the Python driver and Spark's JVM), beside a reference
in the same run: one plain Python process streaming the same files for two of the tables
(the latest offset per partition, and rebalances per group).

Both run as child processes; memory is the largest sum of resident set sizes over the
child and its descendants, sampled every 0.2 s (neither's own accounting sees the JVM).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _tree_rss(root: int) -> int:
    """Bytes resident in `root` and all its descendants now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            pass
    return total


def measure(command: list[str]) -> dict:
    """Run `command`; its seconds, peak tree memory and output."""
    started = time.perf_counter()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as child:
        peak = 0
        while child.poll() is None:
            peak = max(peak, _tree_rss(child.pid))
            time.sleep(0.2)
        output = child.stdout.read()
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])}... exited with {child.returncode}")
    return {"seconds": round(time.perf_counter() - started, 1), "peak_mib": round(peak / 2**20), "output": output.strip()}


def reference(directory: str) -> str:
    """In a child process: the reference's answers, summed up in one line."""
    events, latest, rebalances = reference_tables(directory)
    return f"events: {events:,}, offsets_latest: {len(latest):,}, groups with rebalances: {len(rebalances):,}"


def reference_tables(directory: str) -> tuple[int, dict[tuple, tuple], dict[str, int]]:
    """Events read; (group, topic, partition) -> (ts, latest offset); group -> rebalances:
    one pass over every event file, in plain Python."""
    latest: dict[tuple, tuple] = {}
    rebalances: dict[str, int] = {}
    events = 0
    for path in sorted(Path(directory).rglob("*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                events += 1
                if event["type"] == "offsets_committed":
                    for o in event["offsets"]:
                        key = (event["group"], o["topic"], o["partition"])
                        if key not in latest or (event["ts"], o["offset"]) > latest[key]:
                            latest[key] = (event["ts"], o["offset"])
                elif event["type"] == "rebalance_completed":
                    rebalances[event["group"]] = rebalances.get(event["group"], 0) + 1
    return events, latest, rebalances


def run(events: str, out: str, master: str) -> list[dict]:
    ours = measure([sys.executable, "-m", "tools", "analyze", "--events", events, "--out", out,
                    "--master", master])
    theirs = measure([sys.executable, "-c", f"from tools.bench.analyze import reference; "
                                            f"print(reference({events!r}))"])
    return [{"run": "groupkeeper analyze (all tables and the report)", **ours},
            {"run": "plain Python, one process (offsets_latest and rebalance counts only)", **theirs}]


def table(results: list[dict]) -> str:
    rows = [f"{'RUN':<70} {'SECONDS':>8} {'PEAK MIB':>9}"]
    for r in results:
        rows.append(f"{r['run']:<70} {r['seconds']:>8,.1f} {r['peak_mib']:>9,}")
        rows.append(f"    {r['output'].splitlines()[0]}")
    return "\n".join(rows)
