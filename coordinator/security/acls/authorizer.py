"""Kafka's ACLs: what they say (`Resource`, `Acl`), how ZooKeeper-mode Kafka keeps them,
and who they let do what (`Authorizer`, with the semantics of Kafka's AclAuthorizer).

Kafka's layout, shared with its brokers and kafka-acls.sh:

```
/kafka-acl/<type>/<name>                 literal resources (the cluster: kafka-cluster)
/kafka-acl-extended/prefixed/<type>/<p>  prefixed resources
    (<type>: Topic, Group, Cluster or TransactionalId, `ResourceType`'s values)
    {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}
/kafka-acl-changes/acl_changes_<seq>                    "TOPIC:<name>": a literal resource changed
/kafka-acl-extended-changes/acl_changes_<seq>           {"version":1,"resourceType":"TOPIC","name":...,
                                                         "patternType":"PREFIXED"}: a prefixed one
```

Every enum's value is the name Kafka writes in ZooKeeper and its member name the one
kafka-acls.sh prints. Pure: no I/O.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass


class ResourceType(enum.Enum):
    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"
    TRANSACTIONAL_ID = "TransactionalId"


class PatternType(enum.Enum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class Operation(enum.Enum):
    ALL = "All"
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"
    IDEMPOTENT_WRITE = "IdempotentWrite"


class Permission(enum.Enum):
    ALLOW = "Allow"
    DENY = "Deny"


CLUSTER_NAME = "kafka-cluster"  # the one cluster resource
WILDCARD = "*"  # a literal resource of this name applies to every name; as a host, every host
WILDCARD_PRINCIPAL = "User:*"
LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"

# An ALLOW of these operations allows the key too (Kafka's AclAuthorizer); a DENY denies
# only what it names.
_IMPLIED_BY = {Operation.DESCRIBE: (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER),
               Operation.DESCRIBE_CONFIGS: (Operation.ALTER_CONFIGS,)}


@dataclass(frozen=True)
class Resource:
    type: ResourceType
    name: str
    pattern: PatternType = PatternType.LITERAL

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this resource's ACLs apply to the resource `name` of `resource_type`."""
        if resource_type is not self.type:
            return False
        if self.pattern is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name in (name, WILDCARD)

    def __str__(self) -> str:
        """As kafka-acls.sh prints it."""
        return f"ResourcePattern(resourceType={self.type.name}, name={self.name}, patternType={self.pattern.name})"


@dataclass(frozen=True)
class Acl:
    principal: str  # "User:alice", or WILDCARD_PRINCIPAL
    host: str  # an address, or WILDCARD
    operation: Operation
    permission: Permission

    def __str__(self) -> str:
        """As kafka-acls.sh prints it."""
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission.name})")


# -- ZooKeeper ------------------------------------------------------------------------------

def type_path(pattern: PatternType, resource_type: ResourceType) -> str:
    """The znode whose children are the resources of that type and pattern."""
    return f"{LITERAL_ROOT if pattern is PatternType.LITERAL else PREFIXED_ROOT}/{resource_type.value}"


def resource_path(resource: Resource) -> str:
    return f"{type_path(resource.pattern, resource.type)}/{resource.name}"


def change_notification(resource: Resource) -> tuple[str, bytes]:
    """The sequential znode to create (path prefix, data) after changing `resource`'s ACLs,
    as Kafka's brokers write it and watch for it."""
    if resource.pattern is PatternType.LITERAL:
        return f"{LITERAL_CHANGES}/{CHANGE_PREFIX}", f"{resource.type.name}:{resource.name}".encode()
    return f"{EXTENDED_CHANGES}/{CHANGE_PREFIX}", _json({
        "version": 1, "resourceType": resource.type.name, "name": resource.name,
        "patternType": resource.pattern.name})


def encode_acls(acls: set[Acl] | frozenset[Acl]) -> bytes:
    return _json({"version": 1, "acls": [
        {"principal": a.principal, "permissionType": a.permission.value, "operation": a.operation.value,
         "host": a.host} for a in sorted(acls, key=_order)]})


