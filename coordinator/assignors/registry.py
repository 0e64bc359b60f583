"""The strategies a coordinator can compute: the built-ins, those installed under the
`groupkeeper.assignors` entry-point group, and those named in the configuration
(`[assignors] name = "module:Class"`); later ones win. Anything that cannot be loaded stops
start-up with a message naming it."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from . import BUILT_IN, CONSUMER_GROUP_ASSIGNORS
from .base import Assignor

ENTRY_POINT_GROUP = "groupkeeper.assignors"


class AssignorError(Exception):
    pass


def load_assignors(configured: dict[str, str]) -> dict[str, Assignor]:
    assignors = dict(BUILT_IN)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            factory = point.load()
        except Exception as exc:  # any import-time failure of a plug-in, reported by name
            raise AssignorError(f"assignor {point.name!r} (entry point {point.value}): {exc}") from None
        assignors[point.name] = _instance(point.name, point.value, factory)
    for name, target in configured.items():
        assignors[name] = _instance(name, target, _resolve(name, target))
    return assignors


def _resolve(name: str, target: str):
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise AssignorError(f"assignor {name!r}: {target!r} is not \"module:Class\"")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise AssignorError(f"assignor {name!r}: cannot import {module_name}: {exc}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise AssignorError(f"assignor {name!r}: {module_name} has no {attribute}") from None


def _instance(name: str, target: str, factory) -> Assignor:
    try:
        assignor = factory() if isinstance(factory, type) else factory
    except Exception as exc:
        raise AssignorError(f"assignor {name!r}: {target}() failed: {exc}") from None
    if not callable(getattr(assignor, "assign", None)):
        raise AssignorError(f"assignor {name!r}: {target} has no assign(members, partitions)")
    return assignor


def consumer_group_assignors(names: list[str], loaded: dict[str, Assignor]) -> dict[str, Assignor]:
    """The server-side assignors consumer-protocol groups may name (Kafka's
    group.consumer.assignors): KIP-848's `uniform` and `range`, or a strategy registered as
    above; the first is the default."""
    if not names:
        raise AssignorError("group_consumer_assignors: at least one assignor is needed")
    chosen = {}
    for name in names:
        assignor = CONSUMER_GROUP_ASSIGNORS.get(name) or (loaded.get(name) if name not in BUILT_IN else None)
        if assignor is None:
            raise AssignorError(f"group_consumer_assignors: {name!r} is not a consumer group assignor (built in: "
                                f"{', '.join(CONSUMER_GROUP_ASSIGNORS)}; or one registered under [assignors])")
        chosen[name] = assignor
    return chosen
