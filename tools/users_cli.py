"""`groupkeeper users ...`: SASL/SCRAM users in Kafka's ZooKeeper layout (see `users.py`).
Passwords are never taken from the command line. Every error is one line and exit 1."""

from __future__ import annotations

import json

import click

from coordinator.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS
from coordinator.security.users import UserAdmin
from .zookeeper_options import connected, zookeeper_options


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
@zookeeper_options
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
    with connected(UserAdmin, hosts, digest_file, timeout) as admin:
        admin.add(name, mechanism, password, iterations)
    click.echo(f"Set the {mechanism} credential of user {name}.")


@users.command("list")
@click.option("--json", "as_json", is_flag=True)
@zookeeper_options
def users_list(as_json: bool, hosts: str, digest_file: str | None, timeout: float) -> None:
    """List users and their mechanisms."""
    with connected(UserAdmin, hosts, digest_file, timeout) as admin:
        listed = admin.list()
    if as_json:
        click.echo(json.dumps(listed))
    else:
        for user, mechanisms in listed.items():
            click.echo(f"{user}\t{','.join(mechanisms)}")


@users.command("delete")
@click.argument("name")
@click.option("--mechanism", type=click.Choice(list(MECHANISMS)), help="Only this credential; default: all.")
@zookeeper_options
def users_delete(name: str, mechanism: str | None, hosts: str, digest_file: str | None, timeout: float) -> None:
    """Delete user NAME's credentials (other configuration, such as quotas, is kept)."""
    with connected(UserAdmin, hosts, digest_file, timeout) as admin:
        admin.delete(name, mechanism)
    click.echo(f"Deleted the {mechanism} credential of user {name}." if mechanism else
               f"Deleted the credentials of user {name}.")
