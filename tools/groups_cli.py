"""`groupkeeper groups ...`: consumer groups over the Kafka protocol, in the words and
columns of Kafka's kafka-consumer-groups.sh, so that operators' habits and scripts carry
over. A failed request is one line on stderr and exit status 1 (bad arguments are click's
usage errors, status 2), never a traceback.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime

import click

from protocol import ErrorCode, error_name

from .kafka_admin import CLASSIC, CONSUMER, EARLIEST, LATEST, AdminError, GroupsAdmin, Member, Node, TopicPartition
from coordinator.config import ConfigError, load_config
from coordinator.groups.consumer_group import ConsumerGroupState
from coordinator.groups.state import GroupState
from coordinator.listeners import parse_listeners

E = ErrorCode
# the states of both group types (classic, then the consumer protocol's), as Kafka 4 takes them
STATES = {s.value.lower(): s.value for s in [*GroupState, *ConsumerGroupState]}
TYPES = {CLASSIC: "Classic", CONSUMER: "Consumer"}  # ListGroups v5's types, as kafka-consumer-groups.sh prints them
INACTIVE = (GroupState.EMPTY.value, GroupState.DEAD.value)
REBALANCING = (GroupState.PREPARING_REBALANCE.value, GroupState.COMPLETING_REBALANCE.value,
               ConsumerGroupState.ASSIGNING.value, ConsumerGroupState.RECONCILING.value)


def connection_options(command):
    """--bootstrap-server, --config and --timeout; the command gets a `GroupsAdmin` for them
    (it connects on first use) and its failures become one line."""
    @click.option("--bootstrap-server", "bootstrap", metavar="HOST:PORT",
                  help="A coordinator to ask; default: --config's PLAINTEXT listener (as advertised).")
    @click.option("--config", "config_path", type=click.Path(dir_okay=False),
                  help="The coordinator's configuration (default: the built-in defaults).")
    @click.option("--timeout", "timeout_ms", default=5000, show_default=True, type=click.IntRange(1, 3_600_000),
                  help="Milliseconds to wait for each connection and answer.")
    @functools.wraps(command)
    def wrapper(bootstrap: str | None, config_path: str | None, timeout_ms: int, **kwargs):
        if bootstrap is None:
            try:
                config = load_config(config_path)
            except ConfigError as exc:
                raise click.ClickException(str(exc)) from None
            bootstrap = _plaintext_address(config)
        try:
            with GroupsAdmin(bootstrap, timeout_ms / 1000) as admin:
                return command(admin, **kwargs)
        except AdminError as exc:
            raise click.ClickException(str(exc)) from None
    return wrapper


def _plaintext_address(config: dict) -> str:
    """HOST:PORT of the configuration's first PLAINTEXT listener, as it advertises it."""
    try:
        bound, told = parse_listeners(config["listeners"], config["advertised_listeners"],
                                      config["listener_security_protocol_map"])
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    for listener in bound:
        if listener.protocol == "PLAINTEXT":
            address = told.get(listener.name, listener)
            return f"[{address.host}]:{address.port}" if ":" in address.host else f"{address.host}:{address.port}"
    raise click.ClickException("the configuration has no PLAINTEXT listener: name a coordinator with --bootstrap-server")


@click.group()
def groups() -> None:
    """Consumer groups over the Kafka protocol, as kafka-consumer-groups.sh shows them."""