def decode_acls(data: bytes, *, strict: bool = False) -> set[Acl]:
    """The ACLs of a resource znode. Entries that cannot be read (another version, an
    operation from a newer Kafka, garbage) are skipped; with `strict`, ValueError instead,
    for whoever would write the rest back and so lose them."""
    if not data:
        return set()  # Kafka reads an empty znode as no ACLs
    try:
        record = json.loads(data)
        entries = record["acls"] if record["version"] == 1 else None
    except (ValueError, KeyError, TypeError, RecursionError):
        entries = None
    if not isinstance(entries, list):
        if strict:
            raise ValueError("not ACLs in Kafka's format (version 1)")
        return set()
    acls = set()
    for entry in entries:
        try:
            principal, host = entry["principal"], entry["host"]
            if not (isinstance(principal, str) and ":" in principal and isinstance(host, str)):
                raise TypeError
            acls.add(Acl(principal, host, Operation(entry["operation"]), Permission(entry["permissionType"])))
        except (ValueError, KeyError, TypeError):
            if strict:
                raise ValueError(f"an ACL entry groupkeeper cannot read: {json.dumps(entry)[:200]}") from None
    return acls


def _json(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _order(acl: Acl) -> tuple:
    return acl.principal, acl.host, acl.operation.value, acl.permission.value


# -- decisions ------------------------------------------------------------------------------

class Authorizer:
    """Kafka's AclAuthorizer over one immutable set of ACLs (a new one is built on every
    change, so decisions are cached). For a request on resource (type, name) the ACLs that
    apply are those of the literal resource `name`, the literal `*` and every prefixed
    resource whose prefix starts `name`. Super users may do anything; otherwise a matching
    DENY refuses, and a matching ALLOW (directly, or through an implied operation) permits.

    A resource in `acls` counts as having ACLs even when its set is empty: that is how an
    unreadable znode is passed, and ACLs nobody can read must not open a resource to everyone
    (Kafka keeps entries it cannot read, which then match nothing)."""

    CACHED = 10_000  # decisions remembered

    def __init__(self, acls: Mapping[Resource, frozenset[Acl]], super_users: frozenset[str] = frozenset(),
                 allow_everyone_if_no_acl_found: bool = False):
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._literal: dict[tuple[ResourceType, str], frozenset[Acl]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[Acl]]] = {t: {} for t in ResourceType}
        for resource, entries in acls.items():
            if resource.pattern is PatternType.LITERAL:
                self._literal[resource.type, resource.name] = frozenset(entries)
            else:
                self._prefixed[resource.type][resource.name] = frozenset(entries)
        # a name's prefixed resources are found by looking up its prefixes of these lengths
        self._prefix_lengths = {t: sorted({len(p) for p in by_prefix}) for t, by_prefix in self._prefixed.items()}
        self._decided: dict[tuple, bool] = {}

    def allows(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
               name: str) -> bool:
        """Whether `principal` connected from `host` may do `operation` on the resource."""
        key = (principal, host, operation, resource_type, name)
        decision = self._decided.get(key)
        if decision is None:
            decision = self._decide(*key)
            if len(self._decided) >= self.CACHED:
                del self._decided[next(iter(self._decided))]  # the oldest
            self._decided[key] = decision
        return decision

    def _decide(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                name: str) -> bool:
        if principal in self.super_users:
            return True
        applying = self._applying(resource_type, name)
        if not applying:
            return self.allow_everyone_if_no_acl_found
        denying = (operation, Operation.ALL)
        allowing = denying + _IMPLIED_BY.get(operation, ())
        found_allow = False
        for entries in applying:
            for acl in entries:
                if acl.principal not in (principal, WILDCARD_PRINCIPAL) or acl.host not in (host, WILDCARD):
                    continue
                if acl.permission is Permission.DENY:
                    if acl.operation in denying:
                        return False
                elif acl.operation in allowing:
                    found_allow = True
        return found_allow

    def _applying(self, resource_type: ResourceType, name: str) -> list[frozenset[Acl]]:
        applying = [entries for key in {(resource_type, name), (resource_type, WILDCARD)}
                    if (entries := self._literal.get(key)) is not None]
        by_prefix = self._prefixed[resource_type]
        for length in self._prefix_lengths[resource_type]:
            if length > len(name):
                break
            if (entries := by_prefix.get(name[:length])) is not None:
                applying.append(entries)
        return applying
