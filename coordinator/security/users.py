"""Users' SCRAM credentials where ZooKeeper-mode Kafka keeps them, so that groupkeeper and
Kafka's brokers sharing the ZooKeeper know the same users:

```
/config/users/<sanitized user>        {"version":1,"config":{"SCRAM-SHA-512":"salt=...,stored_key=...,
                                       server_key=...,iterations=4096", ...}}
/config/changes/config_change_<seq>   {"version":2,"entity_path":"users/<sanitized user>"}
```

A user's node may hold other configuration (quotas) and children (`clients/<id>`), which
are kept. After each change a notification is written, as Kafka's tools do, so that the
brokers read the user again. `UserAdmin` changes users (the CLI), `UserStore` is the
coordinator's watched view of them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from urllib.parse import quote, unquote_plus

import trio
from kazoo.exceptions import BadVersionError, NoAuthError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from .. import logs
from ..store.blocking import AdminError, ZooKeeperAdmin
from ..store.bridge import Refresher, ZooKeeperBridge, protected_acl
from .scram import MECHANISMS, ScramCredential, make_credential

USERS = "/config/users"
CHANGES = "/config/changes"
MAX_NODE_BYTES = 64 * 1024  # a user's node larger than this is ignored
READ_CONCURRENCY = 64  # user nodes read at once


def sanitize(user: str) -> str:
    """A user name as Kafka's `Sanitizer` makes it a znode name: UTF-8 URL-encoding as
    Java's URLEncoder does it (only letters, digits and `.-_*` kept: `~` is %7E, unlike in
    Python's `quote`), then `*` as %2A and space as %20. ValueError for a name that is not
    Unicode text (a lone surrogate)."""
    return quote(user, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    """The user name of a znode name (Java's URLDecoder: `+` is a space); ValueError when
    it is not URL-encoded UTF-8."""
    if re.search(r"%(?![0-9A-Fa-f]{2})", name):
        raise ValueError(f"malformed %-escape in {name!r}")
    return unquote_plus(name, errors="strict")


def parse_user_config(data: bytes) -> dict[str, ScramCredential]:
    """The SCRAM credentials in a user's node, by mechanism; what does not parse is skipped."""
    config = _config(data)
    credentials = {}
    for mechanism, digest in MECHANISMS.items():
        try:
            credential = ScramCredential.from_kafka(config[mechanism])
        except (KeyError, TypeError, AttributeError, ValueError):
            continue
        size = hashlib.new(digest).digest_size
        if len(credential.stored_key) == size and len(credential.server_key) == size:
            credentials[mechanism] = credential
    return credentials


def _config(data: bytes | None) -> dict:
    """The "config" object of an entity's node, {} when there is none or it does not parse."""
    try:
        config = json.loads(data.decode())["config"] if data else {}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return {}
    return config if isinstance(config, dict) else {}


def _encode(config: dict) -> bytes:
    return json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()


class UserAdmin(ZooKeeperAdmin):
    """Adds and deletes users' credentials, for short-lived CLI processes (synchronous kazoo,
    never on the coordinator's trio thread).

    With `digest` (user, password), the client authenticates as that ZooKeeper digest user,
    and the user nodes it creates are readable and writable by that user only: anyone who
    reads a credential can try passwords against it offline. /config/users itself is
    created readable by all and writable by the digest user (no one else adds users), and
    the notifications open, as brokers read and remove them. Kafka's brokers, which cannot
    authenticate with a digest, then cannot read those users: protect the credentials only
    where groupkeeper alone uses them."""

    def __init__(self, hosts: str, timeout: float = 5.0, digest: tuple[str, str] | None = None):
        self.protected = digest is not None
        self.acl = OPEN_ACL_UNSAFE if digest is None else [make_digest_acl(*digest, all=True)]
        self.users_acl = OPEN_ACL_UNSAFE if digest is None else protected_acl(*digest)
        super().__init__(hosts, timeout, digest)

    def add(self, user: str, mechanism: str, password: str, iterations: int) -> None:
        """Create or replace `user`'s credential for `mechanism`."""
        try:
            credential = make_credential(mechanism, password, iterations)
        except ValueError as exc:
            raise AdminError(str(exc)) from None
        self._change(user, lambda config: {**config, mechanism: credential.to_kafka()})
        self.audit("users", {"user": user, "added": mechanism})  # never the password

    def delete(self, user: str, mechanism: str | None = None) -> None:
        """Remove `user`'s credential for `mechanism`, or all its credentials; the node goes
        when nothing else is left in it."""
        def remove(config: dict) -> dict:
            doomed = [m for m in MECHANISMS if m in config and mechanism in (None, m)]
            if not doomed:
                raise AdminError(f"user {user!r} has no {mechanism or 'SCRAM'} credential")
            return {key: value for key, value in config.items() if key not in doomed}
        self._change(user, remove, create=False)
        self.audit("users", {"user": user, "removed": mechanism or "all"})

    def list(self) -> dict[str, list[str]]:
        """Each user with credentials, and their mechanisms."""
        users = {}
        for name in self._call(USERS, lambda: self.client.get_children(USERS), default=[]):
            data, _ = self._call(f"{USERS}/{name}", lambda: self.client.get(f"{USERS}/{name}"), default=(b"", None))
            mechanisms = sorted(parse_user_config(data))
            if mechanisms:
                try:
                    users[desanitize(name)] = mechanisms
                except ValueError:
                    users[name] = mechanisms
        return dict(sorted(users.items()))

    def _change(self, user: str, change: Callable[[dict], dict], create: bool = True) -> None:
        """Read the user's configuration, change it and write it back, again if someone else
        wrote in between; then tell the brokers."""
        if not user:
            raise AdminError("the user name is empty")
        try:
            name = sanitize(user)
        except ValueError:
            raise AdminError(f"invalid user name {user!r}") from None
        path = f"{USERS}/{name}"
        while True:
            try:
                data, stat = self._call(path, lambda: self.client.get(path))
            except NoNodeError:
                data, stat = None, None
            if stat is None and not create:
                raise AdminError(f"user {user!r} does not exist")
            updated = change(_existing_config(path, data))
            try:
                self._call(path, lambda: self._write(path, updated, stat))
                break
            except (NodeExistsError, NoNodeError, BadVersionError):
                continue  # changed meanwhile: again, from what is there now
        self._call(CHANGES, lambda: self._notify(name))

    def _write(self, path: str, config: dict, stat) -> None:
        if stat is None:
            self.client.ensure_path("/config", acl=OPEN_ACL_UNSAFE)
            self.client.ensure_path(USERS, acl=self.users_acl)
            self.client.create(path, _encode(config), acl=self.acl)
            return
        if self.protected and self.client.get_acls(path)[0] != self.acl:
            self.client.set_acls(path, self.acl)  # written before protection: protected from now on
        if not config and stat.numChildren == 0:
            try:
                self.client.delete(path, version=stat.version)
                return
            except NotEmptyError:  # a child came meanwhile: keep the node, empty
                pass
        self.client.set(path, _encode(config), version=stat.version)

    def _notify(self, name: str) -> None:
        self.client.ensure_path(CHANGES, acl=OPEN_ACL_UNSAFE)
        notification = json.dumps({"version": 2, "entity_path": f"users/{name}"}, separators=(",", ":"))
        self.client.create(f"{CHANGES}/config_change_", notification.encode(), sequence=True)

    def _call(self, path: str, call, default=None):
        """`call()`; a missing node gives `default` when one is given; a refused access is
        an operator's error."""
        try:
            return call()
        except NoNodeError:
            if default is None:
                raise
            return default
        except NoAuthError:
            raise AdminError(f"ZooKeeper refused access to {path}: it is protected; give "
                             "--zookeeper-digest-file with its digest user") from None


def _existing_config(path: str, data: bytes | None) -> dict:
    """The configuration in a user's node, to be changed; AdminError for data that is not
    one, which is left alone rather than overwritten."""
    if not data:
        return {}
    try:
        value = json.loads(data.decode())
    except (ValueError, RecursionError):
        value = None
    config = value.get("config", {}) if isinstance(value, dict) else None
    if not isinstance(config, dict):
        raise AdminError(f"{path} does not hold Kafka's user configuration; left as it is")
    return config


class UserStore:
    """Every user's credentials, kept current by watches: the children of /config/users
    (users come and go) and each user's node (credentials change), re-armed by `Refresher`
    after every reconnection. Only the nodes whose watch fired, or that are new, are read
    again; a new session (whose watches are gone) reads them all."""

    def __init__(self, zk: ZooKeeperBridge):
        self.zk = zk
        self._users: dict[str, dict[str, ScramCredential]] = {}  # by sanitized name
        self._current: set[str] = set()  # watched since last read: unchanged
        self._session: int | None = None
        self._refresher = Refresher(zk, self._refresh)
        self._token: trio.lowlevel.TrioToken | None = None
        self.log = logs.get("groupkeeper.users")

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """`user`'s credential for `mechanism` as last read (a lookup, for the event loop)."""
        try:
            return self._users.get(sanitize(user), {}).get(mechanism)
        except ValueError:
            return None

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Reads every user before `started()`."""
        self._token = trio.lowlevel.current_trio_token()
        await self._refresher.run(task_status=task_status)

    def _watch(self, event) -> None:
        """On a kazoo thread: hand the fired path to trio (one function, so kazoo keeps one
        watcher per node however often the node is read)."""
        try:
            self._token.run_sync_soon(self._fired, event.path)
        except trio.RunFinishedError:
            pass

    def _fired(self, path: str | None) -> None:
        if path is not None and path.startswith(USERS + "/"):
            self._current.discard(path[len(USERS) + 1:])
        self._refresher.poke()

    async def _refresh(self) -> None:
        if self.zk.session_id != self._session:  # a new session has no watches
            self._session = self.zk.session_id
            self._current.clear()
        names = set(await self.zk.watched_children(USERS, self._watch) or [])
        for gone in set(self._users) - names:
            del self._users[gone]
        self._current &= names
        limiter = trio.CapacityLimiter(READ_CONCURRENCY)
        async with trio.open_nursery() as nursery:
            for name in names - self._current:
                nursery.start_soon(self._read, name, limiter)

    async def _read(self, name: str, limiter: trio.CapacityLimiter) -> None:
        self._current.add(name)  # before the read: a watch firing from now on reads again
        async with limiter:
            try:
                data, _ = await self.zk.get(f"{USERS}/{name}", watch=self._watch)
            except (NoNodeError, NoAuthError) as exc:
                if isinstance(exc, NoAuthError):  # protected by a digest this instance does not have
                    self.log.warning("user configuration not readable by this instance; ignored", user=name)
                self._users.pop(name, None)
                self._current.discard(name)
                return
            except BaseException:  # read again next time
                self._current.discard(name)
                raise
        if len(data) > MAX_NODE_BYTES:
            self.log.warning("user configuration too large; ignored", user=name, bytes=len(data))
            self._users.pop(name, None)
        else:
            self._users[name] = parse_user_config(data)
