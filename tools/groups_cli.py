"""`groupkeeper groups ...`: consumer groups over the Kafka protocol, in the words, columns
and flags of Kafka's kafka-consumer-groups.sh, so that operators' habits and scripts carry
over. A failed request is one line on stderr and exit status 1 (bad arguments are click's
usage errors, status 2), never a traceback. A command about several groups (`--group`
repeated, `--all-groups`) says what failed for each, goes on with the others, and exits 1
if any failed.
"""

from __future__ import annotations

import csv
import functools
import json
import re
import sys
import time
from datetime import datetime

import click

from protocol import ErrorCode, error_name

from . import client_config
from .tables import table
from .kafka_admin import (CLASSIC, CONSUMER, EARLIEST, LATEST, AdminError, GroupRefused, GroupsAdmin, Member, Node,
                          TopicPartition, shown)
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
# kafka-consumer-groups.sh's words (Kafka 4.4) when reset-offsets is given neither --dry-run nor
# --execute, but for the release named: Kafka's "In version 5.0" is Kafka's 5.0, not groupkeeper's
NO_ACTION_WARNING = ("WARN: No action will be performed as the --execute option is missing. In a future major "
                     "release, this command will require either --dry-run or --execute to be specified. You should "
                     "add the --dry-run option explicitly if you are scripting this command and want to keep the "
                     "current default behavior without prompting.")


def connection_options(command):
    """--bootstrap-server, --command-config, --config and --timeout; the command gets a
    `GroupsAdmin` for them (it connects on first use) and its failures become one line."""
    @click.option("--bootstrap-server", "bootstrap", metavar="HOST:PORT[,HOST:PORT...]",
                  help="Coordinators to bootstrap from (the first that answers); default: --config's listener "
                       "of --command-config's security.protocol (PLAINTEXT), as advertised.")
    @click.option("--command-config", "command_config", type=click.Path(dir_okay=False), metavar="FILE",
                  help="Kafka client properties: security.protocol, sasl.mechanism, sasl.jaas.config (or "
                       "sasl.username and sasl.password), PEM certificates (docs/operations.md lists them).")
    @click.option("--config", "config_path", type=click.Path(dir_okay=False),
                  help="The coordinator's configuration (default: the built-in defaults).")
    @click.option("--timeout", "timeout_ms", default=5000, show_default=True, type=click.IntRange(1, 3_600_000),
                  help="Milliseconds to wait for each connection and answer.")
    @functools.wraps(command)
    def wrapper(bootstrap: str | None, command_config: str | None, config_path: str | None, timeout_ms: int,
                **kwargs):
        try:
            settings = client_config.load(command_config) if command_config else client_config.plaintext()
        except client_config.ConfigProblem as exc:
            raise click.ClickException(f"--command-config {exc}") from None
        for warning in settings.warnings:
            click.echo(f"WARN: --command-config {command_config}: {warning}", err=True)
        if bootstrap is None:
            try:
                config = load_config(config_path)
            except ConfigError as exc:
                raise click.ClickException(str(exc)) from None
            bootstrap = _listener_address(config, settings.security.protocol)
        try:
            with GroupsAdmin(bootstrap, timeout_ms / 1000, settings.security) as admin:
                return command(admin, **kwargs)
        except AdminError as exc:
            raise click.ClickException(str(exc)) from None
    return wrapper


def _listener_address(config: dict, protocol: str) -> str:
    """HOST:PORT of the configuration's first listener speaking `protocol`, as it advertises it."""
    try:
        bound, told = parse_listeners(config["listeners"], config["advertised_listeners"],
                                      config["listener_security_protocol_map"])
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    for listener in bound:
        if listener.protocol == protocol:
            address = told.get(listener.name, listener)
            return f"[{address.host}]:{address.port}" if ":" in address.host else f"{address.host}:{address.port}"
    raise click.ClickException(f"the configuration has no {protocol} listener: name a coordinator with "
                               "--bootstrap-server")


