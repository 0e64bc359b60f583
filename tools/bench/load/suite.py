"""`groupkeeper bench load`: the coordinator under load, beside a reference in the same run.

Each load runs against a fresh coordinator (a temporary ZooKeeper and one `groupkeeper
run` with its default configuration, except the connection limits a load of 10,000
connections needs), then against its reference: the framing-only server for heartbeats,
group commit straight into the same ZooKeeper (`bench zk-commits`'s) for commits. The
coordinator and the references share one core; the generator (and ZooKeeper) the other.

Without load options, the standard loads run, each with the target it is held to; with
them, the one load they describe.

The consumer protocol's loads (11, 12): steady consumer-protocol members (KIP-848) heartbeating,
pipelined beside the classic heartbeat's fast path in the same run (its reference: the same
load of classic members against a coordinator of the same code), and 10,000 of them at
their default interval (group_consumer_heartbeat_interval_ms, 5 s) on schedule.

The Metadata load (10) runs against two coordinators of the same code: with its cache of
encoded answers, and with it turned off (metadata_cache_bytes = 0: every answer
made afresh, as before the cache), over a registry of 1,000 partitions with their leaders.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import timeit
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ...topics_admin import RegistryAdmin
from coordinator.store.zkserver import ZooKeeperServer, free_port
from coordinator.topics.zookeeper import topic_data
from ..process import NotStarted, RunProcess, raise_open_files
from .generator import Plan

TOPIC = "load"
SERVER_CPUS, LOAD_CPUS = {0}, {1}  # the coordinator (and references); the generator and ZooKeeper
CONFIG = {"max_connections": 60_000, "max_connections_per_ip": 60_000}
# the Metadata load's cluster: brokers, topics x partitions (replication factor 3, leaders known)
METADATA_BROKERS, METADATA_TOPICS, METADATA_PARTITIONS = 3, 10, 100
UNCACHED = {"metadata_cache_bytes": 0}  # the coordinator without its Metadata cache


class LoadBenchError(Exception):
    """The bench cannot run (a process did not start, a load broke down): one line."""


@dataclass
class Target:
    what: str
    goal: str
    check: str  # a Python expression over `ours`, `ref` and `ratio`: met or not


@dataclass
class Load:
    name: str
    plan: Plan
    # "framing" | "group commit" | "uncached" (Metadata made afresh) | "classic" (the same load of
    # classic members: the classic heartbeat's fast path) | None
    reference: str | None
    targets: list[Target] = field(default_factory=list)


def _plan(**kw) -> Plan:
    return Plan(host="127.0.0.1", port=0, topic=TOPIC, **kw)


def standard() -> list[Load]:
    """The loads of issue 14's targets."""
    hb = "ours['apis']['heartbeat']"
    chb = "ours['apis']['consumer_heartbeat']"
    return [
        Load("heartbeats pipelined (8 connections x 32 in flight)",
             _plan(groups=8, members=64, connections=8, pipeline=32, duration=5), "framing",
             [Target("heartbeats/s over the reference's", ">= 0.25", "ratio >= 0.25"),
              Target("errors", "0", f"not {hb}['errors']")]),
        Load("20,000 heartbeats/s offered (200 connections, 1 in flight)",
             _plan(groups=20, members=200, connections=200, rate=20_000, duration=5), "framing",
             [Target("achieved over offered", ">= 0.99", f"{hb}['per_second'] >= 0.99 * 20_000"),
              Target("p99 ms", "<= 5", f"{hb}['p99_ms'] <= 5")]),
        Load("10,000 members in 1,000 groups, 1 connection each, every 3 s",
             _plan(groups=1000, members=10_000, connections=10_000, rate=10_000 / 3, duration=12, warmup=3),
             "framing",
             [Target("achieved over offered", ">= 0.99", f"{hb}['per_second'] >= 0.99 * 10_000 / 3"),
              Target("p99 ms", "<= 5", f"{hb}['p99_ms'] <= 5"),
              Target("coordinator CPU (cores)", "<= 0.15", "ours['server']['cpu'] <= 0.15"),
              Target("coordinator RSS MB", "<= 400", "ours['server']['rss_mb'] <= 400"),
              Target("every member still in its generation", "yes", "not ours['verify']['not_in_generation']")]),
        Load("50,000 members in 5,000 groups, 5 per connection, every 3 s",
             _plan(groups=5000, members=50_000, connections=10_000, rate=50_000 / 3, duration=12, warmup=3,
                   pipeline=5), "framing",
             [Target("achieved over offered", ">= 0.99", f"{hb}['per_second'] >= 0.99 * 50_000 / 3"),
              Target("every member still in its generation", "yes", "not ours['verify']['not_in_generation']")]),
        Load("OffsetCommit pipelined (50 groups, 50 connections x 4 in flight, 10 partitions each)",
             _plan(groups=50, members=50, connections=50, pipeline=4, requests="commit", duration=5),
             "group commit",
             [Target("commits/s over group commit's", ">= 0.6", "ratio >= 0.6"),
              Target("every acknowledged commit readable", "yes", "ours['verify']['commits_lost'] == 0")]),
        Load("OffsetCommit at 5,000/s (500 members in 50 groups, 10 partitions each)",
             _plan(groups=50, members=500, connections=500, commit_interval=0.1, duration=5, warmup=2),
             None,
             [Target("achieved over offered", ">= 0.99", "ours['apis']['offset_commit']['per_second'] >= 4_950"),
              Target("p99 ms", "<= 25", "ours['apis']['offset_commit']['p99_ms'] <= 25"),
              Target("every acknowledged commit readable", "yes", "ours['verify']['commits_lost'] == 0")]),
        Load("one 1,000-member group: all rejoin",
             _plan(groups=1, members=1000, connections=100, rate=1000 / 3, duration=2, rejoin=True,
                   partitions_per_member=1), None,
             [Target("last JoinGroup to last SyncGroup, s", "<= 0.25", "ours['rejoin_s'] <= 0.25")]),
        Load("100 groups of 10 members starting together",
             _plan(groups=100, members=1000, connections=1000, rate=1000 / 3, duration=3), None,
             [Target("rebalances per group", "exactly 1", "ours['generations'] == {'1': 1000}"),
              Target("every member still in its generation", "yes", "not ours['verify']['not_in_generation']")]),
        Load("one 10,000-member group: pipelined heartbeats, then all rejoin",
             # 80 members a connection: under a connection's 100 requests in flight, all joins waiting
             _plan(groups=1, members=10_000, connections=125, pipeline=8, duration=5, rejoin=True,
                   partitions_per_member=1), "framing",
             [Target("heartbeats/s over the reference's (as load 1: independent of group size)", ">= 0.25",
                     "ratio >= 0.25"),
              Target("last JoinGroup to last SyncGroup, s (load 7's goal x 10: linear)", "<= 2.5",
                     "ours['rejoin_s'] <= 2.5")]),
        Load(f"Metadata for every topic, {METADATA_TOPICS * METADATA_PARTITIONS:,} partitions, nothing changing "
             "(4 connections x 4 in flight): cached, beside the path without the cache",
             _plan(groups=1, members=4, connections=4, pipeline=4, duration=5, requests="metadata", join=False,
                   verify=False), "uncached",
             [Target("answers/s over the path without the cache", ">= 10", "ratio >= 10"),
              Target("the same answer as the path without the cache, every time", "yes",
                     "ours['metadata']['sha256'] == ref['metadata']['sha256'] and not ours['apis']['metadata']"
                     "['errors'] and not ref['apis']['metadata']['errors']"),
              Target("partitions answered", f"{METADATA_TOPICS * METADATA_PARTITIONS:,}",
                     f"ours['metadata']['partitions'] == {METADATA_TOPICS * METADATA_PARTITIONS}")]),
        Load("consumer-protocol heartbeats pipelined (8 connections x 32 in flight), steady members: beside the "
             "classic heartbeat's fast path (load 1's shape, against a coordinator of the same code)",
             _plan(groups=8, members=64, connections=8, pipeline=32, duration=5, requests="consumer"), "classic",
             [Target("consumer heartbeats/s over classic heartbeats/s", ">= 0.5", "ratio >= 0.5"),
              Target("errors", "0", f"not {chb}['errors']"),
              Target("every member still steady", "yes", "not ours['verify']['not_in_generation']")]),
        Load("10,000 consumer-protocol members in 1,000 groups, 1 connection each, every 5 s (their default "
             "interval)",
             _plan(groups=1000, members=10_000, connections=10_000, rate=10_000 / 5, duration=15, warmup=3,
                   requests="consumer"), None,
             [Target("achieved over offered", ">= 0.99", f"{chb}['per_second'] >= 0.99 * 10_000 / 5"),
              Target("p99 ms", "<= 5", f"{chb}['p99_ms'] <= 5"),
              Target("errors", "0", f"not {chb}['errors']"),
              Target("every member still steady", "yes", "not ours['verify']['not_in_generation']")]),
    ]


