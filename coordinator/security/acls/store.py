"""Kafka's ACLs in ZooKeeper (the layout in `authorizer`): changed by `AclAdmin` in
short-lived CLI processes (synchronous kazoo), followed by the coordinator through `AclStore`
(watches, trio).

Both write and read exactly what ZooKeeper-mode Kafka does, so a Kafka cluster sharing the
ZooKeeper and groupkeeper enforce the same ACLs, whichever tool changed them: a change made
here is announced with Kafka's change notification, which its brokers watch; a change made
by Kafka's tools fires the watches `AclStore` holds on the resource znodes themselves.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import trio
from kazoo.exceptions import BadVersionError, NoAuthError, NodeExistsError, NoNodeError

from ... import logs
from ...store.bridge import Refresher, ZooKeeperBridge, protected_acl
from ...store.blocking import AdminError, ZooKeeperAdmin
from .authorizer import (Acl, Authorizer, PatternType, Resource, ResourceType, change_notification, decode_acls,
                         encode_acls, resource_path, type_path)

MAX_NODE_BYTES = 1024 * 1024  # a resource znode larger than this is not read (and counts as unreadable)
NOTIFICATION_TTL = 15 * 60  # seconds; Kafka's brokers delete change notifications older than this too
READ_CONCURRENCY = 64  # resource znodes read at once
_TYPE_PATHS = [(pattern, resource_type, type_path(pattern, resource_type))
               for pattern, resource_type in itertools.product(PatternType, ResourceType)]


class AclAdmin(ZooKeeperAdmin):
    """Adds, removes and lists ACLs. A change is a compare-and-set on the resource's znode,
    retried until no other writer came between (Kafka's brokers and tools do the same), so
    concurrent changes all land; then Kafka's change notification is written. `digest`:
    (user, password) to authenticate with; the znodes this creates are then writable by that
    user only, readable by all."""

    def __init__(self, hosts: str, timeout: float = 5.0, digest: tuple[str, str] | None = None):
        super().__init__(hosts, timeout, digest, None if digest is None else protected_acl(*digest))

    def add(self, resource: Resource, acls: set[Acl]) -> set[Acl]:
        """Add `acls` to the resource's; its ACLs now."""
        return self._change(resource, lambda current: current | acls)

    def remove(self, resource: Resource, acls: set[Acl] | None = None) -> set[Acl]:
        """Remove `acls` (None: all) from the resource's, deleting its znode when none is
        left; its ACLs now."""
        return self._change(resource, lambda current: set() if acls is None else current - acls, acls is None)

    def list(self, resource_filter: Callable[[Resource], bool] | None = None) -> dict[Resource, set[Acl]]:
        """Every resource with ACLs (those `resource_filter` accepts), with its ACLs."""
        found = {}
        for pattern, resource_type, parent in _TYPE_PATHS:
            try:
                names = self.client.get_children(parent)
            except NoNodeError:
                continue
            for name in names:
                resource = Resource(resource_type, name, pattern)
                if resource_filter is not None and not resource_filter(resource):
                    continue
                try:
                    data, _ = self.client.get(resource_path(resource))
                except NoNodeError:
                    continue
                if acls := decode_acls(data):
                    found[resource] = acls
        return found

    def _change(self, resource: Resource, change: Callable[[set[Acl]], set[Acl]], blind: bool = False) -> set[Acl]:
        """Apply `change` to the resource's ACLs until it lands unchallenged. Entries this
        cannot read are not written back without them: refused, unless `blind` (removing
        all, whatever they are)."""
        check_name(resource)
        path = resource_path(resource)
        while True:
            try:
                data, stat = self.client.get(path)
            except NoNodeError:
                data, stat = None, None
            try:
                current = set() if data is None or blind else decode_acls(data, strict=True)
            except ValueError as exc:
                raise AdminError(f"{path}: {exc}; change it with Kafka's own tools") from None
            new = change(current)
            if new == current and not (blind and stat is not None):
                return new
            try:
                if stat is None:
                    self.client.create(path, encode_acls(new), makepath=True)
                elif new:
                    self.client.set(path, encode_acls(new), version=stat.version)
                else:
                    self.client.delete(path, version=stat.version)
                break
            except (NodeExistsError, BadVersionError, NoNodeError):
                continue  # another writer came between: again, from what it wrote
        self._notify(resource)
        self.audit("acls", {"resource": f"{resource.type.value}:{resource.pattern.value}:{resource.name}",
                            "added": sorted(map(str, new - current)),
                            "removed": ["all"] if blind else sorted(map(str, current - new))})
        return new

    def _notify(self, resource: Resource) -> None:
        """Kafka's change notification, for its brokers; and notifications older than Kafka's
        own expiry deleted, as its brokers would, in case none runs."""
        prefix, data = change_notification(resource)
        self.client.create(prefix, data, sequence=True, makepath=True)
        parent = prefix.rsplit("/", 1)[0]
        expired = (time.time() - NOTIFICATION_TTL) * 1000
        for name in self.client.get_children(parent):
            try:
                stat = self.client.exists(f"{parent}/{name}")
                if stat is not None and stat.ctime < expired:
                    self.client.delete(f"{parent}/{name}")
            except (NoNodeError, NoAuthError):
                pass  # deleted by a broker meanwhile, or one that is not ours to delete


def check_name(resource: Resource) -> None:
    """AdminError unless the resource's name can be a znode's: Kafka refuses a "/" in it,
    ZooKeeper "", "." and "..", and control characters, surrogates (so every character
    beyond U+FFFF, which Java's UTF-16 needs them for) and private-use characters in it."""
    name = resource.name
    if name in ("", ".", "..") or any(c == "/" or c < " " or "\x7f" <= c <= "\x9f" or "\ud800" <= c <= "\uf8ff"
                                      or c >= "\ufff0" for c in name):
        raise AdminError(f"invalid resource name {name!r}: ACLs cannot name it in ZooKeeper")


class AclStore:
    """The coordinator's view of the ACLs: `authorizer`, rebuilt whenever they change. Watches
    every resource type's znode (for resources coming and going) and every resource znode (for
    their ACLs changing); after a reconnection everything is read again."""

    def __init__(self, zk: ZooKeeperBridge, super_users: frozenset[str] = frozenset(),
                 allow_everyone_if_no_acl_found: bool = False):
        self.zk = zk
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.acls: dict[Resource, frozenset[Acl]] = {}
        self.authorizer = Authorizer(self.acls, super_users, allow_everyone_if_no_acl_found)
        self._refresher = Refresher(zk, self._refresh)
        self._watch = None  # one callback for every watch, so that kazoo keeps one per znode
        self.log = logs.get("groupkeeper.acls")

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """`started()` once the ACLs have been read."""
        self._watch = self.zk.watch(self._refresher.poke)
        await self._refresher.run(task_status=task_status)

    async def _refresh(self) -> None:
        acls: dict[Resource, frozenset[Acl]] = {}
        limiter = trio.CapacityLimiter(READ_CONCURRENCY)

        async def read(resource: Resource) -> None:
            async with limiter:
                try:
                    data, stat = await self.zk.get(resource_path(resource), watch=self._watch)
                except NoNodeError:
                    return  # deleted since its type was read: that read's watch fires
            if stat.dataLength > MAX_NODE_BYTES:
                self.log.warning("acl znode too large; treated as unreadable", path=resource_path(resource),
                                 bytes=stat.dataLength)
                acls[resource] = frozenset()
                return
            acls[resource] = frozenset(decode_acls(data))
            if not acls[resource] and data:
                self.log.warning("acl znode holds no acl groupkeeper can read; it denies all but super users",
                                 path=resource_path(resource))

        async with trio.open_nursery() as nursery:
            for pattern, resource_type, parent in _TYPE_PATHS:
                for name in await self.zk.watched_children(parent, self._watch) or []:
                    nursery.start_soon(read, Resource(resource_type, name, pattern))
        if acls != self.acls:
            self.acls = acls
            self.authorizer = Authorizer(acls, self.super_users, self.allow_everyone_if_no_acl_found)
            self.log.info("acls changed", resources=len(acls), acls=sum(len(a) for a in acls.values()))