def group_options(command):
    """GROUP (the argument, optional), --group (repeatable) and --all-groups, as
    kafka-consumer-groups.sh takes them; the command gets `chosen`, a `Chosen`."""
    @click.argument("group", required=False)
    @click.option("--group", "named", multiple=True, metavar="GROUP",
                  help="A group (repeatable); the first may also be given as the argument.")
    @click.option("--all-groups", is_flag=True, help="Every group of every coordinator instance.")
    @functools.wraps(command)
    def wrapper(group: str | None, named: tuple[str, ...], all_groups: bool, **kwargs):
        names = list(dict.fromkeys(([group] if group is not None else []) + list(named)))
        if all_groups and names:
            raise click.UsageError("give groups or --all-groups, not both")
        if not all_groups and not names:
            raise click.UsageError("name a group: GROUP, --group GROUP (repeatable) or --all-groups")
        return command(chosen=Chosen(names, all_groups), **kwargs)
    return wrapper


class Chosen:
    """The groups a command is about: those named, or every group (listed when first asked)."""

    def __init__(self, names: list[str], every: bool):
        self.names, self.every = names, every

    @property
    def one(self) -> bool:
        """One group named: its errors are the command's, and --export leaves out the group."""
        return not self.every and len(self.names) == 1

    def groups(self, admin: GroupsAdmin) -> list[str]:
        return [g.group for g in admin.list_groups()] if self.every else self.names


class Outcome:
    """What went wrong for which group, each said on stderr as it happens, in Kafka's
    `Error: ...` form; `close()` exits 1 if anything did."""

    def __init__(self):
        self.failed = False

    def error(self, message: str) -> None:
        self.failed = True
        click.echo(f"Error: {message}", err=True)

    def close(self) -> None:
        if self.failed:
            sys.exit(1)


@click.group()
def groups() -> None:
    """Consumer groups over the Kafka protocol, as kafka-consumer-groups.sh shows them."""


_table = table  # tools/tables.py: the CLIs' one table printer


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

OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID"]


@groups.command("describe")
@group_options
@click.option("--offsets", is_flag=True,
              help="Each partition's committed offset, log end and lag, with its consumer (the default view).")
@click.option("--members", is_flag=True, help="The group's members.")
@click.option("--state", is_flag=True, help="The group's coordinator, strategy and state.")
@click.option("--verbose", is_flag=True, help="With --offsets: each committed offset's LEADER-EPOCH; with --members: "
              "each member's epoch and partitions, and the group's target epoch and the member's target "
              "assignment (a consumer group's); with --state: the group's epochs (JSON always has them).")
@click.option("--json", "as_json", is_flag=True, help="As JSON, with the group's coordinator (for several groups, "
              "a list).")
@connection_options
def groups_describe(admin: GroupsAdmin, chosen: Chosen, offsets: bool, members: bool, state: bool, verbose: bool,
                    as_json: bool) -> None:
    """Describe groups, classic ones (DescribeGroups) and consumer-protocol ones
    (ConsumerGroupDescribe). LOG-END-OFFSET and LAG come from the partition leaders
    (ListOffsets): "-" when no leader is known or reachable."""
    if offsets + members + state > 1:
        raise click.UsageError("--offsets, --members and --state are different views: give at most one")
    view = "members" if members else "state" if state else "offsets"
    outcome, documents, first = Outcome(), [], True
    for group in chosen.groups(admin):
        try:
            document, text = _describe(admin, group, view, verbose, as_json)
        except GroupRefused as exc:
            if chosen.one:
                raise
            outcome.error(str(exc))
            continue
        if as_json:
            documents.append(document)
        elif text is not None:
            if not first:
                click.echo()  # tables apart, as Kafka's are
            click.echo(text)
            first = False
    if as_json:
        click.echo(json.dumps(documents[0] if chosen.one else documents))
    outcome.close()


