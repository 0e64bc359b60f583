"""A consumer group stored as per-member records (issue 30): what each change writes, and the
group a new owner rebuilds from what was written. Pure: the records are applied to a dict as
PartitionStore applies them (tests/support/stored_groups.py); time is a number passed in."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.assignors import CONSUMER_GROUP_ASSIGNORS
from coordinator.groups.consumer_group import ConsumerGroup, ConsumerGroupConfig
from coordinator.groups.snapshot import (assemble_consumer, consumer_changes, consumer_header, consumer_member,
                                         restore_consumer)
from protocol import ErrorCode as E

CONFIG = ConsumerGroupConfig(session_timeout=10.0)


def consumer_snapshot(g: ConsumerGroup) -> dict:
    """The whole group as one record, as a new owner assembles it from every record stored."""
    return assemble_consumer(consumer_header(g), {m.member_id: consumer_member(m) for m in g.members.values()})


def group(partitions: int = 6) -> ConsumerGroup:
    ids = (f"m{n}" for n in itertools.count(1))
    return ConsumerGroup("g", CONFIG, CONSUMER_GROUP_ASSIGNORS, {"orders": partitions, "audit": 2},
                         new_member_id=lambda: next(ids))


class Stored:
    """The records as ZooKeeper would hold them after each write, and what each write carried."""

    def __init__(self):
        self.header: dict | None = None
        self.members: dict[str, dict] = {}
        self.last: tuple[bool, set[str]] = (False, set())

    def write(self, g: ConsumerGroup) -> None:
        header, members = consumer_changes(g)
        self.last = (header is not None, set(members))
        if header is not None:
            self.header = header
        for member_id, record in members.items():
            if record is None:
                self.members.pop(member_id, None)
            else:
                self.members[member_id] = record

    def loaded(self, now: float = 0.0) -> ConsumerGroup:
        data = assemble_consumer(self.header, self.members)
        return restore_consumer("g", data, now, CONFIG, CONSUMER_GROUP_ASSIGNORS, {"orders": 6, "audit": 2})


def join(g: ConsumerGroup, now: float, topics=("orders",), **extra):
    return g.heartbeat(now, member_id="", epoch=0, rebalance_timeout_ms=30_000, subscribed=list(topics), owned=[],
                       **extra)


def beat(g: ConsumerGroup, member_id: str, now: float, owned=None, **extra):
    member = g.members[member_id]
    held = member.sent if owned is None else owned
    return g.heartbeat(now, member_id=member_id, epoch=member.epoch, owned=sorted(held or ()), **extra)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(["join", "static", "leave", "static-leave", "beat", "lag",
                                                 "subscribe", "timeout", "grow"]), st.integers(0, 7)),
                      max_size=40))
def test_what_was_written_after_every_change_is_the_group_a_new_owner_rebuilds(steps):
    g, stored, now = group(), Stored(), 0.0
    for action, pick in steps:
        now += 0.5
        ids = sorted(g.members)
        chosen = ids[pick % len(ids)] if ids else None
        epoch_before, assignment_before = g.group_epoch, g.assignment_epoch
        if action == "join" or chosen is None:
            join(g, now)
        elif action == "static":
            join(g, now, instance_id=f"i{pick % 3}")  # a new incarnation of a static member, or refused
        elif action == "leave":
            g.heartbeat(now, member_id=chosen, epoch=-1)
        elif action == "static-leave":
            g.heartbeat(now, member_id=chosen, epoch=-2)
        elif action == "beat" and g.members[chosen].epoch > 0:
            beat(g, chosen, now)
        elif action == "lag" and g.members[chosen].epoch > 0:  # still reports what it was told to give up
            member = g.members[chosen]
            beat(g, chosen, now, owned=member.assigned | member.revoking)
        elif action == "subscribe" and g.members[chosen].epoch > 0:
            beat(g, chosen, now, subscribed=["orders", "audit"][:1 + pick % 2])
        elif action == "timeout":
            now += 11.0
            for other in ids:
                if other != chosen and g.members[other].epoch > 0:
                    beat(g, other, now)
            g.expire(now)
        elif action == "grow":
            g.partitions["orders"] = 6 + pick % 2
            g.topics_changed()
            g.partitions["orders"] = 6
            g.topics_changed()
        stored.write(g)
        assert assemble_consumer(stored.header, stored.members) == consumer_snapshot(g)
        assert consumer_snapshot(stored.loaded(now)) == consumer_snapshot(g)
        header, members = stored.last
        if (g.group_epoch, g.assignment_epoch) == (epoch_before, assignment_before) and action in ("beat", "lag"):
            # a reconciliation step: that member's record alone, the group's not at all
            assert not header and members <= {chosen}, stored.last
        if header is False and not members:
            assert stored.last == (False, set())  # nothing changed: nothing written


def test_a_steady_group_writes_nothing_and_a_step_writes_one_member_of_any_group_size():
    for size in (2, 40):
        g, stored = group(partitions=2 * size), Stored()
        for n in range(size):
            join(g, n)
        stored.write(g)
        for _ in range(4):  # everyone reconciles, each step written as it comes
            for member_id in sorted(g.members):
                beat(g, member_id, 100.0)
                stored.write(g)
                assert not stored.last[0] and stored.last[1] <= {member_id}
        steady = [beat(g, member_id, 101.0) for member_id in sorted(g.members)]
        assert all(r.error == E.NONE for r in steady)
        stored.write(g)
        assert stored.last == (False, set())
        # one member's record: the same size whatever the group's
        assert len(str(consumer_member(g.members["m1"]))) < 400


def test_a_failed_write_gives_its_changes_back_to_the_next():
    g, stored = group(), Stored()
    join(g, 0.0)
    join(g, 0.0)
    header, members = consumer_changes(g)
    assert header is not None and set(members) == {"m1", "m2"}
    g.give_back(header is not None, set(members))  # the write failed
    beat(g, "m1", 1.0)
    stored.write(g)
    assert stored.last[0] and stored.last[1] == {"m1", "m2"}
    assert consumer_snapshot(stored.loaded()) == consumer_snapshot(g)


def test_a_version_1_record_is_rewritten_whole_at_the_next_change_and_orphans_go():
    g, stored = group(), Stored()
    join(g, 0.0)
    join(g, 0.0)
    beat(g, "m1", 1.0)
    old = consumer_snapshot(g) | {"version": 1}  # as issue 17's coordinator wrote it: one record
    old.pop("targets")
    loaded = restore_consumer("g", old, 2.0, CONFIG, CONSUMER_GROUP_ASSIGNORS, {"orders": 6, "audit": 2})
    assert consumer_snapshot(loaded) == consumer_snapshot(g)
    header, members = consumer_changes(loaded)
    assert header == consumer_header(g) and set(members) == {"m1", "m2"}

    # a member record the group's record does not name (written before a record that never came)
    stored.header = consumer_header(g)
    stored.members = {m.member_id: consumer_member(m) for m in g.members.values()} | {"stray": {"id": "stray"}}
    data = assemble_consumer(stored.header, stored.members)
    assert data["orphans"] == ["stray"] and [m["id"] for m in data["members"]] == ["m1", "m2"]
    again = stored.loaded()
    assert consumer_changes(again) == (None, {"stray": None})


def test_a_member_whose_own_record_could_not_be_written_in_one_multi_is_refused():
    g = group()
    many = [f"topic-{n:05}" for n in range(7000)]  # 7,000 names: 6 bytes a character could pass 192 KiB
    assert join(g, 0.0, topics=many).error == E.GROUP_MAX_SIZE_REACHED and not g.members
    joined = join(g, 0.0, topics=many[:1000])
    assert joined.error == E.NONE
    assert beat(g, joined.member_id, 1.0, subscribed=many).error == E.GROUP_MAX_SIZE_REACHED
    assert g.members[joined.member_id].subscribed == tuple(many[:1000])