def custom(groups: int, members: int, connections: int, pipeline: int, rate: float, duration: float,
           commit_interval: float, requests: str) -> list[tuple[int, Load]]:
    plan = _plan(groups=groups, members=members, connections=connections, pipeline=pipeline, rate=rate,
                 duration=duration, commit_interval=commit_interval, requests=requests)
    reference = ("framing" if requests == "heartbeat" and (rate or not commit_interval) else
                 "group commit" if requests == "commit" and not rate else None)
    return [(0, Load("custom", plan, reference))]


def _generate(plan: Plan) -> dict:
    """Run the generator in its own process, on the load's core."""
    done = subprocess.run([sys.executable, "-m", "tools.bench.load.generator"],
                          input=json.dumps(asdict(plan)), capture_output=True, text=True,
                          preexec_fn=_pin(LOAD_CPUS), check=False)
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise LoadBenchError(f"the load generator failed: {done.stderr.strip()[-500:]}") from None
    if "error" in result:
        raise LoadBenchError(f"the load broke down: {result['error']}")
    return result


def _pin(cpus: set[int]):
    """A child's preexec_fn that keeps it on `cpus` (nothing on a machine of one core)."""
    return (lambda: os.sched_setaffinity(0, cpus)) if _PINNING else None


_PINNING = (SERVER_CPUS | LOAD_CPUS) <= os.sched_getaffinity(0)