def _describe(admin: GroupsAdmin, group: str, view: str, verbose: bool, as_json: bool) -> tuple[dict, str | None]:
    """One group's document (for --json) and its table (None: nothing to show); its notice
    (no active members, rebalancing) is said on stderr. GroupRefused if it cannot be described."""
    coordinator, described = admin.describe(group)
    state = described.state
    if state == GroupState.DEAD.value:
        raise GroupRefused(f"Consumer group {shown(group)} does not exist.")
    members = [_member(m) for m in described.members]
    document = {"group": group, "type": described.type,
                "coordinator": {"id": coordinator.id, "host": coordinator.host, "port": coordinator.port},
                "state": state, "group_epoch": described.group_epoch,
                "target_assignment_epoch": described.assignment_epoch}
    if view == "offsets":
        rows = _offset_rows(admin, group, members)
        if as_json:
            return {**document, "offsets": rows}, None
        _notice(group, state)
        if not rows:
            return document, None
        if verbose:  # Kafka 4's --offsets --verbose: the committed offset's leader epoch after the partition
            return document, _table(OFFSETS_HEADER[:3] + ["LEADER-EPOCH"] + OFFSETS_HEADER[3:], [
                [group, r["topic"], r["partition"], r["leader_epoch"]]
                + [r[k] for k in ("current_offset", "log_end_offset", "lag", "consumer_id", "host", "client_id")]
                for r in rows])
        return document, _table(OFFSETS_HEADER, [
            [group] + [r[k] for k in ("topic", "partition", "current_offset", "log_end_offset", "lag", "consumer_id",
                                      "host", "client_id")] for r in rows])
    if view == "members":
        if as_json:
            return {**document, "members": [
                {**{k: v for k, v in x.items() if k != "assignment"},
                 "partitions": sum(map(len, x["assignment"].values())), "assignment": x["assignment"]}
                for x in members]}, None
        _notice(group, state)
        # Kafka 4's columns, the header even when no member is left: GROUP-INSTANCE-ID when a
        # member has one; with --verbose the epochs and assignments ("-" for what a classic group
        # has not), and UPGRADED while a consumer group has members of both protocols
        static = any(x["group_instance_id"] for x in members)
        migrating = {x["upgraded"] for x in members} >= {True, False}
        headers = (["GROUP", "CONSUMER-ID"] + (["GROUP-INSTANCE-ID"] if static else [])
                   + ["HOST", "CLIENT-ID", "#PARTITIONS"])
        if verbose:
            headers += ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
            headers += ["UPGRADED"] if migrating else []
        return document, _table(headers, [
            [group, x["consumer_id"]] + ([x["group_instance_id"]] if static else [])
            + [x["host"], x["client_id"], sum(map(len, x["assignment"].values()))]
            + ([x["member_epoch"], _epoch_assignment_text(x["assignment"]), described.assignment_epoch,
                _epoch_assignment_text(x["target_assignment"])] if verbose else [])
            + ([_upgraded_text(x["upgraded"])] if verbose and migrating else [])
            for x in members])
    strategy = described.strategy or None
    if as_json:
        return {**document, "assignment_strategy": strategy, "protocol_type": described.protocol_type or None,
                "member_count": len(members), "status": described.status}, None
    headers = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
    row = [group, f"{coordinator.host}:{coordinator.port} ({coordinator.id})", strategy, state]
    if verbose:  # Kafka 4's --state --verbose: "-" for a classic group, which has no epochs
        headers += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        row += [described.group_epoch, described.assignment_epoch]
    # STATUS: groupkeeper's, by Burrow's rules (OK, WARN, STOP, STALL, REWIND; "-" unjudged)
    return document, _table(headers + ["#MEMBERS", "STATUS"], [row + [len(members), described.status or "-"]])


def _member(member: Member) -> dict:
    """A described member as plain data. Its epoch, target assignment and whether it speaks
    the consumer protocol (`upgraded`) are a consumer group member's (None in a classic group)."""
    return {"consumer_id": member.member_id, "group_instance_id": member.instance_id,
            "host": member.host, "client_id": member.client_id, "assignment": member.assignment,
            "member_epoch": member.epoch, "target_assignment": member.target, "upgraded": member.upgraded}


def _upgraded_text(upgraded: bool | None) -> str | None:
    """Kafka's UPGRADED column: Java's true and false."""
    return None if upgraded is None else str(upgraded).lower()


def _epoch_assignment_text(assignment: dict[str, list[int]] | None) -> str:
    """Kafka 4's form (its CURRENT-ASSIGNMENT and TARGET-ASSIGNMENT columns):
    topic:0,1,2;other:3; "-" for none."""
    return ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted((assignment or {}).items()) if ps) or "-"


