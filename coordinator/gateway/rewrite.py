"""Answers that name brokers, rewritten to name this instance's node ports: sans I/O.

A client reaches broker node N only through a port of this instance, so every answer that
carries a broker address must carry that port instead, or the client connects around the
gateway (and, for librdkafka, drops every node the answer leaves out). `Addresses` says,
for a node id, the (host, port) under which this instance exposes that node, or None: not
exposed. A node that is not exposed is dropped from the answer, or, where it cannot be
(FindCoordinator's one coordinator), the answer becomes COORDINATOR_NOT_AVAILABLE, which
clients retry.

The answers rewritten (`REWRITTEN`: api key -> first version with an address):

- Metadata: the brokers, plus groupkeeper's own coordinator instances (`extra_brokers`);
- FindCoordinator: the coordinator (v0-3) or each coordinator (v4+, KIP-699);
- DescribeCluster (KIP-700): the brokers;
- Produce v10+ and Fetch v16+: `node_endpoints`, KIP-951's addresses of the new leaders of
  partitions answered NOT_LEADER_OR_FOLLOWER (or FENCED_LEADER_EPOCH, for Fetch);
- ShareFetch and ShareAcknowledge (KIP-932): their `node_endpoints`, the same.

Functions on decoded answers return new objects and never modify what they are given.
`rewrite_frame` works on whole response frames. Metadata, FindCoordinator and
DescribeCluster frames are decoded and encoded again (every field of theirs is declared:
nothing is lost). Produce and Fetch frames carry records and tagged fields our codec does
not read (a partition's current_leader, diverging_epoch and snapshot_id are struct-valued),
so they are never re-encoded: the frame is walked up to its top-level tagged fields, where
KIP-951 puts node_endpoints (tag 0 in both), and only that tag is replaced; records and
every other byte pass as they came. A Fetch answer streamed past (its size sent already)
has its tagged fields rewritten in place instead, in as many bytes as they came
(`node_endpoints_in_place`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

from protocol import DecodeError, ErrorCode, RequestHeader, decode_broker_response, encode_response
from protocol import messages as m
from protocol.codec import decoder, encoder
from protocol.framing import frame as framed
from protocol.schema import UUID, Array, F, Message, Primitive, Struct
from protocol.schemas import (DESCRIBE_CLUSTER, FETCH, FIND_COORDINATOR, METADATA, PRODUCE, SHARE_ACKNOWLEDGE,
                              SHARE_FETCH)
from protocol.schemas.produce import NODE_ENDPOINT
from protocol.varint import read_uvarint, uvarint
from protocol.versions import Versions

Addresses = Callable[[int], tuple[str, int] | None]
"""For a broker node id: the (host, port) at which this instance exposes it, or None."""

# api key -> the lowest version whose answer names a broker address: which answers a relay
# must hand to `rewrite_frame` (the others pass untouched)
REWRITTEN: dict[int, int] = {
    METADATA.key: 0,
    FIND_COORDINATOR.key: 0,
    DESCRIBE_CLUSTER.key: 0,
    PRODUCE.key: 10,  # KIP-951: ProduceResponse.json, NodeEndpoints tag 0, versions 10+
    FETCH.key: 16,  # KIP-951: FetchResponse.json, NodeEndpoints tag 0, versions 16+
    SHARE_FETCH.key: 0,  # KIP-932: NodeEndpoints, a regular field, in every version
    SHARE_ACKNOWLEDGE.key: 0,
}

NO_CONTROLLER = -1  # Kafka's MetadataResponse.NO_CONTROLLER_ID
# What a broker says with COORDINATOR_NOT_AVAILABLE (Kafka's Errors default message)
_NO_COORDINATOR = "The coordinator is not available."


def _with(obj: Any, **changes: Any) -> Any:
    """A copy of the message object `obj` with `changes` (the classes are all slots)."""
    cls = type(obj)
    return cls(**{**{name: getattr(obj, name) for name in cls.__slots__}, **changes})


def _exposed(nodes: Iterable[Any], id_field: str, addresses: Addresses) -> list[Any]:
    """`nodes` (each with `id_field`, host and port) at their exposed addresses, in order;
    those not exposed left out. Every other field (rack, is_fenced) kept."""
    out = []
    for node in nodes:
        address = addresses(getattr(node, id_field))
        if address is not None:
            out.append(_with(node, host=address[0], port=address[1]))
    return out


def _controller(controller_id: int, addresses: Addresses) -> int:
    """A controller that is not exposed is no controller to the client: Kafka's -1, rather
    than an id that names no node of the answer."""
    return controller_id if controller_id < 0 or addresses(controller_id) is not None else NO_CONTROLLER


def metadata(response: Any, addresses: Addresses,
             extra_brokers: Iterable[tuple[int, str, int]] = ()) -> Any:
    """A MetadataResponse with its brokers at their exposed addresses (those not exposed
    dropped, their partitions' leader ids left as the broker said: the client finds no node
    for them and asks again) and `extra_brokers` (node id, host, port: groupkeeper's
    coordinator instances, rack null) appended, so that clients keep them as nodes.

    Extra ids are >= 1,000,000,000 by design (`cluster.node_ids`) and never a broker's; an
    extra whose id is any broker's of the answer, exposed or not, is skipped: the broker's
    id keeps its meaning (its partitions' leader). A controller not exposed becomes -1.
    """
    brokers = _exposed(response.brokers, "node_id", addresses)
    taken = {b.node_id for b in response.brokers}
    for node_id, host, port in extra_brokers:
        if node_id not in taken:
            taken.add(node_id)
            brokers.append(m.MetadataResponseBroker(node_id=node_id, host=host, port=port, rack=None))
    return _with(response, brokers=brokers, controller_id=_controller(response.controller_id, addresses))


def _coordinator(entry: Any, addresses: Addresses) -> Any:
    """One coordinator (a v0-3 answer or a v4+ entry, same field names) at its exposed
    address; not exposed: COORDINATOR_NOT_AVAILABLE with Kafka's no-node values. An entry
    that is an error already is left as it is (its node is -1 anyway)."""
    if entry.error_code != ErrorCode.NONE:
        return entry
    address = addresses(entry.node_id)
    if address is None:
        return _with(entry, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=_NO_COORDINATOR,
                     node_id=-1, host="", port=-1)
    return _with(entry, host=address[0], port=address[1])


def find_coordinator(response: Any, version: int, addresses: Addresses) -> Any:
    """A FindCoordinatorResponse rewritten: its one coordinator (v0-3) or each entry of
    `coordinators` (v4+, KIP-699's batched lookup)."""
    if version < 4:
        return _coordinator(response, addresses)
    return _with(response, coordinators=[_coordinator(c, addresses) for c in response.coordinators])


def describe_cluster(response: Any, addresses: Addresses) -> Any:
    """A DescribeClusterResponse with its brokers (or controllers, for endpoint_type 2: the
    same list) at their exposed addresses, those not exposed dropped; a controller not
    exposed becomes -1."""
    return _with(response, brokers=_exposed(response.brokers, "broker_id", addresses),
                 controller_id=_controller(response.controller_id, addresses))


def node_endpoints(response: Any, addresses: Addresses) -> Any:
    """A ProduceResponse (v10+) or FetchResponse (v16+) with its KIP-951 node_endpoints at
    their exposed addresses, those not exposed dropped (the client, finding no endpoint for
    a partition's current leader, refreshes its metadata as before KIP-951)."""
    return _with(response, node_endpoints=_exposed(response.node_endpoints, "node_id", addresses))


# -- whole frames -------------------------------------------------------------------------

def rewrite_frame(api_key: int, api_version: int, frame: bytes, addresses: Addresses,
                  extra_brokers: Iterable[tuple[int, str, int]] = (), past: Callable[[], None] | None = None) -> bytes:
    """The answer to send for a broker's response `frame` to (api_key, api_version).

    `frame` is a response as `FrameReader` yields it and `decode_response` takes it (header
    and body, no size); the result is what `encode_response` gives: framed, size prefix
    included, ready to send. The correlation id is kept. An answer with nothing to rewrite
    (see `REWRITTEN`) is the same bytes, framed, not decoded. Raises `ProtocolError`
    (`DecodeError`) for an answer to rewrite that does not read, or an undeclared version.

    Read as Kafka's clients read a broker's answer: bytes past the schema (librdkafka's mock
    cluster adds one to Metadata v9+) are no error. An answer decoded and encoded again
    loses them; a Produce or Fetch answer keeps them when it has no node endpoints (it is
    passed as it came) and loses them when its tagged fields are rewritten. `past` is
    called for each answer that had any.
    """
    lowest = REWRITTEN.get(api_key)
    if lowest is None or api_version < lowest:
        return framed(frame)
    if api_key == PRODUCE.key or api_key == FETCH.key:
        return framed(_splice_node_endpoints(api_key, api_version, frame, addresses, past))
    correlation_id, body, extra = decode_broker_response(api_key, api_version, frame)
    if extra and past is not None:
        past()
    if api_key == METADATA.key:
        body = metadata(body, addresses, extra_brokers)
    elif api_key == FIND_COORDINATOR.key:
        body = find_coordinator(body, api_version, addresses)
    elif api_key == DESCRIBE_CLUSTER.key:
        body = describe_cluster(body, addresses)
    else:  # ShareFetch, ShareAcknowledge: decoded and encoded whole (their records copied once)
        body = node_endpoints(body, addresses)
    # header v0, or v1 (an empty tagged-field section: Kafka declares no response header tags)
    # for flexible versions, as encode_response writes them
    return encode_response(RequestHeader(api_key, api_version, correlation_id, None), body)


# Produce and Fetch: a walk over the frame to its top-level tagged fields, driven by the
# declarations. Both answers are flexible in every version rewritten (Produce 9+, Fetch 12+),
# so lengths are compact uvarints (n + 1; 0 is null) and every struct ends in tagged fields.
_FIXED, _BYTES, _FIXED_ARRAY, _VAR_ARRAY, _ARRAY, _STRUCT, _TAGS = range(7)

# node_endpoints' payload: a compact array of NodeEndpoint, read and written with our codec
# as the one field of a flexible message (whose own, empty, tagged section is added and cut)
_ENDPOINTS = Message(Struct("GatewayNodeEndpoints", (F("node_endpoints", Array(NODE_ENDPOINT)),)),
                     Versions.parse("0+"), Versions.parse("0+"))
_NODE_ENDPOINTS_TAG = 0  # in both ProduceResponse.json and FetchResponse.json


_HEADER_V1 = ((_FIXED, 4), (_TAGS, None))  # a flexible response's header: correlation id, tagged fields
# (api key, version) -> the steps that skip an answer's top-level fields: looked up per answer
_TOP_STEPS: dict[tuple[int, int], tuple[tuple[int, Any], ...]] = {}


@cache
def _walk(struct: Struct, version: int, top: bool = False) -> tuple[tuple[int, Any], ...]:
    """The steps that skip `struct` in a flexible `version`: runs of fixed-width fields as one
    skip, lengths and counts read; the top-level struct stops before its tagged fields."""
    steps: list[tuple[int, Any]] = []
    fixed = 0
    for f in struct.present(version):
        t = f.type
        if isinstance(t, Primitive) and (t.fixed or t is UUID):
            fixed += t.size
            continue
        if fixed:
            steps.append((_FIXED, fixed))
            fixed = 0
        if isinstance(t, Struct):
            steps.append((_STRUCT, (_walk(t, version), version in f.nullable)))
        elif isinstance(t, Array):
            item = t.item
            if isinstance(item, Struct):
                steps.append((_ARRAY, _walk(item, version)))
            elif item.fixed or item is UUID:
                steps.append((_FIXED_ARRAY, item.size))
            else:
                steps.append((_VAR_ARRAY, None))
        else:
            steps.append((_BYTES, None))
    if fixed:
        steps.append((_FIXED, fixed))
    if not top:
        steps.append((_TAGS, None))
    return tuple(steps)


def _skip(steps: tuple[tuple[int, Any], ...], b: bytes, p: int, end: int) -> int:
    """Where the struct that `steps` describe, starting at `p`, ends (`end`: `len(b)`; lengths
    unchecked here: `_splice_node_endpoints` checks the end; counts bounded by the bytes left). Lengths and
    counts of one byte (nearly all) are read in place, not through `read_uvarint`: this runs
    for every Produce answer. IndexError for an answer cut short (the caller says so)."""
    for kind, arg in steps:
        if kind == _FIXED:
            p += arg
        elif kind == _BYTES:
            n = b[p]
            if n < 0x80:
                p += 1
            else:
                n, p = read_uvarint(b, p)
            if n:
                p += n - 1
        elif kind == _TAGS:
            count = b[p]
            if count < 0x80:
                p += 1
            else:
                count, p = read_uvarint(b, p)
            for _ in range(count):
                _, p = read_uvarint(b, p)
                size, p = read_uvarint(b, p)
                p += size
        elif kind == _STRUCT:
            inner, nullable = arg
            if nullable:
                if p >= end:
                    raise DecodeError("truncated struct marker")
                p += 1
                if b[p - 1] == 0xFF:
                    continue
            p = _skip(inner, b, p, end)
        else:
            n = b[p]
            if n < 0x80:
                p += 1
            else:
                n, p = read_uvarint(b, p)
            n -= 1
            if n <= 0:
                continue
            if kind == _FIXED_ARRAY:
                p += n * arg
            elif n > end - p:  # every element takes a byte at least
                raise DecodeError("array count beyond the end of the frame")
            elif kind == _ARRAY:
                for _ in range(n):
                    p = _skip(arg, b, p, end)
            else:
                for _ in range(n):
                    k, p = read_uvarint(b, p)
                    if k:
                        p += k - 1
        if p > end:
            raise DecodeError("field beyond the end of the frame")
    return p


def node_endpoints_rewriter(api_key: int, version: int, addresses: Addresses,
                            past: Callable[[], None] | None = None) -> Callable[[bytes], bytes]:
    """`rewrite_frame` for the answers to one version of Produce or Fetch, what it looks up
    per answer looked up once: for a relay that keeps it (a Produce's answer, on the data
    path)."""
    if version < REWRITTEN[api_key]:
        return framed
    try:
        walk = _node_endpoints_walk(api_key, version)
    except DecodeError:  # undeclared: each answer raises it
        return lambda frame: rewrite_frame(api_key, version, frame, addresses, (), past)
    return lambda frame: framed(_spliced(walk, frame, addresses, past))


def _node_endpoints_walk(api_key: int, version: int) -> tuple[tuple[tuple[int, Any], ...], str]:
    """The steps that skip a Produce or Fetch answer of `version` to its top-level tagged
    fields, and its name for errors."""
    api = PRODUCE if api_key == PRODUCE.key else FETCH
    message = api.response
    if version not in message.versions:
        raise DecodeError(f"{message.name} v{version} is not declared")
    steps = _TOP_STEPS.get((api_key, version))
    if steps is None:  # by (key, version): a Struct's hash, which @cache takes, costs more than the walk
        steps = _TOP_STEPS[(api_key, version)] = _walk(message.struct, version, top=True)
    return steps, f"{message.name} v{version}"


def _splice_node_endpoints(api_key: int, version: int, frame: bytes, addresses: Addresses,
                           past: Callable[[], None] | None = None) -> bytes:
    """`frame` (a Produce v10+ or Fetch v16+ answer, no size) with its node_endpoints tag
    rewritten; the same object when it has none (nearly always: only answers with a
    partition led elsewhere carry it)."""
    return _spliced(_node_endpoints_walk(api_key, version), frame, addresses, past)


def _spliced(walk: tuple[tuple[tuple[int, Any], ...], str], frame: bytes, addresses: Addresses,
             past: Callable[[], None] | None) -> bytes:
    steps, what = walk
    end = len(frame)
    try:
        start = _skip(steps, frame, _skip(_HEADER_V1, frame, 0, end), end)
    except IndexError:
        raise DecodeError(f"{what}: shorter than its fields") from None
    found, tags, extra = _read_tags(frame, start, what, whole=False)
    if extra and past is not None:
        past()
    if found is None:
        return frame
    return frame[:start] + _tags_with(found, tags, addresses)


def _read_tags(b: bytes, p: int, what: str, whole: bool = True) -> tuple[bytes | None, list[bytes], int]:
    """The top-level tagged fields from `p` to the end of `b`: node_endpoints' payload (None
    if absent), the other tagged fields as they came (tag, size and payload), and how many
    bytes follow them (an error with `whole`)."""
    end = len(b)
    count, p = read_uvarint(b, p)
    tags: list[bytes] = []
    found = None
    for _ in range(count):
        q = p
        tag, p = read_uvarint(b, p)
        size, p = read_uvarint(b, p)
        if p + size > end:
            raise DecodeError(f"{what}: tagged field beyond the end of the frame")
        if tag == _NODE_ENDPOINTS_TAG:
            found = b[p:p + size]
        else:
            tags.append(b[q:p + size])
        p += size
    if whole and p != end:
        raise DecodeError(f"{what}: {end - p} bytes left over")
    return found, tags, end - p


def _tags_with(found: bytes | None, tags: list[bytes], addresses: Addresses | None) -> bytes:
    """A tagged-field section of `tags` and, unless `addresses` is None, node_endpoints'
    payload `found` rewritten (left out if no endpoint of it is exposed)."""
    kept = []
    if found is not None and addresses is not None:
        listed = decoder(_ENDPOINTS, 0)(found + b"\x00")
        kept = _exposed(listed.node_endpoints, "node_id", addresses)
    parts = [uvarint(len(tags) + (1 if kept else 0))]
    if kept:  # tag 0 is the lowest: it goes first, and the tags stay in order
        payload = encoder(_ENDPOINTS, 0)(_with(listed, node_endpoints=kept))[:-1]
        parts += [uvarint(_NODE_ENDPOINTS_TAG), uvarint(len(payload)), payload]
    parts += tags
    return b"".join(parts)


# A tagged field no version of any answer declares, last in order: a client skips it
# (KIP-482: unknown tags are ignored). It pads a rewritten section to its old length.
_PAD_TAG = 0x7FFFFFFF


def _padded(section: bytes, length: int) -> bytes | None:
    """`section` (count, then tagged fields) with a padding field added so that it is
    `length` bytes long, or None if no padding makes it so."""
    count, p = read_uvarint(section, 0)
    body = section[p:]
    head = uvarint(count + 1) + body + uvarint(_PAD_TAG)
    for size in range(max(length - len(head) - 5, 0), length - len(head)):
        if len(head) + len(uvarint(size)) + size == length:
            return head + uvarint(size) + bytes(size)
    return None


def node_endpoints_in_place(section: bytes, addresses: Addresses, what: str = "Fetch answer") -> bytes:
    """A streamed answer's top-level tagged fields (`section`, from its count to the end),
    with node_endpoints rewritten in exactly `len(section)` bytes: the answer's size has gone
    out already. Rewritten and padded if it fits; otherwise node_endpoints is left out and
    the section padded (the client, without the new leader's address, refreshes its
    metadata as before KIP-951). Raises `DecodeError` for a section that does not read."""
    found, tags, _ = _read_tags(section, 0, what)
    if found is None or found == b"\x01":  # none, or an empty list: no address to hide
        return section
    for candidate in (_tags_with(found, tags, addresses), _tags_with(None, tags, None)):
        if len(candidate) == len(section):
            return candidate
        if len(candidate) < len(section) and (padded := _padded(candidate, len(section))) is not None:
            return padded
    raise DecodeError(f"{what}: its node endpoints cannot be left out in place")  # not reached: a listed one is 12+ bytes
