"""`groupkeeper users ...`: SASL/SCRAM users in Kafka's ZooKeeper layout (see `users.py`).
Passwords are never taken from the command line. Every error is one line and exit 1."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click
from kazoo.exceptions import KazooException

from .scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS
from .users import UserAdmin, UsersError


def _zookeeper_options(command: Callable) -> Callable:
    for option in reversed([
        click.option("--zookeeper", "hosts", default="127.0.0.1:2181", show_default=True,
                     envvar="GROUPKEEPER_ZOOKEEPER", help="ZooKeeper connect string: HOST:PORT[,HOST:PORT...][/chroot]."),
        click.option("--zookeeper-digest-file", "digest_file", type=click.Path(dir_okay=False),
                     help="A file whose first line is the ZooKeeper digest user:password that protects the users."),
        click.option("--zookeeper-timeout", "timeout", default=5.0, show_default=True,
                     type=click.FloatRange(0.1, 300), help="Seconds to wait for ZooKeeper."),
    ]):
        command = option(command)
    return command


def _digest(path: str | None) -> tuple[str, str] | None:
    if path is None:
        return None
    try:
        with open(path) as file:
            line = file.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"--zookeeper-digest-file: {path}: {getattr(exc, 'strerror', None) or exc}") from None
    user, sep, password = line.partition(":")
    if not (user and sep and password):
        raise click.ClickException(f"--zookeeper-digest-file: {path} must hold user:password on its first line")
    return user, password


def _call(hosts: str, digest_file: str | None, timeout: float, action: Callable[[UserAdmin], Any]) -> Any:
    """Run `action(admin)`; refusals and ZooKeeper failures become one line and exit 1."""
    digest = _digest(digest_file)
    try:
        with UserAdmin(hosts, timeout, digest) as admin:
            return action(admin)
    except UsersError as exc:
        raise click.ClickException(str(exc)) from None
    except KazooException as exc:
        raise click.ClickException(f"ZooKeeper error: {type(exc).__name__}") from None


@click.group()
def users() -> None:
    """SASL/SCRAM users, kept in ZooKeeper where ZooKeeper-mode Kafka keeps them."""


@users.command("add")
@click.argument("name")
@click.option("--mechanism", required=True, type=click.Choice(list(MECHANISMS)))
@click.option("--iterations", default=MIN_ITERATIONS, show_default=True,
              type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS), help="PBKDF2 iterations of the credential.")
@click.option("--password-file", type=click.File("r"),
              help="Read the password from the first line of this file (- for standard input); "
                   "default: prompt for it twice.")
@_zookeeper_options
def users_add(name: str, mechanism: str, iterations: int, password_file, hosts: str, digest_file: str | None,
              timeout: float) -> None:
    """Add user NAME, or replace its MECHANISM credential."""
    if password_file is None:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    else:
        try:
            password = password_file.readline().rstrip("\r\n")
        except UnicodeDecodeError:
            raise click.ClickException("--password-file: not text in the locale's encoding") from None
    if not password:
        raise click.ClickException("the password is empty")
    _call(hosts, digest_file, timeout, lambda admin: admin.add(name, mechanism, password, iterations))
    click.echo(f"Set the {mechanism} credential of user {name}.")


@users.command("list")
@click.option("--json", "as_json", is_flag=True)
@_zookeeper_options
def users_list(as_json: bool, hosts: str, digest_file: str | None, timeout: float) -> None:
    """List users and their mechanisms."""
    listed = _call(hosts, digest_file, timeout, lambda admin: admin.list())
    if as_json:
        click.echo(json.dumps(listed))
    else:
        for user, mechanisms in listed.items():
            click.echo(f"{user}\t{','.join(mechanisms)}")


@users.command("delete")
@click.argument("name")
@click.option("--mechanism", type=click.Choice(list(MECHANISMS)), help="Only this credential; default: all.")
@_zookeeper_options
def users_delete(name: str, mechanism: str | None, hosts: str, digest_file: str | None, timeout: float) -> None:
    """Delete user NAME's credentials (other configuration, such as quotas, is kept)."""
    _call(hosts, digest_file, timeout, lambda admin: admin.delete(name, mechanism))
    click.echo(f"Deleted the {mechanism} credential of user {name}." if mechanism else
               f"Deleted the credentials of user {name}.")
