"""The `groupkeeper` command. Bad arguments are one clear line and a non-zero exit."""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

import trio
from kazoo.exceptions import KazooException

from coordinator import logs
from coordinator.config import KEYS, ConfigError, flag_name, from_flag, load_config
from coordinator.store.blocking import AdminError
from coordinator.store.zkserver import Peer, ZooKeeperServer, ZooKeeperUnavailable
from coordinator.topics.view import topic_id_text

from .acls_cli import acls
from .tables import table
from .groups_cli import groups
from .topics_admin import RegistryAdmin
from .transactions_cli import transactions
from .users_cli import users
from .zookeeper_options import quiet_kazoo

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"
zookeeper_option = click.option(
    "--zookeeper", "hosts", default=DEFAULT_ZOOKEEPER, show_default=True, envvar="GROUPKEEPER_ZOOKEEPER",
    help="ZooKeeper connect string: HOST:PORT[,HOST:PORT...][/chroot].")


def _admin(hosts: str) -> RegistryAdmin:
    try:
        return RegistryAdmin(hosts)
    except AdminError as exc:
        raise click.ClickException(str(exc)) from None


def _admin_call(hosts: str, action):
    """Run `action(admin)`; refusals and ZooKeeper failures become one line and exit 1
    (kazoo's retries are not printed before it: `quiet_kazoo`)."""
    with quiet_kazoo(), _admin(hosts) as admin:
        try:
            return action(admin)
        except AdminError as exc:
            raise click.ClickException(str(exc)) from None
        except KazooException as exc:
            raise click.ClickException(f"ZooKeeper error: {type(exc).__name__}") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="groupkeeper")
def main() -> None:
    """groupkeeper: a consumer-group coordinator for Kafka-protocol clients."""


main.add_command(groups)
main.add_command(users)
main.add_command(acls)
main.add_command(transactions)


def _comma_list(ctx, param, value: str | None) -> list[str] | None:
    return None if value is None else [item.strip() for item in value.split(",") if item.strip()]


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML configuration file; flags win over its keys.")
@click.option("--listeners", metavar="NAME://HOST:PORT[,...]", callback=_comma_list,
              help="Where Kafka clients connect (default PLAINTEXT://127.0.0.1:9094).")
@click.option("--advertised-listeners", metavar="NAME://HOST:PORT[,...]", callback=_comma_list,
              help="What clients are told, by listener name; default: --listeners.")
@click.option("--metrics-listen", help="HOST:PORT of the Prometheus /metrics endpoint; \"\" turns it off.")
@click.option("--zookeeper", help="ZooKeeper connect string; absent: an embedded ZooKeeper.")
@click.option("--brokers", metavar="HOST:PORT[,...]",
              help="Learn topics and leaders from these Kafka brokers (KRaft Kafka, Redpanda); "
                   "absent: from Kafka's ZooKeeper layout.")
@click.option("--gateway", metavar="HOST:PORT[,...]",
              help="Front this Kafka cluster (its bootstrap brokers): clients bootstrap from --listeners, "
                   "each broker is reached through a port of this instance, and every consumer group is "
                   "coordinated here. Implies --brokers.")
@click.option("--embedded-broker", metavar="HOST:PORT",
              help="Run a Kafka-protocol broker there (Tansu, in memory: for development) and front it "
                   "as --gateway does; `make run` does.")
@click.option("--embedded-zookeeper-port", type=click.IntRange(1, 65535))
@click.option("--zk-session-timeout", type=click.FloatRange(1, 600), help="Seconds.")
@click.option("--data-dir", type=click.Path(file_okay=False))
@click.option("--instance-id", type=click.IntRange(0, 2**31 - 1))
@click.option("--log-format", type=click.Choice(logs.FORMATS))
def run(config_path: str | None, **flags) -> None:
    """Run a coordinator instance until SIGINT or SIGTERM. Every key of the configuration
    file is also a flag (--key-with-dashes; lists as A,B, tables as NAME=VALUE,...); flags win."""
    from coordinator import daemon  # the whole runtime: loaded by this command only
    config = run_config(config_path, flags)
    logs.configure(config["log_format"])
    problems: list[str] = []
    try:
        trio.run(daemon.run, config)
    except* (daemon.StartupError, ZooKeeperUnavailable) as group:  # raised in a nursery or not
        problems = [str(exc) for exc in _leaves(group)]
    if problems:
        raise click.ClickException(problems[0])


