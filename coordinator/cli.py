"""The `groupkeeper` command. Bad arguments are one clear line and a non-zero exit."""

from __future__ import annotations

import json
import sys

import click

from .config import ConfigError, load_config


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
