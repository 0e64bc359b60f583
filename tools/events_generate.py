"""Synthetic event logs, to the letter of docs/events.md, for tests and scale runs of
`groupkeeper analyze` (real logs are few, small and private).

Each group is a small discrete-event simulation that follows the coordinator's own rules
(coordinator/groups/group.py and manager.py), so that its events are consistent the way real
ones are: a member event comes before the rebalance it starts, a member joining while the
group waits for joins starts nothing, one joining while it completes restarts it, a member
that stops heartbeating expires after its session timeout and one that heartbeats but does
not rejoin is removed at the rebalance timeout, `members_before` is what the previous
generation had (or what the instance found when it took the group over), `partitions_moved`
comes from real assignments (range, roundrobin, sticky, cooperative-sticky with its second
rebalance), and commits carry the generation and the member's own partitions, with offsets
that grow with a daily traffic curve shared by every group that reads a topic.

Shapes, drawn per group: steady (rare rebalances), flapping (a member that keeps expiring
and coming back), storms (minutes of rebalance after rebalance), deploys (every member
replaced one by one) and standalone consumers (commits outside any generation).

Deterministic: every choice comes from random.Random seeded with the seed (one stream for
the fleet, one per group) and time is simulated from a start taken from the seed or given,
so the same options give byte-identical files. Lines are rendered with f-strings (every
string in them is JSON-quoted once, when it is made), a minute of simulated time at a time:
the groups advance to the minute's end, its lines are sorted by time (stably, so a group's
own order stays) and appended to their instance's file.

Files are named and rotated like the coordinator's: `events-<instance>-<opened>.jsonl`,
closed at `file_bytes` (no file is larger, unless one line is) or `file_seconds` of simulated
time; with `compress` a closed file is gzipped and the last one of each instance stays plain,
as a running coordinator leaves them. Compression is off by default because it costs about
as much as generating; it runs in a second process (a thread would fight the generation for
the GIL) and writes no time into the gzip header, so packed files are reproducible too.
"""

from __future__ import annotations

import gzip
import heapq
import json
import math
import os
import random
import shutil
import time
import uuid
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from operator import itemgetter
from pathlib import Path

from coordinator.assignors import BUILT_IN, MemberSubscription
from coordinator.events import SCHEMA_VERSION, timestamp_ms
from coordinator.cluster.placement import DEFAULT_GROUP_PARTITIONS, partition_for

MAX_GROUPS = 1_000_000
MAX_HOURS = 24 * 366
MAX_INSTANCES = DEFAULT_GROUP_PARTITIONS  # more would own no group-partition

WINDOW_MS = 60_000  # simulated time rendered, sorted and written at once
INITIAL_REBALANCE_DELAY_MS = 3_000  # group.initial.rebalance.delay.ms, as GroupConfig
GZIP_LEVEL = 1  # 3x as fast as 6 for 15% more bytes: keeps pace with the generation
TRAFFIC_SWING = 0.6  # message rates run from 40% to 160% of their mean over a day
DAY_S = 86_400

SHAPES = ("steady", "flapping", "storm", "deploy", "standalone")
SHAPE_WEIGHTS = (50, 15, 10, 20, 5)
STRATEGIES = ("range", "cooperative-sticky", "roundrobin", "sticky")
STRATEGY_WEIGHTS = (45, 30, 15, 10)
COMMIT_INTERVALS_MS = (1_000, 5_000, 10_000, 30_000, 60_000)  # 5 s: auto.commit.interval.ms
COMMIT_INTERVAL_WEIGHTS = (5, 60, 15, 10, 10)
SESSION_TIMEOUTS_MS = (10_000, 30_000, 45_000)
REBALANCE_TIMEOUTS_MS = (60_000, 120_000, 300_000)  # max.poll.interval.ms
TOPIC_PARTITIONS = (1, 3, 6, 6, 8, 12, 12, 16, 24, 32, 64)
TEAMS = ("orders", "payments", "billing", "search", "inventory", "shipping", "fraud", "ads", "users",
         "catalog", "notifications", "ledger", "pricing", "reco", "metrics")
ROLES = ("indexer", "sink", "enricher", "aggregator", "router", "archiver", "replicator", "scorer",
         "notifier", "loader", "projector", "auditor")
