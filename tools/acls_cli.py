"""`groupkeeper acls add|remove|list`: Kafka's ACLs in ZooKeeper, with kafka-acls.sh's flags
and output, so that operators' habits and scripts carry over. Changes go straight to
ZooKeeper in Kafka's layout (see `authorizer`), where the coordinator and Kafka's brokers
both watch them. A failed request is one line and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import json
import click

from coordinator.store.blocking import AdminError
from coordinator.security.acls.store import AclAdmin, check_name
from coordinator.security.acls.authorizer import (CLUSTER_NAME, Acl, Operation, PatternType, Permission, Resource,
                                                  ResourceType)
from .zookeeper_options import connected, zookeeper_options

O = Operation
_OPERATIONS = {op.value.lower(): op for op in Operation}
# what each resource type's ACLs may name besides All, as kafka-acls.sh checks it
_SUPPORTED = {ResourceType.TOPIC: {O.READ, O.WRITE, O.CREATE, O.DESCRIBE, O.DELETE, O.ALTER, O.DESCRIBE_CONFIGS,
                                  O.ALTER_CONFIGS},
             ResourceType.GROUP: {O.READ, O.DESCRIBE, O.DELETE},
             ResourceType.CLUSTER: {O.CREATE, O.CLUSTER_ACTION, O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS,
                                    O.IDEMPOTENT_WRITE, O.ALTER, O.DESCRIBE},
             ResourceType.TRANSACTIONAL_ID: {O.DESCRIBE, O.WRITE}}


def _principals(ctx, param, values: tuple[str, ...]) -> list[str]:
    for value in values:
        kind, _, name = value.partition(":")
        if kind != "User" or not name:
            raise click.BadParameter(f"{value!r} is not a principal: use User:NAME (User:* for everyone)")
    return list(values)


def _operations(ctx, param, values: tuple[str, ...]) -> list[Operation]:
    for value in values:
        if value.replace("_", "").lower() not in _OPERATIONS:
            raise click.BadParameter(f"unknown operation {value!r} (one of: {', '.join(op.value for op in Operation)})")
    return [_OPERATIONS[value.replace("_", "").lower()] for value in values]


def _options(*options):
    """A decorator adding `options` in the order given."""
    def decorate(command):
        for option in reversed(options):
            command = option(command)
        return command
    return decorate


def _resource_options(patterns: tuple[str, ...]):
    return _options(
        click.option("--topic", "topics", multiple=True, metavar="TOPIC",
                     help="A topic (repeatable); * is every topic."),
        click.option("--group", "groups", multiple=True, metavar="GROUP",
                     help="A consumer group (repeatable); * is every group."),
        click.option("--cluster", is_flag=True, help="The cluster."),
        click.option("--transactional-id", "transactional_ids", multiple=True, metavar="TRANSACTIONAL_ID",
                     help="A transactional id (repeatable); * is every transactional id."),
        click.option("--resource-pattern-type", "pattern", type=click.Choice(patterns, case_sensitive=False),
                     default="literal", show_default=True,
                     help="prefixed: every resource whose name starts with the one given"
                          + ("; any: literal and prefixed of that name; match: every ACL that applies to it"
                             if "match" in patterns else "") + "."),
        zookeeper_options)


_acl_options = _options(
    click.option("--allow-principal", "allow", multiple=True, callback=_principals, metavar="User:NAME",
                 help="Allow this principal (repeatable)."),
    click.option("--deny-principal", "deny", multiple=True, callback=_principals, metavar="User:NAME",
                 help="Deny this principal (repeatable); a deny wins over every allow."),
    click.option("--allow-host", "allow_hosts", multiple=True, default=["*"], show_default=True,
                 help="Host the allowed principals connect from (repeatable)."),
    click.option("--deny-host", "deny_hosts", multiple=True, default=["*"], show_default=True,
                 help="Host the denied principals connect from (repeatable)."),
    click.option("--operation", "operations", multiple=True, default=["All"], show_default=True,
                 callback=_operations,
                 help="Operation (repeatable): " + ", ".join(op.value for op in Operation) + "."))


@click.group()
def acls() -> None:
    """Kafka's ACLs in ZooKeeper, as kafka-acls.sh manages them."""


@acls.command("add")
@_acl_options
@_resource_options(("literal", "prefixed"))
def acls_add(allow: list[str], deny: list[str], allow_hosts: tuple[str, ...], deny_hosts: tuple[str, ...],
             operations: list[Operation], topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool,
             transactional_ids: tuple[str, ...], pattern: str, hosts: str, digest_file: str | None,
             timeout: float) -> None:
    """Add ACLs to the resources given."""
    resources = _resources(topics, groups, cluster, transactional_ids, pattern)
    entries = _acls(allow, deny, allow_hosts, deny_hosts, operations, resources)
    if not entries:
        raise click.UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    with connected(AclAdmin, hosts, digest_file, timeout) as admin:
        now = {}
        for resource in resources:
            click.echo(_block(f"Adding ACLs for resource `{resource}`", entries))
            now[resource] = admin.add(resource, entries)
    for resource in resources:
        click.echo(_block(f"Current ACLs for resource `{resource}`", now[resource]))