def run_config(config_path: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    """The configuration `run` runs with: the file's keys, then the flags given (those
    generated from the keys read as text by `config.from_flag`); one clear line if wrong."""
    try:
        config = load_config(config_path)
        for key, value in flags.items():
            if value is not None:
                config[key] = from_flag(key, value) if key in _GENERATED else value
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    return config


_METAVARS = {int: "INT", float: "NUMBER", bool: "true|false", str: "TEXT", list: "A,B,...", dict: "NAME=VALUE,..."}
_GENERATED: set[str] = set()  # the keys whose flags are made from KEYS, not declared above


def _every_key_a_flag(command: click.Command) -> click.Command:
    """Give `command` a flag for each configuration key that has none declared: the one
    declaration of keys (`config.KEYS`) makes them, so none can be forgotten."""
    declared = {p.name for p in command.params}
    for key, (kind, default) in KEYS.items():
        if key in declared:
            continue
        _GENERATED.add(key)
        shown = ",".join(default) if kind is list else (
            ",".join(f"{k}={v}" for k, v in default.items()) if kind is dict else default)
        command.params.append(click.Option(
            [flag_name(key), key], metavar=_METAVARS.get(kind, "TEXT"),
            help=f"The key {key} (config/groupkeeper.toml); default {shown!r}." if shown != "" else
            f"The key {key} (config/groupkeeper.toml); default empty."))
    return command


_every_key_a_flag(run)


def _leaves(group: BaseExceptionGroup):
    for exc in group.exceptions:
        yield from _leaves(exc) if isinstance(exc, BaseExceptionGroup) else (exc,)


@main.command()
@click.option("--data-dir", required=True, type=click.Path(file_okay=False),
              help="Where ZooKeeper keeps its snapshots and logs.")
@click.option("--port", default=2181, show_default=True, type=click.IntRange(1, 65535))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--tick-ms", default=2000, show_default=True, type=click.IntRange(10, 60000),
              help="ZooKeeper's tickTime: sessions may last 2 to 20 ticks.")
@click.option("--ensemble", metavar="HOST:QUORUM:ELECTION,...",
              help="Run as one node of this ensemble (server ids 1, 2, ... in this order).")
@click.option("--server-id", type=click.IntRange(1, 255), help="This node's id in --ensemble.")
@click.option("--heap-mb", default=512, show_default=True, type=click.IntRange(64, 65536),
              help="The JVM's heap: ZooKeeper holds all its data in it.")
def zookeeper(data_dir: str, port: int, host: str, tick_ms: int, ensemble: str | None, server_id: int | None,
              heap_mb: int) -> None:
    """Run a ZooKeeper server (standalone, or a node of --ensemble) in the foreground until
    SIGINT or SIGTERM."""
    try:
        peers = [Peer.parse(text) for text in ensemble.split(",")] if ensemble else None
        server = ZooKeeperServer(data_dir, port, host, tick_ms, peers=peers, server_id=server_id, heap_mb=heap_mb)
    except ValueError as exc:
        raise click.ClickException(f"--ensemble/--server-id: {exc}") from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server.start(foreground=True)
    except ZooKeeperUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    role = f" (node {server_id} of {len(peers)})" if peers else ""
    click.echo(f"groupkeeper: ZooKeeper serving on {server.connect_string}{role}", err=True)
    try:
        while not stop.wait(0.2):
            if server.process is None or server.process.poll() is not None:
                raise click.ClickException("ZooKeeper exited unexpectedly")
    finally:
        server.stop()


@main.command("hash-password")
@click.option("--password-file", type=click.File("r"),
              help="Read the password from the first line of this file (- for standard input); "
                   "default: prompt for it twice.")
def hash_password_command(password_file) -> None:
    """Print a password hash for the [metrics_users] table of the configuration. The
    password is never taken from the command line."""
    from coordinator.security.passwords import hash_password

    if password_file is None:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    else:
        password = password_file.readline().rstrip("\r\n")
    if not password:
        raise click.ClickException("the password is empty")
    click.echo(hash_password(password))


@main.group()
def topics() -> None:
    """Kafka's topic registry in ZooKeeper (for development where no broker writes it)."""


@topics.command("create")
@click.argument("name")
@click.option("--partitions", required=True, type=click.IntRange(1, 1_000_000))
@click.option("--replication-factor", default=1, show_default=True, type=click.IntRange(1, 100))
@zookeeper_option
def topics_create(name: str, partitions: int, replication_factor: int, hosts: str) -> None:
    """Create topic NAME."""
    _admin_call(hosts, lambda admin: admin.create_topic(name, partitions, replication_factor))
    click.echo(f"Created topic {name}.")


@topics.command("alter")
@click.argument("name")
@click.option("--partitions", required=True, type=click.IntRange(1, 1_000_000),
              help="The new partition count; it can only grow.")
@zookeeper_option
def topics_alter(name: str, partitions: int, hosts: str) -> None:
    """Increase the partition count of topic NAME."""
    _admin_call(hosts, lambda admin: admin.alter_partitions(name, partitions))
    click.echo(f"Topic {name} now has {partitions} partitions.")


@topics.command("list")
@click.option("--json", "as_json", is_flag=True)
@zookeeper_option
def topics_list(as_json: bool, hosts: str) -> None:
    """List topics."""
    names = _admin_call(hosts, lambda admin: admin.topics())
    click.echo(json.dumps(names) if as_json else "\n".join(names))


@topics.command("describe")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@zookeeper_option
def topics_describe(name: str, as_json: bool, hosts: str) -> None:
    """Partitions, replicas and leaders of topic NAME, as kafka-topics.sh --describe shows them."""
    def describe(admin: RegistryAdmin) -> tuple[str, list[dict]]:
        replicas, topic_id = admin.topic(name)
        rows = []
        for p, nodes in sorted(replicas.items()):
            state = admin.leader(name, p)
            rows.append({"partition": p, "leader": state[0] if state else None,
                         "replicas": nodes, "isr": state[1] if state else []})
        return topic_id_text(topic_id), rows
    topic_id, rows = _admin_call(hosts, describe)
    if as_json:
        click.echo(json.dumps({"topic": name, "topic_id": topic_id, "partitions": rows}))
        return
    factor = len(rows[0]["replicas"]) if rows else 0
    click.echo(f"Topic: {name}\tTopicId: {topic_id}\tPartitionCount: {len(rows)}\tReplicationFactor: {factor}")
    for row in rows:
        leader = "none" if row["leader"] is None else row["leader"]
        click.echo(f"\tTopic: {name}\tPartition: {row['partition']}\tLeader: {leader}\t"
                   f"Replicas: {','.join(map(str, row['replicas']))}\tIsr: {','.join(map(str, row['isr']))}")