def _offset_rows(admin: GroupsAdmin, group: str, members: list[dict]) -> list[dict]:
    """One row per partition that is committed or assigned, as kafka-consumer-groups.sh lists
    them (a member without partitions has none); LAG is the log end less the committed offset,
    negative when the commit is past the log's end, as Kafka shows it."""
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
        found, end, owner = committed.get(tp), log_end.get(tp), owners.get(tp, {})
        current = found.offset if found else None
        rows.append({"topic": tp[0], "partition": tp[1], "current_offset": current,
                     "leader_epoch": found.leader_epoch if found else None, "log_end_offset": end,
                     "lag": None if current is None or end is None else end - current,
                     "consumer_id": owner.get("consumer_id"), "host": owner.get("host"),
                     "client_id": owner.get("client_id")})
    return rows


def _notice(group: str, state: str) -> None:
    """Kafka's remarks before a table, on stderr so that the table stays parseable (a
    consumer group is rebalancing while Assigning or Reconciling)."""
    if state == GroupState.EMPTY.value:
        click.echo(f"Consumer group {shown(group)} has no active members.", err=True)
    elif state in REBALANCING:
        click.echo(f"Warning: Consumer group {shown(group)} is rebalancing.", err=True)


# -- reset-offsets ------------------------------------------------------------------------

@groups.command("reset-offsets")
@group_options
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,...]",
              callback=lambda ctx, param, value: [_topic_partitions(text) for text in value],
              help="A topic, all its partitions or those listed; may be repeated.")
@click.option("--all-topics", is_flag=True, help="Every partition the group has a committed offset for.")
@click.option("--to-offset", type=click.IntRange(0), metavar="N",
              help="This offset (within the log, where it is known).")
@click.option("--shift-by", type=int, metavar="N", help="The committed offset plus N (N may be negative); kept within "
              "the log where the leaders answer, and at least 0 where they do not.")
@click.option("--to-earliest", is_flag=True, help="The log start (asks the partition leaders).")
@click.option("--to-latest", is_flag=True, help="The log end (asks the partition leaders).")
@click.option("--to-current", is_flag=True, help="The committed offset (the log end where none is committed).")
@click.option("--to-datetime", "timestamp", metavar="YYYY-MM-DDTHH:mm:SS.sss",
              callback=lambda ctx, param, value: None if value is None else _timestamp_ms(value),
              help="The first offset at or after this time (local time unless it has an offset or Z; "
                   "asks the partition leaders).")
@click.option("--by-duration", "duration", metavar="PnDTnHnMnS",
              callback=lambda ctx, param, value: None if value is None else _duration_ms(value),
              help="The first offset at or after this long ago (an ISO 8601 duration, as Java's Duration "
                   "reads it: P1D, PT2H30M, PT0.5S).")
@click.option("--from-file", "plan_path", type=click.Path(dir_okay=False), metavar="CSV",
              help="The offsets in this file, as --export writes it: topic,partition,offset lines for one "
                   "--group, group,topic,partition,offset lines otherwise.")