class _Zookeeper:
    """A temporary ZooKeeper with the load's topic, on the load's core."""

    def __init__(self, work: Path, partitions: int, metadata: bool = False):
        self.server = ZooKeeperServer(work / "zookeeper", free_port(), heap_mb=1024)
        self.partitions = partitions
        self.metadata = metadata  # the Metadata load's cluster instead of the one topic

    def __enter__(self) -> str:
        mine = os.sched_getaffinity(0)
        if _PINNING:
            os.sched_setaffinity(0, LOAD_CPUS)  # the JVM's threads inherit it
        try:
            self.server.start()
        finally:
            os.sched_setaffinity(0, mine)
        with RegistryAdmin(self.server.connect_string) as admin:
            if self.metadata:
                _metadata_cluster(admin)
            else:
                admin.create_topic(TOPIC, self.partitions)
        return self.server.connect_string

    def __exit__(self, *exc) -> None:
        self.server.stop()


def _metadata_cluster(admin: RegistryAdmin) -> None:
    """Brokers, and topics whose partitions each have three replicas and a leader, written
    as ZooKeeper-mode Kafka writes them (the brokers themselves never run)."""
    zk = admin.client
    for b in range(METADATA_BROKERS):
        zk.create(f"/brokers/ids/{b}", json.dumps({"host": f"kafka-{b}.bench.invalid", "port": 9092}).encode(),
                  makepath=True)
    zk.create("/cluster/id", b'{"version":"1","id":"YmVuY2gtbWV0YWRhdGEtaQ"}', makepath=True)
    zk.create("/controller", b'{"version":1,"brokerid":0,"timestamp":"0"}')
    for t in range(METADATA_TOPICS):
        topic = f"{TOPIC}-{t:02d}"
        replicas = {p: [(p + r) % METADATA_BROKERS for r in range(3)] for p in range(METADATA_PARTITIONS)}
        # fixed topic ids: both coordinators of the load answer the same bytes
        zk.create(f"/brokers/topics/{topic}", topic_data(replicas, uuid.UUID(int=t + 1)), makepath=True)
        zk.ensure_path(f"/brokers/topics/{topic}/partitions")
        waits = [zk.create_async(f"/brokers/topics/{topic}/partitions/{p}") for p in replicas]
        waits += [zk.create_async(f"/brokers/topics/{topic}/partitions/{p}/state", json.dumps(
            {"controller_epoch": 1, "leader": r[0], "version": 1, "leader_epoch": 4, "isr": r}).encode())
            for p, r in replicas.items()]
        for wait in waits:
            wait.get(timeout=30)


