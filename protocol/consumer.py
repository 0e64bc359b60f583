"""The consumer protocol's Subscription and Assignment: opaque bytes to the group protocol,
read by the coordinator to compute assignments itself.

Each payload begins with its int16 version. A version newer than ours is read as our
newest: later versions only append fields, so the known prefix is exact and the rest
is ignored, as Kafka's own ConsumerProtocol does.
"""

from __future__ import annotations

import struct
from typing import Any

from .codec import decoder, encoder
from .exceptions import DecodeError
from .schema import Message
from .schemas import ASSIGNMENT, SUBSCRIPTION

_VERSION = struct.Struct(">h")


def _decode(message: Message, data: bytes) -> tuple[int, Any]:
    if len(data) < 2:
        raise DecodeError(f"{message.name}: {len(data)} bytes is too short for a version")
    version, = _VERSION.unpack_from(data)
    if version < 0:
        raise DecodeError(f"{message.name}: negative version {version}")
    known = min(version, message.versions.high)
    # a newer version than ours: read the known prefix, ignore what follows
    return version, decoder(message, known)(data, 2, known == version)


def decode_subscription(data: bytes) -> tuple[int, Any]:
    """(version, ConsumerProtocolSubscription) of a JoinGroup protocol's metadata."""
    return _decode(SUBSCRIPTION, data)


def decode_assignment(data: bytes) -> tuple[int, Any]:
    """(version, ConsumerProtocolAssignment) of a SyncGroup assignment."""
    return _decode(ASSIGNMENT, data)


def encode_subscription(subscription: Any, version: int = SUBSCRIPTION.versions.high) -> bytes:
    return _VERSION.pack(version) + encoder(SUBSCRIPTION, version)(subscription)


def encode_assignment(assignment: Any, version: int = ASSIGNMENT.versions.high) -> bytes:
    return _VERSION.pack(version) + encoder(ASSIGNMENT, version)(assignment)
