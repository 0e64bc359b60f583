"""The `groupkeeper` command. Bad arguments are one clear line and a non-zero exit."""

from __future__ import annotations

import json
import signal
import sys
import threading

import click

from .config import ConfigError, load_config
from .store.zkserver import ZooKeeperServer, ZooKeeperUnavailable


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="groupkeeper")
def main() -> None:
    """groupkeeper: a consumer-group coordinator for Kafka-protocol clients."""


@main.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML configuration file (flags win over its keys).")
def run(config_path: str | None) -> None:
    """Run a coordinator instance."""
    try:
        load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo("groupkeeper run: configuration is valid, but the coordinator server is not built "
               "yet (it arrives with the coordinator issue).", err=True)
    sys.exit(2)


@main.command()
@click.option("--data-dir", required=True, type=click.Path(file_okay=False),
              help="Where ZooKeeper keeps its snapshots and logs.")
@click.option("--port", default=2181, show_default=True, type=click.IntRange(1, 65535))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--tick-ms", default=2000, show_default=True, type=click.IntRange(10, 60000),
              help="ZooKeeper's tickTime: sessions may last 2 to 20 ticks.")
def zookeeper(data_dir: str, port: int, host: str, tick_ms: int) -> None:
    """Run a standalone ZooKeeper server in the foreground until SIGINT or SIGTERM."""
    server = ZooKeeperServer(data_dir, port, host, tick_ms)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server.start(foreground=True)
    except ZooKeeperUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"groupkeeper: ZooKeeper serving on {server.connect_string}", err=True)
    try:
        while not stop.wait(0.2):
            if server.process is None or server.process.poll() is not None:
                raise click.ClickException("ZooKeeper exited unexpectedly")
    finally:
        server.stop()


@main.group()
def bench() -> None:
    """Benchmarks that measure groupkeeper side by side with a reference, in one run."""


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
