"""Partition assignment strategies, computed by the coordinator itself.

A strategy is a pure function: the members (id, subscribed topics, owned partitions, user
data) and the partition count of each topic in, an assignment per member out. Strategies
are registered by the name clients announce in JoinGroup (partition.assignment.strategy).

Imports nothing else of the coordinator: strategies are pure.
"""

from __future__ import annotations

from .base import Assigned, Assignor, MemberSubscription
from .range import RangeAssignor, StickyRangeAssignor
from .roundrobin import RoundRobinAssignor
from .sticky import CooperativeStickyAssignor, StickyAssignor, UniformAssignor

BUILT_IN: dict[str, Assignor] = {a.name: a for a in (
    RangeAssignor(), RoundRobinAssignor(), StickyAssignor(), CooperativeStickyAssignor(), UniformAssignor())}
# the server-side assignors of consumer-protocol groups (KIP-848), both sticky; uniform is the default
CONSUMER_GROUP_ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), StickyRangeAssignor())}

__all__ = ["CONSUMER_GROUP_ASSIGNORS", "Assigned", "Assignor", "BUILT_IN", "CooperativeStickyAssignor",
           "MemberSubscription", "RangeAssignor", "RoundRobinAssignor", "StickyAssignor", "StickyRangeAssignor",
           "UniformAssignor"]
