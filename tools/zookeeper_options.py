"""What the `users` and `acls` commands share: their ZooKeeper options, and one line for
whatever ZooKeeper refuses."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click
from kazoo.exceptions import KazooException, NoAuthError

from coordinator.store.blocking import AdminError, ZooKeeperAdmin, read_digest


def zookeeper_options(command: Callable) -> Callable:
    """--zookeeper (hosts), --zookeeper-digest-file (digest_file), --zookeeper-timeout (timeout)."""
    for option in reversed([
        click.option("--zookeeper", "hosts", default="127.0.0.1:2181", show_default=True,
                     envvar="GROUPKEEPER_ZOOKEEPER", help="ZooKeeper connect string: HOST:PORT[,HOST:PORT...][/chroot]."),
        click.option("--zookeeper-digest-file", "digest_file", type=click.Path(dir_okay=False),
                     help="A file whose first line is user:password: authenticate to ZooKeeper as that digest "
                          "user (what this creates is then protected by it)."),
        click.option("--zookeeper-timeout", "timeout", default=5.0, show_default=True,
                     type=click.FloatRange(0.1, 300), help="Seconds to wait for ZooKeeper."),
    ]):
        command = option(command)
    return command


@contextmanager
def quiet_kazoo() -> Iterator[None]:
    """kazoo's own logging kept out of a CLI command's output while it runs. Without a
    handler configured, Python prints kazoo's warnings to stderr: an unreachable ZooKeeper
    came out as every retry ("Cannot resolve ...", "Connection dropped ...") before the one
    line that says what failed. The command's own error says it all, so nothing of kazoo's
    is printed (the coordinator, which configures logging, keeps kazoo's log lines)."""
    logger = logging.getLogger("kazoo")
    before = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(before)


@contextmanager
def connected(admin: Callable[..., ZooKeeperAdmin], hosts: str, digest_file: str | None,
              timeout: float) -> Iterator:
    """`admin(hosts, timeout, digest)`, connected; its refusals and ZooKeeper's failures
    become one line and exit 1."""
    try:
        digest = None if digest_file is None else read_digest(digest_file)
    except ValueError as exc:
        raise click.ClickException(f"--zookeeper-digest-file: {exc}") from None
    try:
        with quiet_kazoo(), admin(hosts, timeout, digest) as connection:
            yield connection
    except AdminError as exc:
        raise click.ClickException(str(exc)) from None
    except NoAuthError:
        raise click.ClickException("ZooKeeper refused the change (NoAuthError): its znodes are protected; "
                                   "give the digest user that protects them with --zookeeper-digest-file") from None
    except KazooException as exc:
        raise click.ClickException(f"ZooKeeper error: {type(exc).__name__}") from None
