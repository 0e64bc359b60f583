"""`groupkeeper events generate`: synthetic event logs that a reader of docs/events.md cannot
tell from real ones: every line to the schema, files in time order and named and rotated like
the coordinator's, groups consistent (rebalances pair up, generations step by one, member
counts add up, commits come from members owning their partitions in the current
generation), ownership as crc32(group) % 50 and partition % instances says, all shapes
present, and the same seed giving the same bytes."""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections import Counter, defaultdict
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from tools.cli import main
from tools.events_generate import GenerateError, Options, generate

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
NAME = re.compile(r"^events-(\d+)-(\d{8}T\d{6}\.\d{6}Z)\.jsonl(\.gz)?$")
COMMON = {"v": int, "ts": str, "instance": int, "type": str, "group": (str, type(None))}
STR_OR_NULL = (str, type(None))
FIELDS = {
    "member_joined": {"generation": int, "member": str, "instance_id": STR_OR_NULL, "client_id": str,
                      "host": str},
    "member_left": {"generation": int, "member": str, "reason": str, "client_id": str, "host": str},
    "member_expired": {"generation": int, "member": str, "reason": str, "client_id": str, "host": str},
    "rebalance_started": {"generation": int, "reason": str},
    "rebalance_completed": {"generation": int, "reason": str, "members_before": int, "members_after": int,
                            "duration_s": (int, float), "partitions_moved": int, "strategy": STR_OR_NULL},
    "offsets_committed": {"generation": int, "member": STR_OR_NULL, "offsets": list},
    "ownership_gained": {"partition": int, "epoch": int, "reason": str},
    "ownership_lost": {"partition": int, "epoch": int, "reason": str},
}
REASONS = {"member_left": {"left"}, "member_expired": {"session timeout", "rebalance timeout", "sync timeout"},
           "ownership_gained": {"new", "handover", "failover", "recovered"},
           "ownership_lost": {"handover", "shutdown", "session lost"}}

# one run every test below reads: long and wide enough for every shape to show up
OPTIONS = Options(groups=40, hours=2, seed=7, instances=3)


def ms(ts: str) -> int:
    return round(datetime.fromisoformat(ts).timestamp() * 1000)


def schema_problems(event: dict) -> list[str]:
    """What is wrong with one event against docs/events.md (exact fields, their types)."""
    kind = event.get("type")
    if kind not in FIELDS:
        return [f"unknown type {kind!r}"]
    wanted = COMMON | FIELDS[kind]
    problems = [f"fields {sorted(event)} are not {sorted(wanted)}"] if set(event) != set(wanted) else []
    problems += [f"{key}={event[key]!r} is not {types}" for key, types in wanted.items()
                 if key in event and (not isinstance(event[key], types) or isinstance(event[key], bool))]
    if event.get("v") != 1 or not TS.match(str(event.get("ts"))):
        problems.append("bad v or ts")
    if (event.get("group") is None) != kind.startswith("ownership_"):
        problems.append("group is null exactly for ownership events")
    if kind in REASONS and event.get("reason") not in REASONS[kind]:
        problems.append(f"reason {event.get('reason')!r}")
    for offset in event.get("offsets") or []:
        if (set(offset) != {"topic", "partition", "offset"} or not isinstance(offset["topic"], str)
                or not isinstance(offset["partition"], int) or not isinstance(offset["offset"], int)
                or offset["partition"] < 0 or offset["offset"] < 0):
            problems.append(f"offset {offset!r}")
    if kind == "offsets_committed" and not event["offsets"]:
        problems.append("a commit without offsets")
    return problems