@main.group()
def brokers() -> None:
    """Kafka's broker registry in ZooKeeper."""


@brokers.command("list")
@click.option("--json", "as_json", is_flag=True)
@zookeeper_option
def brokers_list(as_json: bool, hosts: str) -> None:
    """List registered brokers."""
    found = _admin_call(hosts, lambda admin: admin.brokers())
    if as_json:
        click.echo(json.dumps([{"id": b.id, "host": b.host, "port": b.port, "rack": b.rack} for b in found]))
        return
    click.echo(f"{'ID':<6} {'HOST':<30} {'PORT':<6} RACK")
    for b in found:
        click.echo(f"{b.id:<6} {b.host:<30} {b.port:<6} {b.rack or '-'}")


@main.command("cluster")
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
@zookeeper_option
def cluster_status(as_json: bool, hosts: str) -> None:
    """Live coordinator instances, the group-partitions each holds and the groups stored in them."""
    from .cluster_status import ranges, read_status
    status = _admin_call(hosts, lambda admin: read_status(admin.client))
    if as_json:
        click.echo(json.dumps(status.as_json()))
        return
    click.echo(table(["ID", "HOST", "PORT", "GROUP-PARTITIONS", "GROUPS", "OWNED"], [
        [i.id, i.host, i.port, len(i.group_partitions), i.groups, ranges(i.group_partitions)]
        for i in status.instances]))
    click.echo(f"\n{len(status.instances)} live instance(s); {status.group_partitions - len(status.unowned)} of "
               f"{status.group_partitions} group-partitions owned"
               + (f"; without an owner: {ranges(status.unowned)}" if status.unowned else ""))


@main.command()
@click.option("--strategy", required=True, help="A strategy name: built in, entry point or --config [assignors].")
@click.option("--input", "source", type=click.File("r"), default="-", show_default=True,
              help="JSON describing the group (see docs); - reads standard input.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Configuration whose [assignors] are loaded too.")
def assign(strategy: str, source, config_path: str | None) -> None:
    """Preview a strategy's assignment for a group, with its balance and movement."""
    from . import assign_whatif as whatif
    from coordinator.assignors.base import StrategyFailed
    from coordinator.assignors.registry import AssignorError, load_assignors
    try:
        assignors = load_assignors(load_config(config_path)["assignors"])
    except (ConfigError, AssignorError) as exc:
        raise click.ClickException(str(exc)) from None
    if strategy not in assignors:
        raise click.ClickException(f"unknown strategy {strategy!r} (known: {', '.join(sorted(assignors))})")
    try:
        members, topics = whatif.parse(json.loads(source.read()))
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"input is not JSON: {exc}") from None
    except whatif.InputError as exc:
        raise click.ClickException(f"input: {exc}") from None
    try:
        click.echo(json.dumps(whatif.what_if(assignors[strategy], members, topics)))
    except StrategyFailed as exc:
        raise click.ClickException(f"strategy {strategy!r} {exc}") from None


def _require_event_dirs(directories: list[str]) -> None:
    for directory in directories:
        if not Path(directory).is_dir():
            raise click.ClickException(f"{directory}: not a directory of event files")


@main.command()
@click.option("--events", "first", required=True, metavar="DIR",
              help="A directory of event files (*.jsonl, *.jsonl.gz); more may follow it.")
@click.argument("more", nargs=-1, metavar="[DIR...]")
@click.option("--out", required=True, metavar="DIR", help="Where the Parquet tables and report.html go.")
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
def analyze(first: str, more: tuple[str, ...], out: str, master: str) -> None:
    """Rebalances, groups, members, commit rates and latest offsets from event logs (PySpark)."""
    directories = [first, *more]
    _require_event_dirs(directories)
    try:
        from .analyze import job
        from pyspark.errors import PySparkException
    except ImportError as exc:
        raise click.ClickException(f"analyze needs PySpark and matplotlib (the 'analytics' extra): {exc}") from None
    spark = job.session(master)
    try:
        counts = job.run(spark, directories, out)
    except PySparkException as exc:
        raise click.ClickException(f"the analysis failed: {str(exc).splitlines()[0]}") from None
    finally:
        spark.stop()
    click.echo(", ".join(f"{name}: {count:,}" for name, count in counts.items()))
    click.echo(f"report: {Path(out, 'report.html').resolve()}")


@main.group("events")
def events_group() -> None:
    """Event logs (docs/events.md)."""


@events_group.command("generate")
@click.option("--groups", "group_count", required=True, type=int, help="Consumer groups to simulate.")
@click.option("--hours", required=True, type=float, help="Simulated hours.")
@click.option("--out", required=True, metavar="DIR", help="Where the event files go (created if missing).")
@click.option("--seed", default=0, show_default=True, type=int, help="The same seed gives the same files.")
@click.option("--instances", default=3, show_default=True, type=int,
              help="Coordinator instances sharing the 50 group-partitions.")