@click.option("--dry-run", is_flag=True, help="Only show the new offsets (the default, with a warning).")
@click.option("--execute", is_flag=True, help="Commit the new offsets.")
@click.option("--export", is_flag=True, help="The new offsets as CSV, as --from-file reads them, instead of a table.")
@connection_options
def groups_reset_offsets(admin: GroupsAdmin, chosen: Chosen, topics: list[tuple[str, list[int]]], all_topics: bool,
                         to_offset: int | None, shift_by: int | None, to_earliest: bool, to_latest: bool,
                         to_current: bool, timestamp: int | None, duration: int | None, plan_path: str | None,
                         dry_run: bool, execute: bool, export: bool) -> None:
    """Reset the committed offsets of groups, which must have no active members."""
    given = [value for value in (to_offset, shift_by, to_earliest or None, to_latest or None, to_current or None,
                                 timestamp, duration, plan_path) if value is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --to-offset, --shift-by, --to-earliest, --to-latest, "
                               "--to-current, --to-datetime, --by-duration, --from-file")
    if plan_path is not None and (topics or all_topics):
        raise click.UsageError("--from-file takes its partitions from the file: give neither --topic nor --all-topics")
    if plan_path is None and bool(topics) == all_topics:
        raise click.UsageError("give the partitions to reset: --topic (repeatable) or --all-topics")
    if dry_run and execute:
        raise click.UsageError("give --dry-run or --execute, not both")
    if not dry_run and not execute:
        click.echo(NO_ACTION_WARNING, err=True)
    plan = None if plan_path is None else _read_plan(plan_path, chosen)
    if duration is not None:
        timestamp = int(time.time() * 1000) - duration

    # every group's new offsets first, then (--execute) committed: a group that cannot be
    # reset does not leave the others half done
    outcome, resets = Outcome(), {}
    for group in chosen.groups(admin):
        try:
            new = _new_offsets(admin, group, topics, all_topics, plan, to_offset, shift_by, to_earliest, to_latest,
                               to_current, timestamp, "--to-datetime" if duration is None else "--by-duration")
        except (GroupRefused, _Refused) as exc:
            if chosen.one:
                raise click.ClickException(str(exc)) from None
            outcome.error(str(exc))
            continue
        if new is not None:
            resets[group] = new
    if execute:
        for group, new in list(resets.items()):
            errors = {tp: e for tp, e in admin.commit(group, new).items() if e != E.NONE}
            if errors:
                tp, error = min(errors.items())
                message = f"committing the new offsets of group {shown(group)} failed: {_name(tp)}: {error_name(error)}"
                if chosen.one:
                    raise click.ClickException(message)
                outcome.error(message)
                del resets[group]
    rows = [[group, t, p, o] for group, new in resets.items() for (t, p), o in sorted(new.items())]
    if export:  # Kafka's CSV: no header; the group left out when one --group is named
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerows(row[1:] if chosen.one else row for row in rows)
    elif resets or not outcome.failed:
        click.echo(_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows))
    if not execute and resets:
        click.echo("Dry run: nothing was committed (give --execute to commit these offsets).", err=True)
    outcome.close()


class _Refused(Exception):
    """One group that cannot be reset, said in one line."""


def _new_offsets(admin: GroupsAdmin, group: str, topics: list[tuple[str, list[int]]], all_topics: bool,
                 plan: dict[str, dict[TopicPartition, int]] | None, to_offset: int | None, shift_by: int | None,
                 to_earliest: bool, to_latest: bool, to_current: bool, timestamp: int | None,
                 time_flag: str) -> dict[TopicPartition, int] | None:
    """`group`'s new offsets (None: the plan has none for it, said on stderr); _Refused or
    GroupRefused when the group cannot be reset."""
    _, described = admin.describe(group)
    if described.state not in INACTIVE:
        raise _Refused(f"Assignments can only be reset if the group {shown(group)} is inactive, "
                       f"but the current state is {described.state}.")
    committed = None
    if plan is not None:
        if group not in plan:
            raise _Refused(f"No reset plan for group {shown(group)} found in the file.")
        wanted = [(t, [p for (pt, p) in plan[group] if pt == t]) for t in sorted({t for t, _ in plan[group]})]
    elif all_topics:
        committed = admin.committed(group)
        wanted = [(t, [p for (pt, p) in committed if pt == t]) for t in sorted({t for t, _ in committed})]
    else:
        wanted = topics
    cluster = admin.cluster(sorted({t for t, _ in wanted}))
    if cluster.unknown:
        raise _Refused(f"topic '{cluster.unknown[0]}' does not exist")
    partitions = []
    for topic, listed in wanted:
        known = cluster.partitions(topic)
        for p in listed or known:
            if p not in known:
                raise _Refused(f"topic '{topic}' has no partition {p} (it has {len(known)})")
            partitions.append((topic, p))
    partitions = sorted(set(partitions))
    leaders = {tp: cluster.leaders.get(tp) for tp in partitions}

    if plan is not None:  # as given, as Kafka takes a file's offsets
        return {tp: plan[group][tp] for tp in partitions}
    if to_offset is not None or shift_by is not None:
        targets = {tp: to_offset for tp in partitions}
        if shift_by is not None:
            committed = admin.committed(group) if committed is None else committed
            missing = [tp for tp in partitions if tp not in committed]
            if missing:
                raise _Refused(f"cannot shift the offset of {_name(missing[0])}: it has no committed offset")
            targets = {tp: committed[tp].offset + shift_by for tp in partitions}
        start, end = admin.log_offsets(leaders, EARLIEST), admin.log_offsets(leaders, LATEST)
        return {tp: _within(tp, o, start.get(tp), end.get(tp)) for tp, o in targets.items()}
    if to_earliest or to_latest:
        return _looked_up(admin, leaders, EARLIEST if to_earliest else LATEST, "earliest" if to_earliest else "latest")
    if to_current:
        committed = admin.committed(group) if committed is None else committed
        current = {tp: committed[tp].offset for tp in partitions if tp in committed}
        return {**current, **_looked_up(admin, {tp: leaders[tp] for tp in partitions if tp not in current}, LATEST,
                                        "latest")}
    found = _looked_up(admin, leaders, timestamp, f"offset for {time_flag}")
    past_the_end = {tp: leaders[tp] for tp, o in found.items() if o < 0}  # no record that late
    return {**found, **_looked_up(admin, past_the_end, LATEST, "latest")}