def _table(headers: list[str], rows: list[list]) -> str:
    """Left-aligned columns as wide as their widest cell; None shows as "-"."""
    cells = [headers] + [["-" if v is None or v == "" else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(" ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


# -- list ---------------------------------------------------------------------------------

@groups.command("list")
@click.option("--state", "states", is_flag=False, flag_value="", default=None, metavar="[STATE,...]",
              callback=lambda ctx, param, value: None if value is None else _states(value),
              help="Show each group's state; given states (e.g. Stable,Empty), only groups in them.")
@click.option("--type", "types", is_flag=False, flag_value="", default=None, metavar="[TYPE,...]",
              callback=lambda ctx, param, value: None if value is None else _types(value),
              help="Show each group's type; given types (classic, consumer), only groups of them "
                   "(needs ListGroups v5).")
@click.option("--json", "as_json", is_flag=True, help="Groups with their state, protocol type and type, as JSON.")
@connection_options
def groups_list(admin: GroupsAdmin, states: set[str] | None, types: set[str] | None, as_json: bool) -> None:
    """List the groups of every coordinator instance. With --type and/or --state, a table:
    GROUP, then TYPE, then STATE, as kafka-consumer-groups.sh --list prints them."""
    listed = [g for g in admin.list_groups(typed=bool(types))
              if (not states or (g.state or "").lower() in states) and (not types or g.type in types)]
    if as_json:
        click.echo(json.dumps([{"group": g.group, "state": g.state, "protocol_type": g.protocol_type, "type": g.type}
                               for g in listed]))
    elif states is None and types is None:
        for g in listed:
            click.echo(g.group)
    else:
        headers = ["GROUP"] + (["TYPE"] if types is not None else []) + (["STATE"] if states is not None else [])
        click.echo(_table(headers, [[g.group] + ([TYPES.get(g.type, g.type)] if types is not None else [])
                                    + ([g.state] if states is not None else []) for g in listed]))


def _states(text: str) -> set[str]:
    """The lower-cased states of "Stable,Empty" (empty: every state)."""
    wanted = {s.strip().lower() for s in text.split(",") if s.strip()}
    unknown = sorted(wanted - set(STATES))
    if unknown:
        raise click.BadParameter(f"unknown state {unknown[0]!r} (known: {', '.join(STATES.values())})",
                                 param_hint="'--state'")
    return wanted


def _types(text: str) -> set[str]:
    """The lower-cased types of "classic,consumer" (empty: every type)."""
    wanted = {t.strip().lower() for t in text.split(",") if t.strip()}
    unknown = sorted(wanted - set(TYPES))
    if unknown:
        raise click.BadParameter(f"unknown type {unknown[0]!r} (known: {', '.join(TYPES)})", param_hint="'--type'")
    return wanted


# -- describe -----------------------------------------------------------------------------

@groups.command("describe")
@click.argument("group")
@click.option("--offsets", "view", flag_value="offsets", default=True,
              help="Each partition's committed offset, log end and lag, with its consumer (default).")
@click.option("--members", "view", flag_value="members", help="The group's members.")
@click.option("--state", "view", flag_value="state", help="The group's coordinator, strategy and state.")
@click.option("--verbose", is_flag=True, help="With --members: each member's partitions, and for consumer groups "
              "its epoch and target assignment; with --state: the group's epochs (JSON always has them).")
@click.option("--json", "as_json", is_flag=True, help="As JSON, with the group's coordinator.")
@connection_options
def groups_describe(admin: GroupsAdmin, group: str, view: str, verbose: bool, as_json: bool) -> None:
    """Describe GROUP, a classic group (DescribeGroups) or a consumer-protocol one
    (ConsumerGroupDescribe). LOG-END-OFFSET and LAG come from the partition leaders
    (ListOffsets): "-" when no leader is known or reachable."""
    if verbose and view == "offsets":
        raise click.UsageError("--verbose goes with --members or --state")
    coordinator, described = admin.describe(group)
    state = described.state
    if state == GroupState.DEAD.value:
        raise click.ClickException(f"Consumer group '{group}' does not exist.")
    consumer = described.type == CONSUMER
    members = [_member(m) for m in described.members]
    document = {"group": group, "type": described.type,
                "coordinator": {"id": coordinator.id, "host": coordinator.host, "port": coordinator.port},
                "state": state, "group_epoch": described.group_epoch,
                "target_assignment_epoch": described.assignment_epoch}
    if view == "offsets":
        rows = _offset_rows(admin, group, members)
        if as_json:
            click.echo(json.dumps({**document, "offsets": rows}))
            return
        _notice(group, state)
        if rows:
            click.echo(_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                               "CONSUMER-ID", "HOST", "CLIENT-ID"],
                              [[group, *r.values()] for r in rows]))
    elif view == "members":
        if as_json:
            click.echo(json.dumps({**document, "members": [
                {**{k: v for k, v in x.items() if k != "assignment"},
                 "partitions": sum(map(len, x["assignment"].values())), "assignment": x["assignment"]}
                for x in members]}))
            return
        _notice(group, state)
        if members:
            headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
            if verbose:  # a consumer group's in Kafka 4's columns; a classic group's as before
                headers += (["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"] if consumer
                            else ["ASSIGNMENT"])
            click.echo(_table(headers, [
                [group, x["consumer_id"], x["host"], x["client_id"], sum(map(len, x["assignment"].values()))]
                + (([x["member_epoch"], _epoch_assignment_text(x["assignment"]), described.assignment_epoch,
                     _epoch_assignment_text(x["target_assignment"])] if consumer
                    else [_assignment_text(x["assignment"])]) if verbose else [])
                for x in members]))
    else:
        strategy = described.strategy or None
        if as_json:
            click.echo(json.dumps({**document, "assignment_strategy": strategy,
                                   "protocol_type": described.protocol_type or None, "member_count": len(members)}))
            return
        headers = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
        row = [group, f"{coordinator.host}:{coordinator.port} ({coordinator.id})", strategy, state]
        if verbose:  # Kafka 4's --state --verbose: "-" for a classic group, which has no epochs
            headers += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
            row += [described.group_epoch, described.assignment_epoch]
        click.echo(_table(headers + ["#MEMBERS"], [row + [len(members)]]))


def _member(member: Member) -> dict:
    """A described member as plain data. Its epoch and target assignment are a consumer
    group member's (None in a classic group)."""
    return {"consumer_id": member.member_id, "group_instance_id": member.instance_id,
            "host": member.host, "client_id": member.client_id, "assignment": member.assignment,
            "member_epoch": member.epoch, "target_assignment": member.target}


def _assignment_text(assignment: dict[str, list[int]]) -> str:
    """Kafka's form before 4.0 (its ASSIGNMENT column): topic(0,1,2),other(3); "-" for none."""
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in sorted(assignment.items()) if ps) or "-"


