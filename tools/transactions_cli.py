"""`groupkeeper transactions ...`: the transactional offsets pending their transaction's outcome
in every group-partition (store/pending.py), beside what is recorded of each transactional id
(store/transactions.py): the group coordinator's side of what `kafka-transactions.sh` shows of
the transaction coordinator's. Synchronous kazoo, in a short-lived CLI process; every error is
one line and exit 1."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import click
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from coordinator.store import layout
from coordinator.store.pending import decode as decode_pending, parse_node
from coordinator.store.transactions import decode as decode_record
from coordinator.store.blocking import ZooKeeperAdmin
from .tables import table
from .zookeeper_options import connected, zookeeper_options


@dataclass
class PendingRow:
    partition: int
    group: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    since_ms: int
    offsets: dict[tuple[str, int], tuple]  # (topic, partition) -> (offset, leader epoch, metadata, written ms)
    recorded: str  # the transactional id's recorded state: begun, committed, aborted, or "-"
    # where its end is looked for in the brokers' __consumer_offsets partition of the group (-1: not known)
    markers_from: int = -1

    def as_json(self, now_ms: int) -> dict:
        return {"group": self.group, "transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "group_partition": self.partition,
                "pending_since_ms": self.since_ms, "age_s": round((now_ms - self.since_ms) / 1000, 1),
                "recorded": self.recorded, "markers_from": self.markers_from,
                "offsets": [{"topic": t, "partition": p, "offset": o[0], "leader_epoch": o[1], "metadata": o[2]}
                            for (t, p), o in sorted(self.offsets.items())]}


def read_pending(client: KazooClient) -> list[PendingRow]:
    """Every pending transaction of every group-partition, oldest first."""
    try:
        partitions = layout.decode(client.get(layout.config_path())[0])["group_partitions"]
    except NoNodeError:
        return []
    rows, records = [], {}
    for n in range(partitions):
        folder = layout.pending_path(n)
        try:
            names = client.get_children(folder)
        except NoNodeError:
            continue
        for name in names:
            parsed = parse_node(name)
            if parsed is None:
                continue
            group, key = parsed
            try:
                data, stat = client.get(f"{folder}/{name}")
            except NoNodeError:
                continue  # resolved meanwhile
            txn = decode_pending(key, data, stat.mzxid)
            if key.transactional_id not in records:
                try:
                    record = decode_record(key.transactional_id,
                                           client.get(layout.transaction_path(key.transactional_id))[0])
                except NoNodeError:
                    record = None
                records[key.transactional_id] = record.state if record is not None else "-"
            rows.append(PendingRow(n, group, key.transactional_id, key.producer_id, key.producer_epoch,
                                   txn.since_ms, txn.offsets, records[key.transactional_id], txn.marker_from))
    return sorted(rows, key=lambda r: (r.since_ms, r.group, r.transactional_id))


@click.group()
def transactions() -> None:
    """Transactional offsets pending their transaction's outcome (exactly-once applications)."""


@transactions.command("list")
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
@zookeeper_options
def transactions_list(as_json: bool, hosts: str, digest_file: str | None, timeout: float) -> None:
    """Every pending transaction: its group, transactional id, producer id and epoch, how many
    partitions, how long it has been pending, and what is recorded of its transactional id."""
    with connected(ZooKeeperAdmin, hosts, digest_file, timeout) as admin:
        rows = read_pending(admin.client)
    now_ms = int(time.time() * 1000)
    if as_json:
        click.echo(json.dumps([r.as_json(now_ms) for r in rows]))
        return
    click.echo(table(["GROUP", "TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "PARTITIONS", "AGE-S", "RECORDED"], [
        [r.group, r.transactional_id, r.producer_id, r.producer_epoch, len(r.offsets),
         f"{(now_ms - r.since_ms) / 1000:.1f}", r.recorded] for r in rows]))


@transactions.command("describe")
@click.option("--group", help="Only this group's.")
@click.option("--transactional-id", help="Only this transactional id's.")
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
@zookeeper_options
def transactions_describe(group: str | None, transactional_id: str | None, as_json: bool, hosts: str,
                          digest_file: str | None, timeout: float) -> None:
    """The offsets pending, partition by partition, of a group's or a transactional id's
    transactions."""
    if group is None and transactional_id is None:
        raise click.UsageError("name --group or --transactional-id (or both)")
    with connected(ZooKeeperAdmin, hosts, digest_file, timeout) as admin:
        rows = [r for r in read_pending(admin.client) if (group is None or r.group == group)
                and (transactional_id is None or r.transactional_id == transactional_id)]
    now_ms = int(time.time() * 1000)
    if as_json:
        click.echo(json.dumps([r.as_json(now_ms) for r in rows]))
        return
    if not rows:
        click.echo("No transactional offsets pending.")
        return
    click.echo(table(["GROUP", "TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "TOPIC", "PARTITION", "OFFSET",
                      "AGE-S", "RECORDED"], [
        [r.group, r.transactional_id, r.producer_id, r.producer_epoch, t, p, o[0],
         f"{(now_ms - r.since_ms) / 1000:.1f}", r.recorded]
        for r in rows for (t, p), o in sorted(r.offsets.items())]))