def _within(tp: TopicPartition, offset: int, start: int | None, end: int | None) -> int:
    """`offset` kept within the log where its bounds are known (at least 0 where they are not),
    with Kafka's warning on stderr when it is moved."""
    if start is None or end is None:
        return max(offset, 0)
    if offset > end:
        click.echo(f"WARN: New offset ({offset}) is higher than latest offset for topic partition {_name(tp)}. "
                   f"Value will be set to {end}.", err=True)
        return end
    if offset < start:
        click.echo(f"WARN: New offset ({offset}) is lower than earliest offset for topic partition {_name(tp)}. "
                   f"Value will be set to {start}.", err=True)
        return start
    return offset


def _looked_up(admin: GroupsAdmin, leaders: dict[TopicPartition, Node | None], timestamp: int,
               what: str) -> dict[TopicPartition, int]:
    found = admin.log_offsets(leaders, timestamp) if leaders else {}
    missing = sorted(set(leaders) - set(found))
    if missing:
        raise _Refused(f"cannot look up the {what} of {_name(missing[0])}: no reachable leader answered for it")
    return found


def _read_plan(path: str, chosen: Chosen) -> dict[str, dict[TopicPartition, int]]:
    """--from-file: Kafka's CSV, topic,partition,offset lines when one --group is named (and
    the first line has three fields), group,topic,partition,offset lines otherwise."""
    try:
        with open(path, newline="") as file:
            lines = [(n, row) for n, row in enumerate(csv.reader(file), 1) if any(field.strip() for field in row)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise click.BadParameter(f"{path}: {getattr(exc, 'strerror', None) or exc}", param_hint="'--from-file'")
    grouped = not (chosen.one and lines and len(lines[0][1]) == 3)
    form = "group,topic,partition,offset" if grouped else "topic,partition,offset"
    plan: dict[str, dict[TopicPartition, int]] = {}
    for n, row in lines:
        fields = [field.strip() for field in row]
        if len(fields) != (4 if grouped else 3) or not all(fields[:-2]) or not all(
                f.isdigit() for f in fields[-2:]):
            hint = " (topic,partition,offset lines are for one --group)" if grouped and len(fields) == 3 else ""
            raise click.BadParameter(f"{path} line {n}: {','.join(row)!r} is not {form}{hint}",
                                     param_hint="'--from-file'")
        group = fields[0] if grouped else chosen.names[0]
        plan.setdefault(group, {})[(fields[-3], int(fields[-2]))] = int(fields[-1])
    return plan


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


# Java's Duration.parse, which Kafka's --by-duration uses: days, hours, minutes and seconds
# (no years or months: their length varies), each signed, seconds with a fraction. A
# general ISO 8601 parser (isodate) would take P1Y and P1M, which Kafka refuses.
_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?=[-+]?\d)(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                       r"(?:([-+]?)(\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def _duration_ms(text: str) -> int:
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.group(i) for i in (2, 3, 4, 6)):
        raise click.BadParameter(f"{text!r} is not an ISO 8601 duration such as P1DT2H30M or PT0.5S",
                                 param_hint="'--by-duration'")
    sign, days, hours, minutes, seconds_sign, seconds, fraction = match.groups()
    ms = (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000 + int(minutes or 0) * 60_000
          + (-1 if seconds_sign == "-" else 1) * (int(seconds or 0) * 1000 + int((fraction or "").ljust(3, "0")[:3])))
    return -ms if sign == "-" else ms


def _name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