def read_files(directory: Path) -> dict[str, list[dict]]:
    """Every event file's events, by file name, files in name order."""
    files = {}
    for path in sorted(directory.glob("events-*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as lines:
            files[path.name] = [json.loads(line) for line in lines]
    return files


def in_time_order(files: dict[str, list[dict]]) -> list[dict]:
    """All events by time; a stable sort keeps each instance's own order at equal times, and
    a partition is let go before it is taken (at the same millisecond, on another instance)."""
    return sorted((e for events in files.values() for e in events),
                  key=lambda e: (ms(e["ts"]), e["type"] != "ownership_lost"))


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> dict[str, list[dict]]:
    directory = tmp_path_factory.mktemp("events")
    generate(directory, OPTIONS)
    return read_files(directory)


def test_every_line_is_to_the_schema(log):
    problems = [(name, n, p) for name, events in log.items() for n, e in enumerate(events)
                for p in schema_problems(e)]
    assert problems == []
    assert sum(map(len, log.values())) > 100_000


def test_files_are_named_like_the_coordinators_and_in_time_order(log):
    for name, events in log.items():
        found = NAME.match(name)
        assert found, name
        assert {e["instance"] for e in events} == {int(found[1])}
        stamps = [ms(e["ts"]) for e in events]
        assert stamps == sorted(stamps), name
        opened = datetime.strptime(found[2], "%Y%m%dT%H%M%S.%fZ").replace(tzinfo=timezone.utc)
        assert abs(opened.timestamp() * 1000 - stamps[0]) < 1


def test_ownership_follows_the_group_partitions(log):
    """Each group's events come from the instance owning crc32(group) % 50 at that moment;
    a partition starts with partition % instances and, after one instance is shut down,
    goes on at another two epochs later (the release moves it on, then the acquisition)."""
    owner, epoch = {}, {}
    handed_over = 0
    for e in in_time_order(log):
        if e["type"] == "ownership_gained":
            assert e["partition"] not in owner
            if e["partition"] in epoch:
                assert e["epoch"] == epoch[e["partition"]] + 2
                handed_over += 1
            else:
                assert e["instance"] == e["partition"] % OPTIONS.instances
            owner[e["partition"]], epoch[e["partition"]] = e["instance"], e["epoch"]
        elif e["type"] == "ownership_lost":
            assert owner.pop(e["partition"]) == e["instance"] and e["epoch"] == epoch[e["partition"]]
        else:
            assert owner[zlib.crc32(e["group"].encode()) % 50] == e["instance"], e
    assert len(epoch) == 50 and handed_over > 0


class Replay:
    """One group, rebuilt from its events the way the coordinator keeps it."""

    def __init__(self):
        self.members: dict[str, dict] = {}
        self.generation = 0
        self.start: dict | None = None  # the latest rebalance_started of the rebalance under way
        self.before: int | None = 0  # members_before the next completion must carry (None: unknown)
        self.instance: int | None = None
        self.owners: dict[tuple[str, int], str] = {}  # who committed what this generation
        self.offsets: dict[tuple[str, int], int] = {}
        self.moved = 0  # the most partitions one rebalance moved

    def apply(self, e: dict) -> None:
        kind = e["type"]
        if e["instance"] != self.instance:
            if self.instance is not None:  # taken over: the next start counts what it finds
                self.before = None
            self.instance = e["instance"]
        in_force = {self.generation} if self.start is None else {self.start["generation"], self.start["generation"] + 1}
        if kind == "member_joined":
            assert e["member"] not in self.members and e["generation"] in in_force
            assert e["member"].startswith(e["client_id"] + "-")
            self.members[e["member"]] = e
        elif kind in ("member_left", "member_expired"):
            joined = self.members.pop(e["member"])
            assert (joined["client_id"], joined["host"]) == (e["client_id"], e["host"])
            assert e["generation"] in in_force
        elif kind == "rebalance_started":
            assert e["generation"] in in_force
            if self.before is None:
                self.before = len(self.members) if e["generation"] else 0
            self.start = e
        elif kind == "rebalance_completed":
            assert self.start is not None, "completed without a start"
            assert e["generation"] == self.start["generation"] + 1
            assert e["reason"] == self.start["reason"]
            assert e["members_after"] == len(self.members)
            assert e["members_before"] == self.before
            assert round(e["duration_s"] * 1000) == ms(e["ts"]) - ms(self.start["ts"])
            assert (e["strategy"] is None) == (not self.members)
            self.moved = max(self.moved, e["partitions_moved"])
            self.generation, self.start = e["generation"], None
            self.before = len(self.members) if self.members else None
            self.owners = {}
        else:  # offsets_committed
            if e["generation"] == -1:
                assert e["member"] is None and not self.members
            else:
                assert self.start is None and e["generation"] == self.generation
                assert e["member"] in self.members
            for o in e["offsets"]:
                tp = (o["topic"], o["partition"])
                assert self.owners.setdefault(tp, e["member"]) == e["member"], "two owners in one generation"
                assert o["offset"] >= self.offsets.get(tp, 0), "offsets went back"
                self.offsets[tp] = o["offset"]


def test_groups_are_consistent(log):
    groups: dict[str, Replay] = defaultdict(Replay)
    for e in in_time_order(log):
        if e["group"] is not None:
            try:
                groups[e["group"]].apply(e)
            except (AssertionError, KeyError) as exc:
                raise AssertionError(f"{e}: {exc!r}") from None
    assert len(groups) == OPTIONS.groups
    sizes = Counter()  # partitions per topic (test_commits_only_name_partitions_that_exist)
    for group in groups.values():
        for topic, partition in group.offsets:
            sizes[topic] = max(sizes[topic], partition + 1)
    for name, group in groups.items():
        assert group.moved <= sum(sizes[topic] for topic in {t for t, _ in group.offsets}), name


def test_commits_only_name_partitions_that_exist(log):
    """Partitions of a topic, over the whole log, are 0..n-1 with none missing."""
    seen = defaultdict(set)
    for events in log.values():
        for e in events:
            for o in e.get("offsets") or []:
                seen[o["topic"]].add(o["partition"])
    assert seen and all(partitions == set(range(len(partitions))) for partitions in seen.values())


def test_every_shape_shows_up(log):
    events = in_time_order(log)
    by_group = defaultdict(list)
    for e in events:
        if e["group"] is not None:
            by_group[e["group"]].append(e)
    reasons = Counter(e["reason"] for e in events if e["type"] == "rebalance_started")
    expired = Counter(e["reason"] for e in events if e["type"] == "member_expired")
    assert expired["session timeout"] and expired["rebalance timeout"]
    assert reasons["member left"] and reasons["member rejoined"] and reasons["leader rejoined"]
    assert any(r.startswith("partitions of ") for r in reasons)
    assert any(r.startswith("member rejoined: need to revoke") for r in reasons)  # cooperative
    assert any(e["type"] == "member_joined" and e["instance_id"] for e in events)  # static
    assert any(e["type"] == "offsets_committed" and e["generation"] == -1 for e in events)  # standalone
    assert len({e["client_id"] for e in events if "client_id" in e}) > 20
    assert len({e["host"] for e in events if "host" in e}) > 50
    strategies = {e["strategy"] for e in events if e["type"] == "rebalance_completed"}
    assert {"range", "cooperative-sticky", "roundrobin", "sticky"} <= strategies

    def flaps(group: list[dict]) -> int:
        """Session expiries followed by a join from the same client and host."""
        expiries = [e for e in group if e["type"] == "member_expired" and e["reason"] == "session timeout"]
        return sum(any(j["type"] == "member_joined" and (j["client_id"], j["host"]) == (x["client_id"], x["host"])
                       and j["ts"] > x["ts"] for j in group) for x in expiries)

    def storms(group: list[dict]) -> int:
        """Rebalances completed with four more in the ten minutes before (the analysis' storm)."""
        ends = [ms(e["ts"]) for e in group if e["type"] == "rebalance_completed"]
        return sum(1 for n, end in enumerate(ends) if n >= 4 and end - ends[n - 4] <= 600_000)

    def deploys(group: list[dict]) -> bool:
        """Every member of some generation replaced, each leaving cleanly."""
        first = {e["member"] for e in group if e["type"] == "member_joined"}
        left = {e["member"] for e in group if e["type"] == "member_left"}
        return bool(first) and len(left & first) >= 2 and len(left) >= len(first) // 2

    assert sum(flaps(g) >= 3 for g in by_group.values()) >= 2
    assert sum(storms(g) > 0 for g in by_group.values()) >= 2
    assert sum(deploys(g) for g in by_group.values()) >= 2
    restarts = 0
    for group in by_group.values():
        kinds = [e["type"] for e in group if e["type"].startswith("rebalance_")]
        restarts += sum(a == b == "rebalance_started" for a, b in zip(kinds, kinds[1:]))
    assert restarts > 0
    durations = sorted(e["duration_s"] for e in events if e["type"] == "rebalance_completed")
    assert durations[len(durations) // 2] < 1 and durations[-1] > 30


@pytest.mark.parametrize("compress", [False, True])
def test_the_same_seed_gives_the_same_bytes(tmp_path, compress):
    options = Options(groups=20, hours=0.5, seed=3, file_bytes=200_000, compress=compress)
    first, second = generate(tmp_path / "a", options), generate(tmp_path / "b", options)
    other = generate(tmp_path / "c", replace(options, seed=4))
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    assert all((tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes() for n in names)
    assert (first.events, first.files, first.bytes) == (second.events, second.files, second.bytes)
    assert other.events != first.events
    assert any(n.endswith(".gz") for n in names) == compress


def test_files_rotate_by_size_and_closed_ones_are_gzipped(tmp_path):
    options = Options(groups=10, hours=0.5, seed=5, instances=2, file_bytes=100_000)
    generate(tmp_path / "plain", options)
    summary = generate(tmp_path / "packed", replace(options, compress=True))
    plain, packed = read_files(tmp_path / "plain"), read_files(tmp_path / "packed")
    assert all(p.stat().st_size <= 100_000 for p in (tmp_path / "plain").iterdir())
    assert [n + ".gz" for n in plain] != list(packed)  # the last file of each instance stays plain
    assert sorted(n.removesuffix(".gz") for n in packed) == sorted(plain)
    assert {n for n in packed if not n.endswith(".gz")} == {max(n for n in plain if n.startswith(f"events-{i}-"))
                                                            for i in range(2)}
    assert [packed.get(n) or packed[n + ".gz"] for n in plain] == list(plain.values())
    assert summary.files == len(packed) and summary.bytes == sum(p.stat().st_size for p in (tmp_path / "packed").iterdir())


def test_rotation_by_age_and_a_given_start(tmp_path):
    start = datetime(2026, 11, 23, 7, 54, 5, 441000, tzinfo=timezone.utc)
    generate(tmp_path, Options(groups=5, hours=1, instances=1, start=start, file_seconds=600))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[0] == "events-0-20261123T075405.441000Z.jsonl" and len(names) == 6
    first = json.loads((tmp_path / names[0]).read_text().splitlines()[0])
    assert first["ts"] == "2026-11-23T07:54:05.441Z" and first["type"] == "ownership_gained"


def test_cli_prints_one_summary_line(tmp_path):
    result = CliRunner().invoke(main, ["events", "generate", "--groups", "5", "--hours", "0.2",
                                       "--out", str(tmp_path / "out"), "--seed", "9", "--instances", "2",
                                       "--start", "2026-11-23T07:54:05.441Z"])
    assert result.exit_code == 0, result.output
    assert re.fullmatch(r"[\d,]+ events, \d+ files, [\d,]+ bytes in [\d.]+ s \([\d,]+ events/s\) under \S+\n",
                        result.stdout)
    files = read_files(tmp_path / "out")
    assert sorted(files)[0] == "events-0-20261123T075405.441000Z.jsonl"
    events = sum(map(len, files.values()))
    assert result.stdout.startswith(f"{events:,} events, ")


@pytest.mark.parametrize("args, message", [
    (["--groups", "-1"], "--groups must be 1 to 1,000,000, not -1"),
    (["--hours", "0"], "--hours must be more than 0"),
    (["--instances", "0"], "--instances must be 1 to 50, not 0"),
    (["--file-bytes", "0"], "--file-bytes must be at least 1"),
    (["--start", "yesterday"], "--start: not an ISO 8601 time: 'yesterday'"),
    (["--start", "9999-12-31T00:00:00Z"], "--start must be in the years 1970 to 9000"),
])
def test_cli_refuses_bad_arguments_in_one_line(tmp_path, args, message):
    base = {"--groups": "2", "--hours": "0.1", "--out": str(tmp_path / "out")}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    result = CliRunner().invoke(main, ["events", "generate", *[x for kv in base.items() for x in kv]])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: {message}") and result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_cli_refuses_a_directory_it_cannot_use(tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    blocked = tmp_path / "file"
    blocked.write_text("")
    runner = CliRunner()
    for out, message in ((busy, f"{busy} is not empty (--force replaces the event files in it)"),
                         (blocked / "sub", f"cannot write to {blocked / 'sub'}: ")):
        result = runner.invoke(main, ["events", "generate", "--groups", "2", "--hours", "0.1", "--out", str(out)])
        assert result.exit_code == 1 and result.stderr.startswith(f"Error: {message}"), result.stderr
        assert result.stderr.count("\n") == 1
    args = ["events", "generate", "--groups", "2", "--hours", "0.1", "--force"]
    assert runner.invoke(main, [*args, "--out", str(busy)]).exit_code == 0
    assert runner.invoke(main, [*args, "--out", str(busy), "--seed", "1", "--instances", "1"]).exit_code == 0
    assert runner.invoke(main, [*args, "--out", str(tmp_path / "fresh"), "--seed", "1", "--instances", "1"]).exit_code == 0
    assert read_files(busy) == read_files(tmp_path / "fresh")  # the first run's files are gone
    assert (busy / "notes.txt").read_text() == "mine"  # and only event files were touched


def test_options_are_checked_before_anything_is_written(tmp_path):
    with pytest.raises(GenerateError):
        generate(tmp_path / "out", Options(groups=0, hours=1))
    assert not (tmp_path / "out").exists()