def _ours(load: Load, work: Path, profile: Path | None, settings: dict | None = None) -> dict:
    plan = load.plan
    partitions = min(10_000, plan.partitions_per_member * -(-plan.members // plan.groups))
    with _Zookeeper(work, partitions, metadata=plan.requests == "metadata") as zookeeper:
        port = free_port()
        config = work / "groupkeeper.toml"
        config.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in {**CONFIG, **(settings or {})}.items()))
        run = RunProcess(["--config", str(config), "--zookeeper", zookeeper, "--listeners", f"PLAINTEXT://127.0.0.1:{port}",
                          "--metrics-listen", "", "--data-dir", str(work / "data")])
        try:
            run.start(work / "groupkeeper.log", preexec_fn=_pin(SERVER_CPUS))
            return _generate(replace(plan, port=port, server_pid=run.process.pid,
                                     profile=str(profile) if profile else ""))
        except NotStarted as exc:
            raise LoadBenchError(f"the coordinator did not start: {str(exc)[:300]}") from None
        finally:
            run.stop(30)


def _framing(load: Load) -> dict:
    port = free_port()
    with subprocess.Popen([sys.executable, "-m", "tools.bench.load.reference", str(port)],
                          stdout=subprocess.PIPE, text=True, preexec_fn=_pin(SERVER_CPUS)) as server:
        try:
            if server.stdout.readline().strip() != "ready":
                raise LoadBenchError("the reference server did not start")
            return _generate(replace(load.plan, port=port, server_pid=server.pid, join=False, verify=False,
                                     rejoin=False, commit_interval=0.0))  # it answers heartbeats only
        finally:
            server.terminate()


def _group_commit(load: Load, work: Path) -> dict:
    with _Zookeeper(work, 1) as zookeeper:
        done = subprocess.run([sys.executable, "-m", "tools.bench.zk_commits", zookeeper,
                               str(load.plan.duration), str(load.plan.groups)],
                              capture_output=True, text=True, preexec_fn=_pin(SERVER_CPUS), check=False)
    try:
        return {"apis": {"offset_commit": {"per_second": float(done.stdout.strip().splitlines()[-1])}}}
    except (ValueError, IndexError):
        raise LoadBenchError(f"group commit (the reference) failed: {done.stderr.strip()[-500:]}") from None


def _headline(load: Load, result: dict) -> tuple[str, float | None]:
    """The API a load is about (commits when it sends nothing else) and its rate in `result`."""
    plan = load.plan
    api = ("metadata" if plan.requests == "metadata" else "consumer_heartbeat" if plan.requests == "consumer" else
           "offset_commit" if plan.requests == "commit" or (not plan.rate and plan.commit_interval) else "heartbeat")
    return api, result["apis"].get(api, {}).get("per_second")