RECORDS = ("events", "updates", "commands", "changes", "snapshots", "clicks")
REVOKE_REASON = "member rejoined: need to revoke partitions and re-join"  # cooperative's 2nd round

STABLE, PREPARING, COMPLETING, EMPTY = range(4)


class GenerateError(Exception):
    """Options or an output directory that cannot make a log: one line for the CLI."""


@dataclass(frozen=True)
class Options:
    groups: int
    hours: float
    seed: int = 0
    instances: int = 3
    start: datetime | None = None  # None: a moment in 2026 drawn from the seed
    file_bytes: int = 64 << 20
    file_seconds: float = 3600.0
    compress: bool = False

    def check(self) -> None:
        if not 1 <= self.groups <= MAX_GROUPS:
            raise GenerateError(f"--groups must be 1 to {MAX_GROUPS:,}, not {self.groups}")
        if not 0 < self.hours <= MAX_HOURS:
            raise GenerateError(f"--hours must be more than 0 and at most {MAX_HOURS}, not {self.hours:g}")
        if not 1 <= self.instances <= MAX_INSTANCES:
            raise GenerateError(f"--instances must be 1 to {MAX_INSTANCES}, not {self.instances}")
        if self.file_bytes < 1:
            raise GenerateError(f"--file-bytes must be at least 1, not {self.file_bytes}")
        if not self.file_seconds > 0:
            raise GenerateError(f"--file-seconds must be more than 0, not {self.file_seconds:g}")
        if self.start is not None and not 1970 <= self.start.year <= 9000:  # datetime ends at 9999
            raise GenerateError(f"--start must be in the years 1970 to 9000, not {self.start.isoformat()}")


@dataclass(frozen=True)
class Summary:
    events: int
    files: int
    bytes: int
    seconds: float

    def line(self, directory: Path) -> str:
        rate = self.events / self.seconds if self.seconds else 0.0
        return (f"{self.events:,} events, {self.files:,} files, {self.bytes:,} bytes in {self.seconds:.1f} s "
                f"({rate:,.0f} events/s) under {directory}")


def generate(directory: Path, options: Options, force: bool = False) -> Summary:
    """Write the log under `directory` (created if missing). A directory holding anything
    is refused unless `force`, which replaces the event files in it (a log mixed from two
    runs would be inconsistent). OSError means the directory is not writable."""
    options.check()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        if not force:
            raise GenerateError(f"{directory} is not empty (--force replaces the event files in it)")
        for old in [*directory.glob("events-*.jsonl"), *directory.glob("events-*.jsonl.gz")]:
            old.unlink()
    began = time.perf_counter()
    fleet = _Fleet(options)
    with ProcessPoolExecutor(1) as packer:
        files = [_Files(directory, n, options, packer) for n in range(options.instances)]
        events = fleet.run(files)
        for f in files:
            f.close(last=True)
        for f in files:
            for done in f.packing:
                done.result()  # raises what compression raised
    paths = [p for f in files for p in f.paths]
    return Summary(events, len(paths), sum(p.stat().st_size for p in paths), time.perf_counter() - began)


def _q(value: str | None) -> str:
    return json.dumps(value)