@click.option("--start", help="UTC start, ISO 8601 (2026-11-23T07:54:05.441Z); default: drawn from --seed.")
@click.option("--file-bytes", default=64 << 20, show_default=True, type=int, help="A file is closed at this size.")
@click.option("--file-seconds", default=3600.0, show_default=True, type=float,
              help="... or when it spans this much simulated time.")
@click.option("--compress", is_flag=True,
              help="Gzip closed files; the last of each instance stays plain, as a coordinator leaves it.")
@click.option("--force", is_flag=True, help="Write into a non-empty DIR, replacing its event files.")
def events_generate(group_count: int, hours: float, out: str, seed: int, instances: int, start: str | None,
                    file_bytes: int, file_seconds: float, compress: bool, force: bool) -> None:
    """A synthetic event log of realistic groups (steady, flapping, storms, deploys), for
    tests and scale runs of `analyze`."""
    from datetime import datetime, timezone

    from .events_generate import GenerateError, Options, generate
    began = None
    if start is not None:
        try:
            began = datetime.fromisoformat(start)
        except ValueError:
            raise click.ClickException(f"--start: not an ISO 8601 time: {start!r}") from None
        began = began.replace(tzinfo=timezone.utc) if began.tzinfo is None else began.astimezone(timezone.utc)
    options = Options(group_count, hours, seed, instances, began, file_bytes, file_seconds, compress)
    try:
        summary = generate(Path(out), options, force)
    except GenerateError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot write to {out}: {exc.strerror or exc}") from None
    click.echo(summary.line(Path(out)))


@main.group()
def bench() -> None:
    """Benchmarks that measure groupkeeper side by side with a reference, in one run."""


def _run_bench(run: Callable[[], Any], table: Callable[[Any], str], as_json: bool,
               failed: type[Exception] = ZooKeeperUnavailable) -> Any:
    """A bench that starts ZooKeeper or coordinators: kazoo's reconnect chatter kept out of
    its table, a failure (`failed`, or ZooKeeper not starting) one line; its result printed
    and returned."""
    logs.configure("console", logging.ERROR)
    try:
        result = run()
    except (failed, ZooKeeperUnavailable) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result, indent=2) if as_json else table(result))
    return result


@bench.command("codec")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--round-seconds", default=0.2, show_default=True, type=click.FloatRange(0.01, 10),
              help="Length of one timed round; the best of five rounds counts.")
def bench_codec(as_json: bool, round_seconds: float) -> None:
    """Protocol codecs against kafka-python's classes: JoinGroup, Heartbeat, OffsetCommit."""
    try:
        from .bench import codec
    except ImportError as exc:
        raise click.ClickException(f"bench codec needs kafka-python (the 'test' extra): {exc}") from None
    results = codec.run(round_seconds)
    click.echo(json.dumps({"results": results}, indent=2) if as_json else codec.table(results))


@bench.command("scrape")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--groups", default="1000,10000", show_default=True,
              help="Group counts to scrape at, comma-separated (each 1 to 100,000).")
@click.option("--partitions", default=6, show_default=True, type=click.IntRange(1, 100),
              help="Partitions each group has committed offsets on.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1, 100),
              help="Scrapes each way per group count; the median counts.")
def bench_scrape(as_json: bool, groups: str, partitions: int, rounds: int) -> None:
    """How long one /metrics scrape holds the serving loop as the groups grow: the lag and
    group collectors in steps, beside the same made in one piece each (in this process)."""
    try:
        counts = [int(n) for n in groups.split(",")]
    except ValueError:
        counts = []
    if not counts or not all(1 <= n <= 100_000 for n in counts):
        raise click.ClickException(f"--groups: numbers from 1 to 100000, comma-separated; not {groups!r}")
    from .bench import scrape
    result = scrape.run(counts, partitions, rounds)
    click.echo(json.dumps(result, indent=2) if as_json else scrape.table(result))


@bench.command("assign")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--reference-limit", default=120.0, show_default=True, type=click.FloatRange(1, 3600),
              help="Seconds kafka-python gets per assignment before it is reported as slower than that.")
@click.option("--reference-memory", default=8.0, show_default=True, type=click.FloatRange(0.5, 1024),
              help="GiB of address space kafka-python gets per assignment.")
@click.option("--skip-large", is_flag=True, help="Leave out the 5k x 100k group.")
def bench_assign(as_json: bool, reference_limit: float, reference_memory: float, skip_large: bool) -> None:
    """Every strategy at 1k x 10k (identical and mixed subscriptions) and 5k x 100k, beside
    kafka-python's assignors."""
    try:
        from .bench import assign as bench
        import kafka  # noqa: F401  (the reference)
    except ImportError as exc:
        raise click.ClickException(f"bench assign needs kafka-python (the 'test' extra): {exc}") from None
    scenarios = [name for name, sizes in bench.SCENARIOS.items() if not skip_large or sizes[0] <= 1_000]
    results = bench.run(reference_limit, reference_memory, scenarios)
    click.echo(json.dumps(results, indent=2) if as_json else bench.table(results, reference_limit))