def _epoch_assignment_text(assignment: dict[str, list[int]] | None) -> str:
    """Kafka 4's form (its CURRENT-ASSIGNMENT and TARGET-ASSIGNMENT columns):
    topic:0,1,2;other:3; "-" for none."""
    return ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted((assignment or {}).items()) if ps) or "-"


def _offset_rows(admin: GroupsAdmin, group: str, members: list[dict]) -> list[dict]:
    """One row per partition that is committed or assigned, then one per member that has
    no partitions, as kafka-consumer-groups.sh lists them."""
    committed = admin.committed(group)
    owners = {(t, p): x for x in members for t, ps in x["assignment"].items() for p in ps}
    partitions = sorted(set(committed) | set(owners))
    log_end = {}
    if partitions:
        cluster = admin.cluster(sorted({t for t, _ in partitions}))
        log_end = {tp: o for tp, o in admin.log_offsets(
            {tp: cluster.leaders.get(tp) for tp in partitions}, LATEST).items() if o >= 0}
    rows = []
    for tp in partitions:
        current, end, owner = committed.get(tp), log_end.get(tp), owners.get(tp, {})
        rows.append({"topic": tp[0], "partition": tp[1], "current_offset": current, "log_end_offset": end,
                     "lag": None if current is None or end is None else max(end - current, 0),
                     "consumer_id": owner.get("consumer_id"), "host": owner.get("host"),
                     "client_id": owner.get("client_id")})
    for x in members:
        if not any(x["assignment"].values()):
            rows.append({"topic": None, "partition": None, "current_offset": None, "log_end_offset": None,
                         "lag": None, "consumer_id": x["consumer_id"], "host": x["host"], "client_id": x["client_id"]})
    return rows


def _notice(group: str, state: str) -> None:
    """Kafka's remarks before a table, on stderr so that the table stays parseable (a
    consumer group is rebalancing while Assigning or Reconciling)."""
    if state == GroupState.EMPTY.value:
        click.echo(f"Consumer group '{group}' has no active members.", err=True)
    elif state in REBALANCING:
        click.echo(f"Warning: Consumer group '{group}' is rebalancing.", err=True)


# -- reset-offsets ------------------------------------------------------------------------

@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, required=True, metavar="TOPIC[:P,...]",
              callback=lambda ctx, param, value: [_topic_partitions(text) for text in value],
              help="A topic, all its partitions or those listed; may be repeated.")
@click.option("--to-offset", type=click.IntRange(0), metavar="N",
              help="This offset (within the log, where it is known).")
@click.option("--shift-by", type=int, metavar="N", help="The committed offset plus N (N may be negative); kept within "
              "the log where the leaders answer, and at least 0 where they do not.")
@click.option("--to-earliest", is_flag=True, help="The log start (asks the partition leaders).")
@click.option("--to-latest", is_flag=True, help="The log end (asks the partition leaders).")
@click.option("--to-datetime", "timestamp", metavar="YYYY-MM-DDTHH:mm:SS.sss",
              callback=lambda ctx, param, value: None if value is None else _timestamp_ms(value),
              help="The first offset at or after this time (local time unless it has an offset or Z; "
                   "asks the partition leaders).")