class _Fleet:
    """What groups share: the clock, topics and their offsets, which instance owns which
    group-partition (one instance is restarted midway and the others take its partitions
    over, when there are others), and the groups themselves."""

    def __init__(self, options: Options):
        rng = random.Random(options.seed)
        self.options = options
        if options.start is None:
            start = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=rng.randrange(365 * DAY_S))
        else:
            start = options.start
        self.start_ms = round(start.timestamp() * 1000)
        self.end_ms = self.start_ms + round(options.hours * 3_600_000)
        self.phase = rng.uniform(0, 2 * math.pi)
        self.partinfo: dict[tuple[str, int], tuple[str, float, float, int]] = {}
        self.topics: dict[str, int] = {}  # partitions at the start
        self.growth: dict[str, tuple[int, int]] = {}  # topic -> (when, partitions from then on)
        for n in range(max(3, options.groups // 3)):
            self._topic(rng, f"{rng.choice(TEAMS)}.{rng.choice(RECORDS)}.{n}")
        self.ownership = self._ownership(rng)
        self.groups = [_Group(self, n, random.Random(f"{options.seed}/{n}")) for n in range(options.groups)]

    def _topic(self, rng: random.Random, name: str) -> None:
        partitions = rng.choice(TOPIC_PARTITIONS)
        mean_rate = 0.0 if rng.random() < 0.1 else rng.lognormvariate(math.log(20), 1.5)  # msg/s
        self.topics[name] = partitions
        for p in range(partitions):
            self._partition(rng, name, p, mean_rate, 0.0, rng.randrange(10**6, 10**10))
        if rng.random() < 0.05:
            when = self.start_ms + rng.randrange(max(1, self.end_ms - self.start_ms))
            self.growth[name] = (when, partitions * 2)
            created = self.traffic(when - 3_000)  # before any lagging group can look
            for p in range(partitions, partitions * 2):
                self._partition(rng, name, p, mean_rate, created, 0)

    def _partition(self, rng, topic: str, p: int, mean_rate: float, created: float, base: int) -> None:
        prefix = f'{{"topic":{_q(topic)},"partition":{p},"offset":'
        self.partinfo[topic, p] = (prefix, mean_rate * rng.lognormvariate(0, 0.5), created, base)

    def traffic(self, ms: int) -> float:
        """Seconds since the start weighted by the day's traffic curve: offsets are a rate
        times this, so they grow faster by day and slower by night but never fall back."""
        s = (ms - self.start_ms) / 1000
        swing = TRAFFIC_SWING * DAY_S / (2 * math.pi)
        return s - swing * (math.sin(2 * math.pi * s / DAY_S + self.phase) - math.sin(self.phase))

    def _ownership(self, rng: random.Random) -> list[tuple[int, int, str]]:
        """The ownership events; sets `owner` and `handover` (partition -> (when, new owner))."""
        k = self.options.instances
        epochs = [rng.randint(1, 40) for _ in range(DEFAULT_GROUP_PARTITIONS)]
        self.owner = [p % k for p in range(DEFAULT_GROUP_PARTITIONS)]
        self.handover: dict[int, tuple[int, int]] = {}
        events = [(self.start_ms, owner, f'"type":"ownership_gained","group":null,"partition":{p},'
                                         f'"epoch":{epochs[p]},"reason":"handover"')
                  for p, owner in enumerate(self.owner)]
        if k > 1:
            restarted = rng.randrange(k)
            others = [n for n in range(k) if n != restarted]
            when = self.start_ms + round((self.end_ms - self.start_ms) * rng.uniform(0.4, 0.6))
            for p in range(DEFAULT_GROUP_PARTITIONS):
                if self.owner[p] == restarted:
                    self.handover[p] = (when, others[p % len(others)])
                    events.append((when, restarted, f'"type":"ownership_lost","group":null,"partition":{p},'
                                                    f'"epoch":{epochs[p]},"reason":"shutdown"'))
                    # the release moves the epoch on once, the acquisition once more
                    events.append((when, others[p % len(others)], f'"type":"ownership_gained","group":null,'
                                                                  f'"partition":{p},"epoch":{epochs[p] + 2},'
                                                                  '"reason":"handover"'))
        return [(ts, n, f'{{"v":{SCHEMA_VERSION},"ts":"{timestamp_ms(ts)}","instance":{n},{body}}}\n')
                for ts, n, body in sorted(events, key=itemgetter(0))]

    def run(self, files: list[_Files]) -> int:
        """Advance everything a window at a time; each window's lines go out in time order."""
        written = 0
        pending = self.ownership
        window_end = self.start_ms
        while window_end < self.end_ms:
            window_end = min(window_end + WINDOW_MS, self.end_ms)
            batch = [e for e in pending if e[0] < window_end]  # first: ahead of groups at the same ms
            pending = pending[len(batch):]
            for group in self.groups:
                group.advance(window_end, batch)
            batch.sort(key=itemgetter(0))
            for f in files:
                f.write([e for e in batch if e[1] == f.instance] if len(files) > 1 else batch)
            written += len(batch)
        return written


class _Member:
    __slots__ = ("id", "instance_id", "client_id", "host", "flaps", "returns", "stalled", "offsets",
                 "q", "joined_fields", "who")

    def __init__(self, member_id: str, instance_id: str | None, client_id: str, host: str, flaps: bool,
                 returns: bool):
        self.id, self.instance_id, self.client_id, self.host = member_id, instance_id, client_id, host
        self.flaps = flaps  # expires again and again (a flapping group's member)
        self.returns = returns  # comes back as a new member after a timeout removes it
        self.stalled = False  # will not rejoin: dead (expires) or stuck (rebalance timeout)
        self.offsets: list[tuple[str, float, float, int]] = []  # Fleet.partinfo of its partitions
        self.q = _q(member_id)
        self.who = f'"client_id":{_q(client_id)},"host":{_q(host)}'
        self.joined_fields = f'"member":{self.q},"instance_id":{_q(instance_id)},{self.who}'


class _Group:
    """One group's simulation: a heap of timed actions, run in time order by `advance`."""

    def __init__(self, fleet: _Fleet, index: int, rng: random.Random):
        self.fleet, self.rng = fleet, rng
        team, role = rng.choice(TEAMS), rng.choice(ROLES)
        self.name = f"{team}-{role}-{index}"
        self.q = _q(self.name)
        partition = partition_for(self.name, DEFAULT_GROUP_PARTITIONS)
        self.instance = fleet.owner[partition]
        self.handover_ms, self.next_instance = fleet.handover.get(partition, (fleet.end_ms, self.instance))
        self.shape = rng.choices(SHAPES, SHAPE_WEIGHTS)[0]
        self.static = self.shape in ("steady", "flapping", "storm") and rng.random() < 0.2
        self.strategy = rng.choices(STRATEGIES, STRATEGY_WEIGHTS)[0]
        self.commit_ms = rng.choices(COMMIT_INTERVALS_MS, COMMIT_INTERVAL_WEIGHTS)[0]
        self.session_ms = rng.choice(SESSION_TIMEOUTS_MS)
        self.rebalance_ms = rng.choice(REBALANCE_TIMEOUTS_MS)
        self.lag_ms = rng.randrange(3_000)  # how far behind the log end its commits run
        self.subnet = f"10.{rng.randrange(256)}"
        self.app = f"{team}-{role}"
        self.clients = rng.choice(([f"consumer-{self.name}-1"], ["rdkafka"], [self.app, f"{self.app}-canary"],
                                   [f"consumer-{self.name}-1", f"consumer-{self.name}-2", "rdkafka"]))
        self.hosts: list[str] = []
        self.statics = 0  # static instance ids handed out
        self.topics = {t: fleet.topics[t] for t in rng.sample(sorted(fleet.topics), rng.choice((1, 1, 1, 2, 3)))}
        self.members: dict[str, _Member] = {}
        self.gen, self.state = 0, EMPTY
        self.started = self.normal_done = 0
        self.initial = False  # the rebalance under way started from an empty group
        self.reason = ""
        self.token = 0  # bumped to cancel the scheduled step of a rebalance
        self.prev: tuple[dict, int] | None = None  # owners and members of the last generation
        self.owners: dict[tuple[str, int], str] = {}
        self.storm_until = 0
        self.out: list = []
        self.actions: list = []
        self.seq = 0
        begin = fleet.start_ms + 1 + (rng.randrange(300_000) if rng.random() < 0.8
                                      else rng.randrange(max(1, (fleet.end_ms - fleet.start_ms) // 2)))
        if self.shape == "standalone":
            self._at(begin, self._standalone_commit)
            return
        t = begin
        for _ in range(rng.choice((1, 2, 3, 3, 4, 4, 6, 8, 12))):
            self._at(t, self._join, self._identity(flaps=False))
            t += rng.randrange(50, 1_500)
        for topic in self.topics:
            if topic in fleet.growth:
                self._at(fleet.growth[topic][0], self._grow, topic)
        if self.handover_ms < fleet.end_ms:
            self._at(self.handover_ms, self._takeover)
        self.disrupt_mean_ms = rng.uniform(4, 24) * 3_600_000
        self._at(t + self._gap(self.disrupt_mean_ms), self._disrupt)
        if self.shape == "flapping":
            self.flap_mean_ms = rng.uniform(3, 20) * 60_000
            self._at(t + rng.randrange(5_000, 30_000), self._join, self._identity(flaps=True))
        elif self.shape == "storm":
            for _ in range(rng.randint(1, 3)):
                self._at(t + rng.randrange(max(1, fleet.end_ms - t)), self._storm, rng.randrange(120_000, 600_000))
        elif self.shape == "deploy":
            self._at(t + rng.randrange(1_800_000, 4 * 3_600_000), self._deploy)

    # -- plumbing ---------------------------------------------------------------------------

    def _at(self, ms: int, action, arg=None) -> None:
        self.seq += 1
        heapq.heappush(self.actions, (ms, self.seq, action, arg))

    def _jitter(self) -> int:
        """-50..50 ms, for commit intervals (random() is several times cheaper than randrange)."""
        return int(self.rng.random() * 101) - 50

    def _gap(self, mean_ms: float) -> int:
        return 1 + int(self.rng.expovariate(1 / mean_ms))

    def advance(self, until_ms: int, out: list) -> None:
        """Run the actions before `until_ms`, appending (ms, instance, line) to `out`."""
        self.out = out
        actions = self.actions
        while actions and actions[0][0] < until_ms:
            ms, _, action, arg = heapq.heappop(actions)
            action(ms, arg)

    def _emit(self, ms: int, type_: str, fields: str) -> None:
        instance = self.instance if ms < self.handover_ms else self.next_instance
        self.out.append((ms, instance, f'{{"v":{SCHEMA_VERSION},"ts":"{timestamp_ms(ms)}","instance":{instance},'
                                        f'"type":"{type_}","group":{self.q},{fields}}}\n'))

    def _identity(self, flaps: bool, like: _Member | None = None) -> tuple:
        """(client id, host, instance id, flaps): `like`'s, or a new process's."""
        if like is not None:
            return like.client_id, like.host, like.instance_id, flaps
        rng = self.rng
        if self.hosts and rng.random() < 0.3:  # several consumers in one process or pod
            host = rng.choice(self.hosts)
        else:
            host = f"{self.subnet}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
            self.hosts.append(host)
        instance_id = None
        if self.static:
            instance_id = f"{self.app}-{self.statics}"
            self.statics += 1
        return rng.choice(self.clients), host, instance_id, flaps

    def _tps(self) -> list[tuple[str, int]]:
        return [(topic, p) for topic in sorted(self.topics) for p in range(self.topics[topic])]

    def _held(self) -> dict[tuple[str, int], str]:
        """Who owns what now: the last assignment, less members gone since."""
        return {tp: owner for tp, owner in self.owners.items() if owner in self.members}

    # -- membership (Group.join, leave, tick) -----------------------------------------------

    def _join(self, ms: int, identity: tuple) -> _Member:
        client_id, host, instance_id, flaps = identity
        member_id = f"{client_id}-{uuid.UUID(int=self.rng.getrandbits(128), version=4)}"
        m = _Member(member_id, instance_id, client_id, host, flaps, returns=flaps)
        self.members[member_id] = m
        self._emit(ms, "member_joined", f'"generation":{self.gen},{m.joined_fields}')
        self._at(ms + 1 + self.rng.randrange(self.commit_ms), self._commit, m)
        if flaps:
            self._at(ms + self._gap(self.flap_mean_ms), self._flap, m)
        if self.state == PREPARING:
            if self.initial and ms < self.normal_done:  # a group starting up: one rebalance
                self.normal_done = min(ms + INITIAL_REBALANCE_DELAY_MS, self.started + self.rebalance_ms)
                self._schedule_join_done(ms)
        elif client_id.startswith("consumer-"):  # the Java client's JoinGroup reason
            self._start(ms, f"member joined: need to re-join with the given member-id: {member_id}")
        else:
            self._start(ms, "member joined")
        return m

    def _remove(self, ms: int, m: _Member, reason: str) -> None:
        del self.members[m.id]
        type_ = "member_left" if reason == "left" else "member_expired"
        self._emit(ms, type_, f'"generation":{self.gen},"member":{m.q},"reason":"{reason}",{m.who}')
        if m.returns:
            self._at(ms + self.rng.randrange(2_000, 60_000), self._join, self._identity(m.flaps, like=m))

    def _after_removal(self, ms: int, reason: str) -> None:
        if self.state in (STABLE, COMPLETING):
            self._start(ms, reason)
        elif self.state == PREPARING:
            self._schedule_join_done(ms)

    def _leave(self, ms: int, m: _Member) -> None:
        if self.members.get(m.id) is m:
            self._remove(ms, m, "left")
            self._after_removal(ms, "member left")

    def _expire(self, ms: int, m: _Member) -> None:
        if self.members.get(m.id) is m:
            self._remove(ms, m, "session timeout")
            self._after_removal(ms, "member expired")

    def _stall(self, ms: int, m: _Member, dead: bool = True) -> None:
        """`m` stops: dead, its session expires; stuck in processing (heartbeats go on), it
        misses rebalances and, after max.poll.interval, the client leaves for it."""
        m.stalled = True
        m.returns = True
        self._at(ms + (self.session_ms if dead else self.rebalance_ms), self._expire if dead else self._leave, m)
        if self.state == PREPARING:
            self._schedule_join_done(ms)

    def _rejoin(self, ms: int, reason: str) -> None:
        """A known member rejoins: the leader always rebalances a stable group; another
        member only with changed metadata, which also restarts a completing rebalance."""
        if self.state == STABLE or (self.state == COMPLETING and reason != "leader rejoined"):
            self._start(ms, reason)

    def _grow(self, ms: int, topic: str) -> None:
        self.topics[topic] = self.fleet.growth[topic][1]
        if self.state in (STABLE, COMPLETING):
            self._start(ms, f"partitions of {topic} changed")

    # -- rebalances ------------------------------------------------------------------------

    def _start(self, ms: int, reason: str) -> None:
        self.initial = self.state == EMPTY
        if self.prev is None:  # new here (a new group, or just taken over): what it finds
            self.prev = ({}, 0) if self.gen == 0 else (self._held(), len(self.members))
        self.state, self.started, self.reason = PREPARING, ms, reason
        self.normal_done = ms + (INITIAL_REBALANCE_DELAY_MS if self.initial else self._join_phase_ms())
        self._emit(ms, "rebalance_started", f'"generation":{self.gen},"reason":{_q(reason)}')
        live = [m for m in self.members.values() if not m.stalled]
        if len(live) > 1 and self.rng.random() < 0.015:
            self._stall(ms, self.rng.choice(live), dead=False)
        self._schedule_join_done(ms)

    def _join_phase_ms(self) -> int:
        """Until every member has rejoined: mostly well under a second, sometimes seconds,
        rarely most of max.poll.interval (a member busy with a long batch)."""
        rng = self.rng
        u = rng.random()
        if u < 0.9:
            return min(999, 1 + int(rng.lognormvariate(math.log(150), 0.9)))
        if u < 0.98:
            return rng.randrange(1_000, 8_000)
        return rng.randrange(self.rebalance_ms // 2, self.rebalance_ms)

    def _schedule_join_done(self, ms: int) -> None:
        self.token += 1
        if any(m.stalled for m in self.members.values()):
            done = self.started + self.rebalance_ms
        else:
            done = max(ms, self.normal_done)
        self._at(done, self._join_done, self.token)

    def _join_done(self, ms: int, token: int) -> None:
        if token != self.token:
            return
        for m in [m for m in self.members.values() if m.stalled]:
            self._remove(ms, m, "rebalance timeout")
        self.gen += 1
        if not self.members:
            self._complete(ms, self.token)
            return
        self.state = COMPLETING
        self.token += 1
        rng = self.rng
        sync_ms = rng.randrange(2, 40) if rng.random() < 0.95 else rng.randrange(40, 800)
        self._at(ms + sync_ms, self._complete, self.token)
        if ms < self.storm_until and rng.random() < 0.15:  # a new member lands mid-sync: a restart
            self._at(ms + rng.randrange(1, sync_ms), self._storm_member)

    def _complete(self, ms: int, token: int) -> None:
        if token != self.token:
            return
        before, members_before = self.prev
        owners = self._assign()
        if any(owners.get(tp) != owner for tp, owner in self._held().items()):
            if self.strategy == "cooperative-sticky":  # the holders revoke, then rejoin
                self._at(ms + self.rng.randrange(20, 300), self._rejoin, REVOKE_REASON)
        moved = sum(1 for tp, owner in before.items() if owners.get(tp) != owner)
        strategy = _q(self.strategy) if self.members else "null"
        self._emit(ms, "rebalance_completed",
                   f'"generation":{self.gen},"reason":{_q(self.reason)},"members_before":{members_before},'
                   f'"members_after":{len(self.members)},"duration_s":{(ms - self.started) / 1000},'
                   f'"partitions_moved":{moved},"strategy":{strategy}')
        self.owners = owners
        self.prev = (owners, len(self.members)) if self.members else None
        self.state = STABLE if self.members else EMPTY
        for m in self.members.values():
            m.offsets = []
        partinfo = self.fleet.partinfo
        for tp in sorted(owners):
            self.members[owners[tp]].offsets.append(partinfo[tp])

    def _assign(self) -> dict[tuple[str, int], str]:
        """The new generation's owners: the coordinator's own strategy, given what members hold
        (cooperative-sticky leaves out what another member must revoke first)."""
        owned: dict[str, dict[str, list[int]]] = {}
        for (topic, p), owner in self._held().items():
            owned.setdefault(owner, {}).setdefault(topic, []).append(p)
        topics = tuple(sorted(self.topics))
        members = [MemberSubscription(member_id, topics, m.instance_id, owned.get(member_id, {}))
                   for member_id, m in self.members.items()]
        planned = BUILT_IN[self.strategy].assign(members, dict(self.topics)).partitions
        return {(topic, p): member_id for member_id, assigned in planned.items()
                for topic, ps in assigned.items() for p in ps}

    def _takeover(self, ms: int, _) -> None:
        """Another instance serves the group from now on: it knows no previous generation,
        and a rebalance under way starts over there."""
        self.prev = None
        if self.state in (PREPARING, COMPLETING):
            self._start(ms, self.reason)

    # -- what members do -------------------------------------------------------------------

    def _commit(self, ms: int, m: _Member) -> None:
        if m.stalled or self.members.get(m.id) is not m:
            return
        self._at(ms + self.commit_ms + self._jitter(), self._commit, m)
        if self.state != STABLE or not m.offsets:
            return
        f = self.fleet.traffic(ms - self.lag_ms)
        offsets = ",".join([f"{prefix}{base + int(rate * (f - created))}}}"
                            for prefix, rate, created, base in m.offsets])
        self._emit(ms, "offsets_committed", f'"generation":{self.gen},"member":{m.q},"offsets":[{offsets}]')

    def _standalone_commit(self, ms: int, _) -> None:
        """A consumer that assigns itself its partitions and commits outside any generation."""
        self._at(ms + self.commit_ms + self._jitter(), self._standalone_commit)
        f = self.fleet.traffic(ms - self.lag_ms)
        partinfo = self.fleet.partinfo
        offsets = ",".join([f"{prefix}{base + int(rate * (f - created))}}}"
                            for prefix, rate, created, base in map(partinfo.__getitem__, self._tps())])
        self._emit(ms, "offsets_committed", f'"generation":-1,"member":null,"offsets":[{offsets}]')

    def _live(self) -> list[_Member]:
        return [m for m in self.members.values() if not m.stalled]

    def _disrupt(self, ms: int, _) -> None:
        """A steady group's occasional rebalance: a leader's or member's rejoin, or a restart."""
        self._at(ms + self._gap(self.disrupt_mean_ms), self._disrupt)
        live = self._live()
        u = self.rng.random()
        if not live or u < 0.4:
            self._rejoin(ms, "leader rejoined")
        elif u < 0.6 or self.static:  # a static member's restart goes unnoticed
            self._rejoin(ms, "member rejoined")
        else:
            m = self.rng.choice(live)
            self._leave(ms, m)
            self._at(ms + self.rng.randrange(5_000, 30_000), self._join, self._identity(False, like=m))

    def _flap(self, ms: int, m: _Member) -> None:
        if self.members.get(m.id) is m and not m.stalled:
            self._stall(ms, m)

    def _storm(self, ms: int, duration_ms: int) -> None:
        self.storm_until = ms + duration_ms
        self._storm_step(ms, None)

    def _storm_step(self, ms: int, _) -> None:
        """One of a storm's disruptions: crash-looping pods, rejoins, members stuck."""
        if ms >= self.storm_until:
            return
        rng = self.rng
        self._at(ms + 500 + self._gap(8_000), self._storm_step)
        live = self._live()
        u = rng.random()
        if u < 0.3 or not live:
            self._storm_member(ms, None)
        elif u < 0.55:
            self._rejoin(ms, "member rejoined")
        elif u < 0.75:
            self._rejoin(ms, "leader rejoined")
        elif len(live) > 1:
            self._stall(ms, rng.choice(live), dead=rng.random() < 0.5)

    def _storm_member(self, ms: int, _) -> None:
        """A pod that starts, joins and soon crashes (a static one just stops heartbeating)."""
        m = self._join(ms, self._identity(False))
        later = ms + self.rng.randrange(3_000, 20_000)
        if self.static:
            self._at(later, self._flap, m)
        else:
            self._at(later, self._leave, m)

    def _deploy(self, ms: int, _) -> None:
        """A rolling deploy: for each member a new pod joins, then the old one leaves."""
        rng = self.rng
        self._at(ms + rng.randrange(4 * 3_600_000, 10 * 3_600_000), self._deploy)
        spacing = rng.randrange(15_000, 60_000)
        for i, m in enumerate(self._live()):
            self._at(ms + i * spacing, self._join, self._identity(False))
            self._at(ms + i * spacing + spacing // 2, self._leave, m)


class _Files:
    """One instance's files: appended in time order, rotated by size and simulated age,
    closed ones gzipped by the packer when asked."""

    def __init__(self, directory: Path, instance: int, options: Options, packer: Executor):
        self.directory, self.instance = directory, instance
        self.max_bytes = options.file_bytes
        self.max_age_ms = options.file_seconds * 1000
        self.compress = options.compress
        self.packer = packer
        self.packing: list[Future] = []
        self.paths: list[Path] = []  # every file made, by its final name
        self.file = None
        self.size = 0
        self.rotate_at = -math.inf
        self.opened_us = 0

    def write(self, batch: list[tuple[int, int, str]]) -> None:
        lines: list[str] = []
        max_bytes = self.max_bytes
        for ms, _, line in batch:
            if ms >= self.rotate_at or (self.size and self.size + len(line) > max_bytes):
                self._flush(lines)
                lines = []
                self.close(last=False)
                self._open(ms)
            lines.append(line)
            self.size += len(line)
        self._flush(lines)

    def _flush(self, lines: list[str]) -> None:
        if lines:
            self.file.write("".join(lines))

    def _open(self, ms: int) -> None:
        self.opened_us = max(ms * 1000, self.opened_us + 1)  # names stay unique and in order
        opened = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=self.opened_us)
        path = self.directory / f"events-{self.instance}-{opened.strftime('%Y%m%dT%H%M%S.%fZ')}.jsonl"
        self.file = open(path, "w", encoding="ascii", newline="\n", buffering=1 << 20)
        self.paths.append(path)
        self.size = 0
        self.rotate_at = ms + self.max_age_ms

    def close(self, last: bool) -> None:
        """Close the current file; gzip it unless it is the instance's last one."""
        if self.file is None:
            return
        self.file.close()
        self.file = None
        if self.compress and not last:
            path = self.paths[-1]
            self.paths[-1] = path.with_name(path.name + ".gz")
            self.packing.append(self.packer.submit(_gzip, path))


def _gzip(path: Path) -> None:
    """As EventLog._close: to a temporary name, then in place of the plain file."""
    packed = path.with_name(path.name + ".gz")
    with (open(path, "rb") as plain, open(f"{packed}.tmp", "wb") as raw,
          gzip.GzipFile(path.name, "wb", GZIP_LEVEL, raw, mtime=0) as out):
        shutil.copyfileobj(plain, out, 1 << 20)
    os.replace(f"{packed}.tmp", packed)
    path.unlink()