@bench.command("analyze")
@click.option("--events", required=True, metavar="DIR", help="An event log, e.g. from `groupkeeper events generate`.")
@click.option("--out", required=True, metavar="DIR", help="Where `analyze` writes its tables.")
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def bench_analyze(events: str, out: str, master: str, as_json: bool) -> None:
    """`groupkeeper analyze` on an event log: time and peak memory, beside plain Python."""
    from .bench import analyze as bench
    _require_event_dirs([events])
    try:
        results = bench.run(events, out, master)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(results, indent=2) if as_json else bench.table(results))


@bench.command("failover")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--groups", "group_counts", default="1000,10000", show_default=True,
              help="Comma-separated group counts, one run each.")
@click.option("--session-timeout", default=None, type=click.FloatRange(4, 40),
              help="The instances' ZooKeeper session timeout: the detection time of a kill -9.  [default: 6; "
                   "with --clients 10, groupkeeper's own]")
@click.option("--clients", "with_clients", is_flag=True,
              help="Instead: real consumers (librdkafka, kafka-python, aiokafka; KIP-848 librdkafka) through two "
                   "gateway instances in front of Tansu; their coordinator killed (-9); the stall per client "
                   "beside the detection.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1, 20), help="With --clients: rounds.")
@click.option("--rate", default=1000.0, show_default=True, type=click.FloatRange(1, 20_000),
              help="With --clients: records produced per second.")
@click.option("--consumers", "per_client", default=1, show_default=True, type=click.IntRange(1, 10),
              help="With --clients: consumers of each client in each group.")
@click.option("--client-session-timeout", default=None, type=click.FloatRange(1, 60),
              help="With --clients: the consumers' session.timeout.ms, in seconds (KIP-848: the coordinators' "
                   "group_consumer_session_timeout_ms).  [default: --session-timeout]")
@click.option("--observe", default=None, type=click.FloatRange(1, 600),
              help="With --clients: seconds observed after the kill.  [default: the detection "
                   "(--session-timeout + 3) + the clients' session + 5]")
@click.pass_context
def bench_failover(ctx: click.Context, as_json: bool, group_counts: str, session_timeout: float | None,
                   with_clients: bool, rounds: int, rate: float, per_client: int,
                   client_session_timeout: float | None, observe: float | None) -> None:
    """Groups over 3 instances; one killed (-9), then one stopped (SIGTERM): time until each
    of its groups answers at its new owner, beside a plain read of what the new owner loads.
    With --clients: consumers of real clients through the gateway, and how long each stalls
    when the instance coordinating its group is killed. Exit status 1 if an acknowledged record
    was lost."""
    given = {name for name in ("rounds", "rate", "per_client", "client_session_timeout", "observe", "group_counts")
             if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT}
    flags = {"rounds": "--rounds", "rate": "--rate", "per_client": "--consumers",
             "client_session_timeout": "--client-session-timeout", "observe": "--observe", "group_counts": "--groups"}
    if with_clients:
        if "group_counts" in given:
            raise click.ClickException("--groups is the groups case's, not --clients'")
        from .bench import failover_clients
        settings = failover_clients.Settings(rounds=rounds, rate=rate, per_client=per_client,
                                             zk_session_timeout=session_timeout or 10.0,
                                             client_session_timeout=client_session_timeout, observe=observe)
        result = _run_bench(lambda: failover_clients.run(settings), failover_clients.table, as_json,
                            failover_clients.FailoverClientsError)
        if result["lost"]:
            raise SystemExit(1)
        return
    if given - {"group_counts"}:
        raise click.ClickException(f"{flags[sorted(given - {'group_counts'})[0]]} needs --clients")
    from .bench import failover
    try:
        counts = [int(n) for n in group_counts.split(",")]
    except ValueError:
        raise click.ClickException(f"--groups: not a list of numbers: {group_counts!r}") from None
    if not all(1 <= n <= 1_000_000 for n in counts):
        raise click.ClickException("--groups: each count must be between 1 and 1000000")
    _run_bench(lambda: failover.run(counts, session_timeout or 6.0), failover.table, as_json, RuntimeError)


@bench.command("security")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--seconds", default=3.0, show_default=True, type=click.FloatRange(0.5, 60),
              help="Length of each measured phase (twelve of them).")
@click.option("--profile", "profile_dir", type=click.Path(file_okay=False), default=None,
              help="Sample the coordinator with py-spy during each phase: PHASE.raw in this directory, its "
                   "summary in the results (a sampled run's figures are skewed).")
def bench_security(as_json: bool, seconds: float, profile_dir: str | None) -> None:
    """What TLS, SASL (SCRAM-SHA-512) and ACLs cost, beside PLAINTEXT in the same run: connections
    set up per second and heartbeats per second, with the coordinator's CPU per operation."""
    try:
        from .bench import security
    except ImportError as exc:
        raise click.ClickException(f"bench security needs cryptography (the 'test' extra): {exc}") from None
    _run_bench(lambda: security.run(seconds, Path(profile_dir) if profile_dir else None), security.table, as_json,
               security.SecurityBenchError)


@bench.command("gateway")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--records", default=1_000_000, show_default=True, type=click.IntRange(2, 100_000_000),
              help="Records produced as fast as possible, then read back, per mode and round.")
@click.option("--size", default=1024, show_default=True, type=click.IntRange(8, 1_000_000),
              help="Bytes of each record's value.")