@acls.command("remove")
@_acl_options
@_resource_options(("literal", "prefixed"))
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
def acls_remove(allow: list[str], deny: list[str], allow_hosts: tuple[str, ...], deny_hosts: tuple[str, ...],
                operations: list[Operation], topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool,
                transactional_ids: tuple[str, ...], pattern: str, hosts: str, digest_file: str | None,
                timeout: float, force: bool) -> None:
    """Remove the ACLs given from the resources given; without a principal, all their ACLs."""
    resources = _resources(topics, groups, cluster, transactional_ids, pattern)
    entries = _acls(allow, deny, allow_hosts, deny_hosts, operations, resources)
    with connected(AclAdmin, hosts, digest_file, timeout) as admin:
        now = {}
        for resource in resources:
            if not force:
                click.confirm(f"Are you sure you want to delete all ACLs for resource `{resource}`?" if not entries
                              else _block(f"Are you sure you want to remove these ACLs from resource `{resource}`",
                                          entries), abort=True)
            now[resource] = admin.remove(resource, entries or None)
    for resource in resources:
        click.echo(_block(f"Current ACLs for resource `{resource}`", now[resource]))


@acls.command("list")
@_resource_options(("literal", "prefixed", "any", "match"))
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
def acls_list(topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool, transactional_ids: tuple[str, ...],
              pattern: str, hosts: str, digest_file: str | None, timeout: float, as_json: bool) -> None:
    """List the ACLs of the resources given (of every resource without one)."""
    wanted = _named(topics, groups, cluster, transactional_ids)
    pattern = pattern.lower()
    if cluster and pattern == "prefixed":
        raise click.UsageError("--cluster is a literal resource: not with --resource-pattern-type prefixed")

    def selected(resource: Resource) -> bool:
        if pattern == "match":
            return any(resource.applies_to(t, name) for t, name in wanted)
        return any(resource.type is t and resource.name == name
                   and pattern in ("any", resource.pattern.value) for t, name in wanted)
    with connected(AclAdmin, hosts, digest_file, timeout) as admin:
        found = admin.list(selected if wanted else None)
    listed = sorted(found.items(), key=lambda item: (item[0].type.name, item[0].pattern.name, item[0].name))
    if as_json:
        click.echo(json.dumps([{"resource_type": r.type.name, "name": r.name, "pattern_type": r.pattern.name,
                                "acls": [{"principal": a.principal, "host": a.host, "operation": a.operation.name,
                                          "permission": a.permission.name} for a in sorted(entries, key=str)]}
                               for r, entries in listed]))
        return
    for resource, entries in listed:
        click.echo(_block(f"Current ACLs for resource `{resource}`", entries))


# -- helpers --------------------------------------------------------------------------------

def _named(topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool,
           transactional_ids: tuple[str, ...] = ()) -> list[tuple[ResourceType, str]]:
    return ([(ResourceType.TOPIC, t) for t in topics] + [(ResourceType.GROUP, g) for g in groups]
            + ([(ResourceType.CLUSTER, CLUSTER_NAME)] if cluster else [])
            + [(ResourceType.TRANSACTIONAL_ID, i) for i in transactional_ids])


def _resources(topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool, transactional_ids: tuple[str, ...],
               pattern: str) -> list[Resource]:
    named = _named(topics, groups, cluster, transactional_ids)
    if not named:
        raise click.UsageError("You must provide at least one resource: --topic <topic> or --cluster or "
                               "--group <group> or --transactional-id <transactional-id>")
    pattern_type = PatternType(pattern.lower())
    if cluster and pattern_type is not PatternType.LITERAL:
        raise click.UsageError("--cluster is a literal resource: not with --resource-pattern-type prefixed")
    resources = list(dict.fromkeys(Resource(t, name, pattern_type) for t, name in named))
    for resource in resources:
        try:
            check_name(resource)
        except AdminError as exc:
            raise click.UsageError(str(exc)) from None
    return resources


def _acls(allow: list[str], deny: list[str], allow_hosts: tuple[str, ...], deny_hosts: tuple[str, ...],
          operations: list[Operation], resources: list[Resource]) -> set[Acl]:
    for resource in resources:
        refused = [op for op in operations if op is not Operation.ALL and op not in _SUPPORTED[resource.type]]
        if refused:
            raise click.UsageError(
                f"ResourceType {resource.type.name} only supports operations "
                f"{', '.join(op.value for op in Operation if op in _SUPPORTED[resource.type])}, All "
                f"(not {refused[0].value})")
    if "" in allow_hosts + deny_hosts:
        raise click.UsageError("a host cannot be empty: give an address, or * for every host")
    return ({Acl(p, h, op, Permission.ALLOW) for p in allow for h in allow_hosts for op in operations}
            | {Acl(p, h, op, Permission.DENY) for p in deny for h in deny_hosts for op in operations})


def _block(title: str, entries) -> str:
    """kafka-acls.sh's: a title, then each ACL on a line of its own."""
    return "\n".join([f"{title}:"] + [f"\t{acl}" for acl in sorted(entries, key=str)]) + "\n"