# -- delete -------------------------------------------------------------------------------

@groups.command("delete")
@group_options
@connection_options
def groups_delete(admin: GroupsAdmin, chosen: Chosen) -> None:
    """Delete groups and their committed offsets; they must have no active members."""
    deleted, failed = [], {}
    for group in chosen.groups(admin):
        try:
            error = admin.delete(group)
        except GroupRefused as exc:
            failed[group] = str(exc)
            continue
        if error == E.NONE:
            deleted.append(group)
        elif error == E.GROUP_ID_NOT_FOUND:
            failed[group] = f"Consumer group {shown(group)} does not exist."
        elif error == E.NON_EMPTY_GROUP:
            failed[group] = (f"Deletion of consumer group {shown(group)} failed: the group is not empty "
                             "(NON_EMPTY_GROUP).")
        else:
            failed[group] = f"Deletion of consumer group {shown(group)} failed: {error_name(error)}."
    if chosen.one and failed:
        raise click.ClickException(failed[chosen.names[0]])
    outcome = Outcome()
    for message in failed.values():
        outcome.error(message)
    if deleted and not failed:
        click.echo(f"Deletion of requested consumer groups ({', '.join(map(shown, deleted))}) was successful.")
    elif deleted:
        click.echo(f"These consumer groups were deleted successfully: {', '.join(map(shown, deleted))}")
    outcome.close()


# -- delete-offsets -----------------------------------------------------------------------

@groups.command("delete-offsets")
@click.argument("group", required=False)
@click.option("--group", "named", metavar="GROUP", help="The group (or give it as the argument).")
@click.option("--topic", "topics", multiple=True, required=True, metavar="TOPIC[:P,...]",
              help="A topic, or some of its partitions (repeatable); a topic alone: all its partitions.")
@connection_options
def groups_delete_offsets(admin: GroupsAdmin, group: str | None, named: str | None, topics: tuple[str, ...]) -> None:
    """Delete a group's committed offsets of some partitions (OffsetDelete), as
    kafka-consumer-groups.sh --delete-offsets does: refused for the topics the group's
    members consume (GROUP_SUBSCRIBED_TO_TOPIC)."""
    if group and named and group != named:
        raise click.UsageError("give the group once: GROUP or --group")
    group = group or named
    if not group:
        raise click.UsageError("name the group: GROUP or --group GROUP")
    asked: dict[str, list[int]] = {}
    for text in topics:
        topic, partitions = _topic_partitions(text)
        asked.setdefault(topic, []).extend(partitions)
    whole = [topic for topic, partitions in asked.items() if not partitions]
    if whole:  # a topic alone: its partitions, as the cluster has them
        cluster = admin.cluster(whole)
        for topic in whole:
            asked[topic] = cluster.partitions(topic)
            if not asked[topic]:
                raise click.ClickException(f"Topic {topic!r} does not exist or has no partitions.")
    try:
        error, results = admin.delete_offsets(group, {t: sorted(set(ps)) for t, ps in asked.items()})
    except GroupRefused as exc:
        raise click.ClickException(str(exc)) from None
    if error == E.GROUP_ID_NOT_FOUND:
        raise click.ClickException(f"Deleting offsets of a consumer group {shown(group)} failed because the group "
                                   "does not exist.")
    if error == E.NON_EMPTY_GROUP:
        raise click.ClickException(f"Deleting offsets of a consumer group {shown(group)} is forbidden if the group "
                                   "is not empty.")
    if error != E.NONE:
        raise click.ClickException(f"Deleting offsets of a consumer group {shown(group)} failed: {error_name(error)}.")
    failed = {tp: e for tp, e in results.items() if e != E.NONE}
    if failed:  # Kafka's words, on stderr as this CLI's errors are
        click.echo("Error: Encountered some partition-level error, see the follow-up details.", err=True)
    else:  # Kafka names the group unquoted here
        click.echo(f"Request succeeded for deleting offsets from group {group if group.isprintable() else shown(group)}.")
        click.echo()
    click.echo(_table(["TOPIC", "PARTITION", "STATUS"], [
        [t, p, "Successful" if e == E.NONE else f"Error: {error_name(e)}"] for (t, p), e in sorted(results.items())]))
    if failed:
        sys.exit(1)