def gateway_rewrites(partitions: int = METADATA_TOPICS * METADATA_PARTITIONS, rounds: int = 30) -> dict:
    """In this process: a broker's all-topics Metadata answer of `partitions` (the load's
    cluster) rewritten through the gateway afresh, and again when the same bytes come back
    (`Gateway._metadata_rewriter`), microseconds each."""
    from coordinator.gateway import rewrite
    from coordinator.gateway.nodes import Gateway
    from coordinator.gateway.ports import PortScheme
    from coordinator.listeners import Listener
    from coordinator.topics.brokers import BrokerTopics
    from protocol import RequestHeader, encode_response, messages as m
    from protocol.schemas import METADATA

    listener = Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)
    gateway = Gateway(BrokerTopics([("127.0.0.1", 9)], 5.0), [(listener, listener)], PortScheme(9092, 9092, 1),
                      lambda name: [(1_000_000_001, "127.0.0.1", 9092)], set())
    gateway.open = set(range(METADATA_BROKERS))
    brokers = list(range(METADATA_BROKERS))
    per_topic = -(-partitions // METADATA_TOPICS)
    answer = encode_response(RequestHeader(METADATA.key, 12, 1, None), m.MetadataResponse(
        brokers=[m.MetadataResponseBroker(node_id=b, host=f"kafka-{b}.bench.invalid", port=9092) for b in brokers],
        cluster_id="bench", controller_id=0, topics=[m.MetadataResponseTopic(name=f"{TOPIC}-{t:02d}", partitions=[
            m.MetadataResponsePartition(partition_index=p, leader_id=p % 3, leader_epoch=4,
                                        replica_nodes=[(p + i) % 3 for i in brokers],
                                        isr_nodes=[(p + i) % 3 for i in brokers]) for p in range(per_topic)])
            for t in range(METADATA_TOPICS)]))[4:]
    exposed, extra = gateway.exposed(listener.name), gateway.coordinator_nodes(listener.name)
    made = min(timeit.repeat(lambda: rewrite.rewrite_frame(METADATA.key, 12, answer, exposed, extra),
                             number=rounds, repeat=3)) / rounds
    rewriter = gateway._rewriter(METADATA.key, 12, listener.name)
    first = rewriter(answer)
    remembered = min(timeit.repeat(lambda: rewriter(answer), number=rounds * 30, repeat=3)) / (rounds * 30)
    assert rewriter(answer) == first == rewrite.rewrite_frame(METADATA.key, 12, answer, exposed, extra)
    return {"rewritten_us": round(made * 1e6, 1), "remembered_us": round(remembered * 1e6, 2),
            "ratio": round(made / remembered, 1), "bytes": len(answer) + 4}


def run_load(load: Load, profile: Path | None = None) -> dict:
    """One load against ours, then its reference; `profile`: where py-spy's samples of the
    coordinator go."""
    with tempfile.TemporaryDirectory(prefix="groupkeeper-load-") as tmp:
        work = Path(tmp)
        ours = _ours(load, work / "ours", profile)
        ref = None
        if load.reference == "framing":
            ref = _framing(load)
        elif load.reference == "group commit":
            ref = _group_commit(load, work / "reference")
        elif load.reference == "uncached":
            ref = _ours(load, work / "reference", None, UNCACHED)
        elif load.reference == "classic":
            ref = _ours(replace(load, plan=replace(load.plan, requests="heartbeat")), work / "reference", None)
    if load.plan.requests == "metadata":
        ours["gateway"] = gateway_rewrites()
    api, mine = _headline(load, ours)
    ref_api = "heartbeat" if load.reference == "classic" else api
    theirs = ref["apis"].get(ref_api, {}).get("per_second") if ref else None
    ratio = mine / theirs if mine and theirs else None
    out = {"load": load.name, "api": api, "ref_api": ref_api, "reference": load.reference, "ours": ours, "ref": ref,
           "ratio": round(ratio, 3) if ratio is not None else None, "targets": []}
    for target in load.targets:
        try:
            met = bool(eval(target.check, {}, {"ours": ours, "ref": ref, "ratio": ratio}))  # our own expressions (Target.check)
        except (KeyError, TypeError):
            met = False
        out["targets"].append({"what": target.what, "goal": target.goal, "met": met})
    return out


def run(loads: list[tuple[int, Load]], profile_dir: Path | None = None) -> list[dict]:
    """The loads, by number; with `profile_dir`, py-spy's samples of each in `<number>.raw`."""
    raise_open_files(65_536)
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for n, load in loads:
        try:
            results.append(run_load(load, profile_dir / f"{n}.raw" if profile_dir else None))
        except LoadBenchError as exc:  # one load that broke down does not hide the others' figures
            results.append({"load": load.name, "error": str(exc), "targets": [
                {"what": t.what, "goal": t.goal, "met": False} for t in load.targets] or [
                {"what": "ran", "goal": "yes", "met": False}]})
    return results


def table(results: list[dict]) -> str:
    rows = []
    for r in results:
        if "error" in r:
            rows += [r["load"], f"  BROKE DOWN: {r['error']}", ""]
            continue
        ours, ref = r["ours"], r["ref"] or {}
        api, ref_api = r["api"], r.get("ref_api", r["api"])
        a = ours["apis"].get(api, {})
        rows.append(f"{r['load']}")
        rows.append(f"  {api}: ours {a.get('per_second', 0):,.0f}/s"
                    + (f", {r['reference']} {ref['apis'][ref_api]['per_second']:,.0f}/s, ratio {r['ratio']}"
                       if ref else "")
                    + f"; p50 {a.get('p50_ms')} ms, p99 {a.get('p99_ms')} ms, p999 {a.get('p999_ms')} ms"
                    + (f" (reference p50 {ref['apis'][ref_api].get('p50_ms')} ms, "
                       f"p99 {ref['apis'][ref_api].get('p99_ms')} ms)"
                       if ref and "p50_ms" in ref["apis"][ref_api] else ""))
        errors = {f"{k}:{n}": v for k, x in ours["apis"].items() for n, v in x["errors"].items()}
        server = ours.get("server") or {}
        rows.append(f"  errors {errors or 0}; coordinator CPU {_cpu(server)}, RSS {server.get('rss_mb')} MB"
                    + (f" (reference CPU {_cpu(ref['server'])})" if ref and ref.get("server") else "")
                    + f"; generator CPU {ours.get('generator_cpu')}"
                    + (f"; join {ours['join_s']} s" if "join_s" in ours else "")
                    + (f"; rejoin {ours['rejoin_s']} s" if "rejoin_s" in ours else ""))
        if "metadata" in ours:
            md, gw = ours["metadata"], ours.get("gateway") or {}
            rows.append(f"  answer: {md['partitions']:,} partitions ({md['leaderless']} without a leader) of "
                        f"{md['topics']} topics, {md['brokers']} nodes, {md['bytes']:,} bytes (v{md['version']})"
                        + ("; the same bytes as the path without the cache" if ref and ref.get("metadata", {}).get(
                            "sha256") == md["sha256"] else "; NOT the same bytes as without the cache" if ref else ""))
            without = _per_answer(ref.get("server") or {}, ref["apis"][api]) if ref else None
            rows.append(f"  coordinator CPU per answer: {_per_answer(server, a)}"
                        + (f", without the cache {without}" if without else ""))
            if gw:
                rows.append(f"  gateway (in this process): a broker's answer of {gw['bytes']:,} bytes rewritten "
                            f"{gw['rewritten_us']:,} us, the same answer again {gw['remembered_us']} us "
                            f"({gw['ratio']}x)")
        if "verify" in ours:
            v = ours["verify"]
            rows.append(f"  after: not in generation {v['not_in_generation'] or 0}, "
                        f"commits lost {v['commits_lost']} of {v['commits_checked']}")
        for t in r["targets"]:
            rows.append(f"  [{'met' if t['met'] else 'MISSED'}] {t['what']} {t['goal']}")
        rows.append("")
    return "\n".join(rows)


def _per_answer(server: dict, api: dict) -> str:
    """Microseconds of the coordinator's CPU per answer over the window."""
    if not server.get("cpu") or not api.get("per_second"):
        return "unknown"
    return f"{server['cpu'] / api['per_second'] * 1e6:,.0f} us"


def _cpu(server: dict) -> str:
    return f"{server.get('cpu')} cores ({server.get('cpu_user')} user, {server.get('cpu_system')} system)"