@click.option("--rate", default=2000.0, show_default=True, type=click.FloatRange(1, 1_000_000),
              help="Records per second of the latency phase.")
@click.option("--seconds", default=4.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Length of the latency phase, per mode and round.")
@click.option("--partitions", default=4, show_default=True, type=click.IntRange(1, 1000),
              help="Partitions of the topics.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1, 100),
              help="Rounds, the modes interleaved (each first in turn); MB/s is the median round's.")
@click.option("--profile", "profile_dir", type=click.Path(file_okay=False), default=None,
              help="Sample the gateway with py-spy during its phases: gateway-PHASE-ROUND.raw in this "
                   "directory, their summary in the results (a sampled run's figures are skewed).")
@click.option("--beside", is_flag=True,
              help="Run a consumer group (heartbeats and auto-commits every 100 ms) beside the latency phase, "
                   "and scrape the gateway's /metrics every second.")
@click.option("--broker", type=click.Choice(["tansu", "kafka"]), default="tansu", show_default=True,
              help="The broker behind every mode: Tansu (one each, in memory, restarted before each phase) or "
                   "Apache Kafka 4.4 (one KRaft node for all, warmed up first; `make install` caches its jars).")
@click.option("--instances", default=1, show_default=True, type=click.IntRange(1, 8),
              help="Gateway instances (and HAProxy threads); produce and fetch then run in as many client "
                   "processes at once, the k-th through the k-th instance, on partitions of its own.")
@click.option("--serving-wait", type=click.Choice(["trio", "epoll"]), default="epoll", show_default=True,
              help="The gateway's serving_wait: its serving loop waits through trio, or in its own epoll while "
                   "trio is idle.")
@click.option("--tls", is_flag=True,
              help="The clients of HAProxy and of the gateway connect over TLS, which each terminates (a CA and "
                   "a certificate made for the run); the broker itself stays plaintext.")
@click.option("--second-relay", is_flag=True,
              help="A control, a fourth mode: HAProxy in front of a second HAProxy, one plain hop more than the "
                   "relay, and what that hop moves each latency figure by beside its target.")
def bench_gateway(as_json: bool, records: int, size: int, rate: float, seconds: float, partitions: int,
                  rounds: int, profile_dir: str | None, beside: bool, broker: str, instances: int,
                  serving_wait: str, tls: bool, second_relay: bool) -> None:
    """The gateway's data path beside a plain TCP relay (HAProxy) and the broker itself (Tansu),
    in one run, with librdkafka clients: produce and fetch MB/s, produce latency at a fixed
    rate, the relay's CPU. Exit status 1 if a mode did not read back every record."""
    from .bench import gateway
    settings = gateway.Settings(records=records, size=size, rate=rate, seconds=seconds, partitions=partitions,
                                rounds=rounds, profile=profile_dir, beside=beside, broker=broker,
                                instances=instances, serving_wait=serving_wait, tls=tls, second_relay=second_relay)
    result = _run_bench(lambda: gateway.run(settings), gateway.table, as_json, gateway.GatewayBenchError)
    if not result["complete"]:
        raise SystemExit(1)


@bench.command("rebalance")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--records", "with_records", is_flag=True,
              help="The records scenario: slow members reading real records through the gateway from an "
                   "embedded broker; one member joins, then one leaves. Without it: the scale-up (no broker).")
@click.option("--members", type=click.IntRange(1, 1000),
              help="Members of the group: the scale-up's joining one after another (default 100); the records "
                   "scenario's before one more joins (default 10).")
@click.option("--partitions", type=click.IntRange(1, 100_000),
              help="Partitions of the topic they all subscribe to (default 1000; with --records 120).")
@click.option("--join-interval", default=1.0, show_default=True, type=click.FloatRange(0, 600),
              help="Scale-up: seconds between one member's join and the next's.")
@click.option("--record-cost-ms", default=10.0, show_default=True, type=click.FloatRange(0.1, 10_000),
              help="--records: each member's processing per record (a sleep).")
@click.option("--batch", default=500, show_default=True, type=click.IntRange(1, 100_000),
              help="--records: records a member takes per poll (as max.poll.records).")
@click.option("--load", default=1.1, show_default=True, type=click.FloatRange(0.01, 10),
              help="--records: records produced a second, as a share of what the members process (above 1: "
                   "they fall behind and take full batches).")
@click.option("--heartbeat-ms", type=click.IntRange(100, 60_000),
              help="Heartbeat interval of both protocols (classic heartbeat.interval.ms; the coordinator's "
                   "group_consumer_heartbeat_interval_ms); default 500, with --records 3000.")
@click.option("--session-timeout-ms", type=click.IntRange(1000, 600_000),
              help="Session timeout of both protocols; default 10000, with --records 45000.")
@click.option("--settle", type=click.FloatRange(0.1, 600),
              help="Seconds nothing may change for a protocol's group to count as stable; default 5, with --records 3.")
@click.option("--timeout", type=click.FloatRange(1, 7200),
              help="Seconds a protocol may take to become stable (scale-up: after the last join, default 600; "
                   "--records: each phase, default 120) before it is reported as not.")
@click.option("--protocols", default="cooperative-sticky,range,consumer", show_default=True,
              help="The rows, in order: cooperative-sticky and range (classic), consumer (KIP-848).")
