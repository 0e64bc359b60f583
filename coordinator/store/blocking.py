"""ZooKeeper from the short-lived CLI processes (`topics`, `users`, `acls`): synchronous
kazoo, never on the coordinator's trio thread, with the failures phrased for the operator."""

from __future__ import annotations

import getpass
import json
import socket
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from .layout import AUDIT, AUDIT_KEEP


class AdminError(Exception):
    """A refused request, phrased for the operator."""


class ZooKeeperAdmin:
    """A connected client (`client`), closed on leaving a `with` block. `digest`: (user,
    password) to authenticate with; `default_acl`: the ACL of the znodes it creates."""

    def __init__(self, hosts: str, timeout: float = 5.0, digest: tuple[str, str] | None = None,
                 default_acl: list | None = None):
        self.client = KazooClient(hosts=hosts, timeout=10.0, default_acl=default_acl,
                                  auth_data=None if digest is None else [("digest", f"{digest[0]}:{digest[1]}")])
        try:
            self.client.start(timeout=timeout)
        except KazooTimeoutError:
            self.client.close()
            raise AdminError(f"cannot reach ZooKeeper at {hosts} within {timeout:g}s") from None

    def audit(self, kind: str, what: dict) -> None:
        """Record an operator's change made through this client (who, from where, what) for
        the instances to log and put in their event logs (`security.audit`); the oldest past
        AUDIT_KEEP go. Never a secret in `what`."""
        record = {"by": getpass.getuser(), "host": socket.gethostname(), "kind": kind, "what": what,
                  "at_ms": int(time.time() * 1000)}
        self.client.create(f"{AUDIT}/change-", json.dumps(record).encode(), sequence=True, makepath=True)
        try:
            names = sorted(self.client.get_children(AUDIT))
            for name in names[:max(0, len(names) - AUDIT_KEEP)]:
                self.client.delete(f"{AUDIT}/{name}")
        except (NoNodeError, NoAuthError):
            pass  # another writer pruned it, or it is not ours to prune

    def close(self) -> None:
        self.client.stop()
        self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_digest(path: str) -> tuple[str, str]:
    """(user, password) from the first line of `path`, `user:password`; ValueError saying
    what is wrong (for the daemon's zookeeper_digest_file and the CLIs' --zookeeper-digest-file)."""
    try:
        with open(path) as file:
            line = file.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None
    user, sep, password = line.partition(":")
    if not (user and sep and password):
        raise ValueError(f"{path} must hold user:password on its first line")
    return user, password
