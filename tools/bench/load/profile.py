"""Where the coordinator spends its time under a load: py-spy samples its process during
the measured window; the samples are summed per function (its own time, and with what it
calls)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

RATE = 100  # samples per second


def py_spy() -> str | None:
    found = Path(sys.executable).with_name("py-spy")
    return str(found) if found.exists() else shutil.which("py-spy")


def start(pid: int, seconds: float, raw: Path) -> subprocess.Popen | None:
    """Sample `pid` for `seconds` into `raw` (collapsed stacks); None without py-spy."""
    command = py_spy()
    if command is None:
        return None
    return subprocess.Popen([command, "record", "--pid", str(pid), "--gil", "--duration", str(max(1, round(seconds))),
                             "--rate", str(RATE), "--format", "raw", "--output", str(raw)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def summary(raw: Path, top: int = 25) -> dict:
    """The functions with the most samples: on top of the stack (own time) and anywhere on
    it (inclusive), each as a share of all samples."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for _, names, n in stacks(raw):
        total += n
        own[names[-1]] += n
        for name in set(names):
            inclusive[name] += n
    share = (lambda c: [[name, round(n / total, 3)] for name, n in c.most_common(top)]) if total else (lambda c: [])
    return {"samples": total, "own": share(own), "inclusive": share(inclusive)}


def serving_summary(raws: list[Path], top: int = 15) -> dict | None:
    """The samples of groupkeeper's serving (main, trio) thread in `raws` (those that exist):
    how many found it waiting in epoll (idle); of the others, the lines with the most on top
    of the stack (own) and the functions with the most anywhere on it below trio's run loop
    (inclusive; not the frames every sample has: runpy, click), as shares of the busy
    samples. Other threads' samples (kazoo's, trio's idle workers) are left out. None when
    no sample was of that thread."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    serving = idle = 0
    for raw in raws:
        if not raw.exists():
            continue
        for stack, names, n in stacks(raw):
            if "tools/__main__.py" not in stack:  # another thread's (`python -m tools run`)
                continue
            serving += n
            if names[-1].startswith("EpollIOManager.get_events"):
                idle += n
                continue
            own[names[-1]] += n
            below = next((i + 1 for i, name in enumerate(names) if name.startswith("unrolled_run")), 0)
            for name in {name.rpartition(":")[0] for name in names[below:]}:  # by function
                inclusive[name] += n
    if not serving:
        return None
    busy = serving - idle

    def share(counter: Counter[str]) -> list:
        return [[name, round(n / busy, 3)] for name, n in counter.most_common(top)] if busy else []
    return {"samples": serving, "idle": idle, "busy": busy, "own": share(own), "inclusive": share(inclusive)}


def stacks(raw: Path):
    """py-spy's raw samples: (the stack as written, its frames' names, how many samples)."""
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if count.isdigit():
            yield stack, [_name(frame) for frame in stack.split(";")], int(count)


def _name(frame: str) -> str:
    """`function (path/file.py:line)` -> `function file.py:line`."""
    function, _, where = frame.strip().partition(" (")
    return f"{function} {where.rstrip(')').rsplit('/', 1)[-1]}" if where else function