def bench_rebalance(as_json: bool, with_records: bool, members: int | None, partitions: int | None,
                    join_interval: float, record_cost_ms: float, batch: int, load: float, heartbeat_ms: int | None,
                    session_timeout_ms: int | None, settle: float | None, timeout: float | None,
                    protocols: str) -> None:
    """Rebalances under the classic protocol (cooperative-sticky, eager range) and KIP-848's
    (server-side uniform), in one run. The scale-up: members joining a running group one after
    another, no broker: time until stable, partitions paused per member, rebalances, ZooKeeper's
    cost. --records: slow members reading records through the gateway; after a member joins and
    after one leaves: time until stable and every partition read again, records read twice,
    partitions revoked per member, beside KIP-848's published figures."""
    try:
        from .bench import rebalance
        import confluent_kafka  # noqa: F401  (the members)
    except ImportError as exc:
        raise click.ClickException(f"bench rebalance needs confluent-kafka (the 'test' extra): {exc}") from None
    rows = tuple(p.strip() for p in protocols.split(",") if p.strip())
    unknown = [p for p in rows if p not in rebalance.ROWS]
    if unknown or not rows:
        raise click.ClickException(f"--protocols: unknown {', '.join(unknown) or '(none given)'}; "
                                   f"known: {', '.join(rebalance.ROWS)}")
    chosen = click.get_current_context().get_parameter_source
    scenario_only = ("join_interval",) if with_records else ("record_cost_ms", "batch", "load")
    for name in scenario_only:  # an option the scenario would ignore is a mistake, said so
        if chosen(name) is not click.core.ParameterSource.DEFAULT:
            flag = "--" + name.replace("_", "-")
            raise click.ClickException(f"{flag} is the scale-up's, not --records'" if with_records
                                       else f"{flag} applies only with --records")
    given = {"members": members, "partitions": partitions, "heartbeat_ms": heartbeat_ms,
             "session_timeout_ms": session_timeout_ms, "settle": settle, "timeout": timeout}
    given = {k: v for k, v in given.items() if v is not None}
    if with_records:
        from .bench import rebalance_records as scenario
        settings = scenario.RecordSettings(record_cost_ms=record_cost_ms, batch=batch, load=load, rows=rows,
                                           **given)
    else:
        scenario = rebalance
        settings = rebalance.Settings(join_interval=join_interval, rows=rows, **given)
    if settings.heartbeat_ms >= settings.session_timeout_ms:
        raise click.ClickException("--heartbeat-ms must be less than --session-timeout-ms")
    _run_bench(lambda: scenario.run(settings), scenario.table, as_json, rebalance.RebalanceBenchError)


@bench.command("zk-commits")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--zookeeper", help="Use this ZooKeeper; absent: a fresh local one in a temporary directory.")
@click.option("--seconds", default=5.0, show_default=True, type=click.FloatRange(0.5, 600),
              help="Length of each throughput and latency run.")
@click.option("--committers", default=200, show_default=True, type=click.IntRange(1, 10_000),
              help="Concurrent committers (one group each) in the throughput runs.")
@click.option("--rate", default=5000.0, show_default=True, type=click.FloatRange(1, 1_000_000),
              help="Commit requests per second offered in the latency run.")
def bench_zk_commits(as_json: bool, zookeeper: str | None, seconds: float, committers: int,
                     rate: float) -> None:
    """Committed partition-offsets per second into ZooKeeper: group commit against one
    multi() per request and one write per partition; p99 latency at a fixed load."""
    from .bench import zk_commits
    _run_bench(lambda: zk_commits.run(zookeeper, seconds, committers, rate), zk_commits.table, as_json)


@bench.command("abuse")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--bootstrap", metavar="HOST:PORT",
              help="A running coordinator to probe; absent: the bench starts its own (a temporary ZooKeeper "
                   "and one `groupkeeper run` with the limits below), stopped at the end.")
@click.option("--metrics", metavar="HOST:PORT",
              help="With --bootstrap: its metrics endpoint, for process_resident_memory_bytes.")
@click.option("--probes", default="all", show_default=True, help="Comma-separated probe names to run.")
@click.option("--deadline", default=10.0, show_default=True, type=click.FloatRange(0.5, 600),
              help="Seconds any request, a probe's or the bystander's, may go unanswered before it is a stall.")
@click.option("--read-timeout", type=click.FloatRange(0.1, 3600),
              help="request_read_timeout in seconds: set on the coordinator the bench starts (default 2), "
                   "expected of a --bootstrap one (default 30).")
@click.option("--per-ip-limit", default=1000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="max_connections_per_ip: set on the coordinator the bench starts, expected of a --bootstrap one.")
@click.option("--connections", type=click.IntRange(1, 1_000_000),
              help="Idle connections the flood opens; default: --per-ip-limit + 100.")
@click.option("--queued-reply-bytes", default=16 << 20, show_default=True, type=click.IntRange(1024, 2**31 - 1),
              help="max_queued_reply_bytes: set on the coordinator the bench starts, expected of a --bootstrap one.")
@click.option("--never-reads-seconds", default=5.0, show_default=True, type=click.FloatRange(0.5, 600),
              help="How long the client that never reads its answers keeps sending.")