@click.option("--dry-run", "mode", flag_value="dry-run", default=True, help="Only show the new offsets (default).")
@click.option("--execute", "mode", flag_value="execute", help="Commit the new offsets.")
@connection_options
def groups_reset_offsets(admin: GroupsAdmin, group: str, topics: list[tuple[str, list[int]]],
                         to_offset: int | None, shift_by: int | None, to_earliest: bool, to_latest: bool,
                         timestamp: int | None, mode: str) -> None:
    """Reset the committed offsets of GROUP, which must have no active members."""
    given = [value for value in (to_offset, shift_by, to_earliest or None, to_latest or None, timestamp)
             if value is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --to-offset, --shift-by, --to-earliest, --to-latest, --to-datetime")
    _, described = admin.describe(group)
    if described.state not in INACTIVE:
        raise click.ClickException(f"Assignments can only be reset if the group '{group}' is inactive, "
                                   f"but the current state is {described.state}.")
    cluster = admin.cluster(sorted({t for t, _ in topics}))
    if cluster.unknown:
        raise click.ClickException(f"topic '{cluster.unknown[0]}' does not exist")
    partitions = []
    for topic, chosen in topics:
        known = cluster.partitions(topic)
        for p in chosen or known:
            if p not in known:
                raise click.ClickException(f"topic '{topic}' has no partition {p} (it has {len(known)})")
            partitions.append((topic, p))
    partitions = sorted(set(partitions))
    leaders = {tp: cluster.leaders.get(tp) for tp in partitions}

    if to_offset is not None or shift_by is not None:
        targets = {tp: to_offset for tp in partitions}
        if shift_by is not None:
            committed = admin.committed(group)
            missing = [tp for tp in partitions if tp not in committed]
            if missing:
                raise click.ClickException(f"cannot shift the offset of {_name(missing[0])}: "
                                           "it has no committed offset")
            targets = {tp: committed[tp] + shift_by for tp in partitions}
        start, end = admin.log_offsets(leaders, EARLIEST), admin.log_offsets(leaders, LATEST)
        new = {tp: min(max(o, start[tp]), end[tp]) if tp in start and tp in end else max(o, 0)
               for tp, o in targets.items()}
    elif to_earliest or to_latest:
        new = _looked_up(admin, leaders, EARLIEST if to_earliest else LATEST,
                         "earliest" if to_earliest else "latest")
    else:
        found = _looked_up(admin, leaders, timestamp, "offset for --to-datetime")
        past_the_end = {tp: leaders[tp] for tp, o in found.items() if o < 0}  # no record that late
        new = {**found, **_looked_up(admin, past_the_end, LATEST, "latest")}

    if mode == "execute":
        errors = {tp: e for tp, e in admin.commit(group, new).items() if e != E.NONE}
        if errors:
            tp, error = min(errors.items())
            raise click.ClickException(f"committing the new offsets of group '{group}' failed: "
                                       f"{_name(tp)}: {error_name(error)}")
    click.echo(_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                      [[group, t, p, o] for (t, p), o in sorted(new.items())]))


def _looked_up(admin: GroupsAdmin, leaders: dict[TopicPartition, Node | None], timestamp: int,
               what: str) -> dict[TopicPartition, int]:
    found = admin.log_offsets(leaders, timestamp)
    missing = sorted(set(leaders) - set(found))
    if missing:
        raise click.ClickException(f"cannot look up the {what} of {_name(missing[0])}: "
                                   "no reachable leader answered for it")
    return found


def _topic_partitions(text: str) -> tuple[str, list[int]]:
    """'orders' or 'orders:0,2'."""
    topic, _, listed = text.partition(":")
    try:
        partitions = [int(p) for p in listed.split(",")] if listed else []
    except ValueError:
        raise click.BadParameter(f"{text!r} is not TOPIC or TOPIC:P,P,...", param_hint="'--topic'") from None
    if not topic or any(p < 0 for p in partitions):
        raise click.BadParameter(f"{text!r} is not TOPIC or TOPIC:P,P,...", param_hint="'--topic'")
    return topic, partitions


def _timestamp_ms(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not YYYY-MM-DDTHH:mm:SS.sss", param_hint="'--to-datetime'") from None
    return int(moment.timestamp() * 1000)  # a naive time is local, as Kafka reads it


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


# -- delete -------------------------------------------------------------------------------

@groups.command("delete")
@click.argument("group")
@connection_options
def groups_delete(admin: GroupsAdmin, group: str) -> None:
    """Delete GROUP and its committed offsets; it must have no active members."""
    error = admin.delete(group)
    if error == E.GROUP_ID_NOT_FOUND:
        raise click.ClickException(f"Consumer group '{group}' does not exist.")
    if error == E.NON_EMPTY_GROUP:
        raise click.ClickException(f"Deletion of consumer group '{group}' failed: the group is not empty "
                                   "(NON_EMPTY_GROUP).")
    if error != E.NONE:
        raise click.ClickException(f"Deletion of consumer group '{group}' failed: {error_name(error)}.")
    click.echo(f"Deletion of requested consumer groups ('{group}') was successful.")