@click.option("--huge-partitions", default=10_000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Partitions of each huge commit (4,096 bytes of metadata each).")
@click.option("--members", default=2000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Members of the large group.")
def bench_abuse(as_json: bool, bootstrap: str | None, metrics: str | None, probes: str, deadline: float,
                read_timeout: float | None, per_ip_limit: int, connections: int | None, queued_reply_bytes: int,
                never_reads_seconds: float, huge_partitions: int, members: int) -> None:
    """Hostile and unlucky clients against a coordinator: each probe held or broke, with its
    figures, while an ordinary client beside it must stay served. Exit status 1 if any broke."""
    from .kafka_admin import AdminError, parse_address
    from .bench import abuse
    names = list(abuse.PROBES) if probes == "all" else [p.strip() for p in probes.split(",") if p.strip()]
    unknown = [p for p in names if p not in abuse.PROBES]
    if unknown or not names:
        raise click.ClickException(f"--probes: unknown {', '.join(unknown) or '(none given)'}; "
                                   f"known: {', '.join(abuse.PROBES)}")
    if metrics is not None and bootstrap is None:
        raise click.ClickException("--metrics needs --bootstrap: the memory of a coordinator the bench starts "
                                   "is read from /proc")
    addresses = {}
    for flag, text in (("--bootstrap", bootstrap), ("--metrics", metrics)):
        try:
            addresses[flag] = None if text is None else parse_address(text)
        except AdminError as exc:
            raise click.ClickException(f"{flag}: {exc}") from None
    settings = abuse.Settings(
        bootstrap=addresses["--bootstrap"], metrics=addresses["--metrics"], probes=tuple(names), deadline=deadline,
        read_timeout=read_timeout if read_timeout is not None else (2.0 if bootstrap is None else 30.0),
        per_ip_limit=per_ip_limit, connections=connections if connections is not None else per_ip_limit + 100,
        queued_reply_bytes=queued_reply_bytes, never_reads_seconds=never_reads_seconds,
        huge_partitions=huge_partitions, members=members)
    result = _run_bench(lambda: abuse.run(settings), abuse.table, as_json, abuse.AbuseError)
    if result["broke"]:
        raise SystemExit(1)


@bench.command("load")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.option("--loads", default="all", show_default=True,
              help="The standard loads to run, by number (1-12, comma-separated; 10: Metadata from the cache against today's path; 11 and 12: consumer-protocol heartbeats), when no load option is given.")
@click.option("--groups", type=click.IntRange(1, 100_000), help="Groups of the load (a custom load).")
@click.option("--members", type=click.IntRange(1, 1_000_000), help="Members in all, spread over the groups.")
@click.option("--connections", type=click.IntRange(1, 60_000), help="Connections the members are spread over.")
@click.option("--pipeline", type=click.IntRange(1, 10_000), help="Requests in flight per connection, at most.")
@click.option("--rate", type=click.FloatRange(0, 10_000_000),
              help="Heartbeats per second offered in all, each member on its own schedule; 0: as fast as possible.")
@click.option("--duration", type=click.FloatRange(0.5, 3600), help="Seconds of the measured window.")
@click.option("--commit-interval", "commit_interval", type=click.IntRange(0, 3_600_000), metavar="MS",
              help="Each member commits its partitions every MS milliseconds; 0: no commits.")
@click.option("--requests", type=click.Choice(["heartbeat", "commit"]),
              help="What the as-fast-as-possible mode (--rate 0) sends.")
@click.option("--profile", "profile_dir", type=click.Path(file_okay=False), default=None,
              help="Sample the coordinator with py-spy during each window: NUMBER.raw in this directory, "
                   "its summary in the results.")
def bench_load(as_json: bool, loads: str, profile_dir: str | None, **custom) -> None:
    """The coordinator under load (joins, heartbeats, commits from a generator in its own
    process), beside a framing-only server or group commit into ZooKeeper in the same run:
    throughput, p50/p99/p999 latency from each request's scheduled time, errors, the
    coordinator's CPU and RSS. Exit status 1 if a standard load missed its target."""
    from .bench.load import suite
    if any(v is not None for v in custom.values()):
        given = {k: v for k, v in custom.items() if v is not None}
        defaults = {"groups": 10, "members": 100, "connections": 100, "pipeline": 1, "rate": 0.0,
                    "duration": 5.0, "commit_interval": 0, "requests": "heartbeat"}
        settings = {**defaults, **given}
        settings["commit_interval"] = settings["commit_interval"] / 1000
        if settings["members"] < settings["groups"] or settings["connections"] > settings["members"]:
            raise click.ClickException("--members must be at least --groups, and --connections at most --members")
        chosen = suite.custom(**settings)
    else:
        all_loads = suite.standard()
        try:
            numbers = range(1, len(all_loads) + 1) if loads == "all" else [int(n) for n in loads.split(",")]
            chosen = [(n, all_loads[n - 1]) for n in numbers if n >= 1]
        except (ValueError, IndexError):
            raise click.ClickException(f"--loads: numbers from 1 to {len(all_loads)}, comma-separated; "
                                       f"not {loads!r}") from None
    results = _run_bench(lambda: suite.run(chosen, Path(profile_dir) if profile_dir else None), suite.table,
                         as_json, suite.LoadBenchError)
    if any(not t["met"] for r in results for t in r["targets"]):
        raise SystemExit(1)
