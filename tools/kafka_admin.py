"""A small Kafka-protocol client for the `groups` commands, on our own codec.

A CLI process asks a handful of questions and exits, so this is one blocking socket per
node with a timeout on every connect and answer; versions are agreed with ApiVersions v0,
which every server answers. Nothing here prints: a failure is an `AdminError` whose text is
one line for the operator.

Security is the runtime's, not a second copy: a connection is wrapped in the TLS client
context and logs in with the `Login` (sans I/O) of an `UpstreamSecurity`, as the gateway's
own connections to the brokers are (`tools/client_config.py` makes one from Kafka's client
properties).

Why not kafka-python's KafkaAdminClient, which has bootstrap lists, TLS and SASL? It would
not take the place of this module, only sit beside it: it has no ConsumerGroupDescribe
(KIP-848's groups, which `describe` must show), it lists groups on every broker in Metadata
where only the coordinator instances hold them, and it would put a second client (and a
dependency that today only the tests have) under the same commands, with its own retries
and errors to map to one line. What it would have saved, a bootstrap list, TLS and SASL,
is a few lines here on top of the runtime's TLS and login.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from typing import Any, Callable

import ssl

from protocol import DecodeError, ErrorCode, RequestHeader, decode_response, encode_request, error_name
from protocol.consumer import decode_assignment
from protocol.framing import DEFAULT_MAX_FRAME
from protocol.messages import build
from protocol.schemas import (API_VERSIONS, CONSUMER_GROUP_DESCRIBE, DELETE_GROUPS, DESCRIBE_GROUPS, FIND_COORDINATOR,
                              LIST_GROUPS, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_DELETE, OFFSET_FETCH)
from protocol.schema import Api

from coordinator import config
from coordinator.cluster.node_ids import INSTANCE_NODE_BASE
from coordinator.security.upstream import LoginFailed, UpstreamSecurity

E = ErrorCode
TopicPartition = tuple[str, int]

# The versions of each API this client's requests are written for; of these, the highest
# the server also serves is used. ListGroups v4 is the first with the groups' states, v5
# the first with their types (classic or consumer).
SPEAKS: dict[int, tuple[int, int]] = {
    METADATA.key: (1, 12), FIND_COORDINATOR.key: (0, 3), LIST_GROUPS.key: (0, 5),
    DESCRIBE_GROUPS.key: (0, 5), OFFSET_FETCH.key: (2, 7), OFFSET_COMMIT.key: (2, 8),
    DELETE_GROUPS.key: (0, 2), LIST_OFFSETS.key: (1, 11), CONSUMER_GROUP_DESCRIBE.key: (0, 1),
    OFFSET_DELETE.key: (0, 0),
}
CLASSIC, CONSUMER = "classic", "consumer"  # the group types of ListGroups v5 (KIP-848)
DEAD = "Dead"
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps: the log's start and its end
_SIZE = struct.Struct(">i")


class AdminError(Exception):
    """A request that could not be done, phrased as one line for the operator."""


class Unreachable(AdminError):
    """A node that refused, did not answer in time, or answered what cannot be read."""


class GroupRefused(AdminError):
    """What a coordinator answered about one group (it does not exist, its id is invalid,
    ...): a command about several groups says so and goes on with the others."""


def shown(name: str, limit: int = 60) -> str:
    """A group id quoted for a message: control characters escaped, and shortened past
    `limit` characters (the whole of a 2,000-character id is no help in an error)."""
    text = name if name.isprintable() else repr(name)[1:-1]
    if len(text) <= limit:
        return f"'{text}'"
    return f"'{text[:limit - 12]}...{text[-8:]}' ({len(name)} characters)"


def read_exactly(sock: socket.socket, n: int) -> bytes:
    """`n` bytes from a blocking `sock`; ConnectionResetError if the server closes it first."""
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError("the server closed the connection")
        data += chunk
    return bytes(data)


@dataclass(frozen=True)
class Node:
    id: int
    host: str
    port: int


def parse_address(text: str) -> tuple[str, int]:
    """A server to connect to (config's `parse_server_address`), refused as an AdminError."""
    try:
        return config.parse_server_address(text)
    except ValueError as exc:
        raise AdminError(str(exc)) from None


def parse_addresses(text: str) -> list[tuple[str, int]]:
    """`--bootstrap-server`'s list, HOST:PORT[,HOST:PORT...] as Kafka's tools take it."""
    try:
        return config.parse_addresses(text)
    except ValueError as exc:
        raise AdminError(str(exc)) from None


def _retriable(code: int) -> bool:
    try:
        return ErrorCode(code).retriable
    except ValueError:
        return False


class NodeConnection:
    """One node: requests answered one at a time, each within `timeout` seconds. With
    `security`, through TLS and/or logged in with SASL first (after ApiVersions, as Kafka's
    clients do)."""

    def __init__(self, host: str, port: int, timeout: float, security: UpstreamSecurity | None = None):
        self.address, self.timeout = f"{host}:{port}", timeout
        self._correlation = 0
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise Unreachable(f"cannot reach {self.address}: {_reason(exc)}") from None
        try:
            if security is not None and security.tls is not None:
                try:  # the handshake, within the socket's timeout
                    self.sock = security.tls.wrap_socket(self.sock, server_hostname=security.server_hostname(host))
                except (ssl.SSLError, ssl.CertificateError) as exc:
                    raise Unreachable(f"TLS with {self.address} failed: {_tls_reason(exc)}") from None
                except OSError as exc:
                    raise Unreachable(f"TLS with {self.address} failed: {_reason(exc)}") from None
            answer = self._send(API_VERSIONS, 0, {})
            login = security.login() if security is not None else None
            if login is not None:
                self._log_in(login)
        except Unreachable:
            self.sock.close()
            raise
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}

    def _log_in(self, login) -> None:
        """The SASL exchange: the `Login` makes each request frame and reads each answer."""
        frame = login.first()
        try:
            while frame is not None:
                self.sock.sendall(frame)
                size, = _SIZE.unpack(read_exactly(self.sock, 4))
                if not 0 <= size <= DEFAULT_MAX_FRAME:
                    raise Unreachable(f"{self.address} answered the SASL login with a frame of {size} bytes")
                frame = login.feed(read_exactly(self.sock, size))
        except LoginFailed as exc:
            raise Unreachable(f"SASL login to {self.address} failed: {exc}") from None
        except TimeoutError:
            raise Unreachable(f"{self.address} did not answer the SASL login within {self.timeout:g}s") from None
        except OSError as exc:
            raise Unreachable(f"lost the connection to {self.address} during the SASL login: {_reason(exc)}") from None

    def call(self, api: Api, body: dict[str, Any]) -> Any:
        low, high = SPEAKS[api.key]
        theirs_low, theirs_high = self.versions.get(api.key, (0, -1))
        if max(low, theirs_low) > min(high, theirs_high):
            raise Unreachable(f"{self.address} does not serve {api.name} v{low}-{high}")
        return self._send(api, min(high, theirs_high), body)

    def version(self, api: Api) -> int:
        """The version `call` uses for `api` (for fields that exist only in some)."""
        return min(SPEAKS[api.key][1], self.versions.get(api.key, (0, -1))[1])

    def serves(self, api: Api) -> bool:
        """Whether the node serves `api` in a version `call` can send."""
        low, high = SPEAKS[api.key]
        theirs_low, theirs_high = self.versions.get(api.key, (0, -1))
        return max(low, theirs_low) <= min(high, theirs_high)

    def _send(self, api: Api, version: int, body: dict[str, Any]) -> Any:
        return self.pipeline(api, version, [body])[0]

    def pipeline(self, api: Api, version: int, bodies: list[dict[str, Any]], chunk: int = 50) -> list[Any]:
        """Many requests, `chunk` written at a time before their answers are read (written
        all at once, a server that waits for its answers to be read would stop reading)."""
        answers = []
        try:
            for start in range(0, len(bodies), chunk):
                first = self._correlation + 1
                frames = []
                for body in bodies[start:start + chunk]:
                    self._correlation += 1
                    frames.append(encode_request(RequestHeader(api.key, version, self._correlation, "groupkeeper-cli"),
                                                 build(api.request.struct, body)))
                self.sock.sendall(b"".join(frames))
                for expected in range(first, self._correlation + 1):
                    size, = _SIZE.unpack(read_exactly(self.sock, 4))
                    if not 0 <= size <= DEFAULT_MAX_FRAME:
                        raise DecodeError(f"a frame of {size} bytes")
                    correlation, answer = decode_response(api.key, version, read_exactly(self.sock, size))
                    if correlation != expected:
                        raise Unreachable(f"{self.address} answered out of order")
                    answers.append(answer)
        except TimeoutError:
            raise Unreachable(f"{self.address} did not answer {api.name} within {self.timeout:g}s") from None
        except OSError as exc:
            raise Unreachable(f"lost the connection to {self.address}: {_reason(exc)}") from None
        except DecodeError as exc:
            raise Unreachable(f"{self.address} answered {api.name} with what cannot be read ({exc})") from None
        return answers

    def close(self) -> None:
        self.sock.close()


def _reason(exc: OSError) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ssl.SSLError):
        return _tls_reason(exc)
    return (exc.strerror or str(exc) or type(exc).__name__).lower()


def _tls_reason(exc: Exception) -> str:
    """OpenSSL's words without its source position: "certificate verify failed: self-signed
    certificate", "tlsv13 alert certificate required"."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"certificate verify failed: {exc.verify_message}"
    reason = getattr(exc, "reason", None)
    return reason.replace("_", " ").lower() if reason else str(exc)


@dataclass(frozen=True)
class Listed:
    """A group as ListGroups lists it; `state` is None below v4, `type` below v5."""
    group: str
    protocol_type: str
    state: str | None
    type: str | None


@dataclass(frozen=True)
class Member:
    """A member of a described group. `assignment`: a classic member's, read only when the
    group's protocol type is "consumer" (other protocols' assignments are opaque bytes); a
    consumer group member's current one. `epoch` and `target` (its target assignment): consumer
    groups only. `upgraded`: in a consumer group, whether the member speaks the consumer
    protocol (True) or the classic one (False: the group is migrating), as ConsumerGroupDescribe
    v1 says (KIP-1099); None where it is not said (classic groups, v0)."""
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, list[int]]
    epoch: int | None = None
    target: dict[str, list[int]] | None = None
    upgraded: bool | None = None


@dataclass(frozen=True)
class Description:
    """A group as DescribeGroups (classic) or ConsumerGroupDescribe (consumer) describes it;
    state Dead when neither knows it. `strategy`: a classic group's protocol (the assignor its
    members agreed on), a consumer group's server-side assignor. The epochs: consumer groups
    only (the group's, and that of its target assignment)."""
    group: str
    type: str
    state: str
    protocol_type: str
    strategy: str
    members: list[Member]
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    # by Burrow's rules, as the coordinator judges it (groupkeeper's `groupkeeper_status`
    # extension of the describes); None from a coordinator that does not say
    status: str | None = None


@dataclass(frozen=True)
class Committed:
    """A committed offset, and the leader epoch committed with it (None: none was)."""
    offset: int
    leader_epoch: int | None = None


@dataclass(frozen=True)
class Cluster:
    nodes: dict[int, Node]
    leaders: dict[TopicPartition, Node | None]  # None: no leader, or one not listed
    unknown: list[str]  # asked-for topics that do not exist

    def partitions(self, topic: str) -> list[int]:
        return sorted(p for t, p in self.leaders if t == topic)


class GroupsAdmin:
    """The questions the `groups` commands ask, against the coordinator and the brokers.
    `bootstrap`: HOST:PORT[,HOST:PORT...]; every connection with `security`."""

    def __init__(self, bootstrap: str, timeout: float, security: UpstreamSecurity | None = None):
        self.timeout = timeout
        self.security = security
        self._connections: dict[tuple[str, int], NodeConnection | Unreachable] = {}
        self._bootstrap = parse_addresses(bootstrap)

    @property
    def bootstrap(self) -> NodeConnection:
        """Connected on first use, so that a command checks its arguments first: the first
        server of the list that can be reached, as Kafka's clients bootstrap."""
        failures = []
        for address in self._bootstrap:
            try:
                return self.connect(*address)
            except Unreachable as exc:
                failures.append(exc)
        if len(failures) == 1:
            raise failures[0]
        raise Unreachable(f"none of the bootstrap servers answered: {'; '.join(map(str, failures))}")

    def __enter__(self) -> GroupsAdmin:
        return self

    def __exit__(self, *exc) -> None:
        for connection in self._connections.values():
            if isinstance(connection, NodeConnection):
                connection.close()

    def connect(self, host: str, port: int) -> NodeConnection:
        """A connection to `host:port`, made once; a node that failed is not tried again."""
        known = self._connections.get((host, port))
        if known is None:
            try:
                known = NodeConnection(host, port, self.timeout, self.security)
            except Unreachable as exc:
                known = exc
            self._connections[(host, port)] = known
        if isinstance(known, Unreachable):
            raise known
        return known

    def _until_settled(self, attempt: Callable[[], tuple[int, Any]]) -> tuple[int, Any]:
        """`attempt()` again while its error is retriable (a coordinator still loading, say),
        for up to the timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            error, value = attempt()
            if not _retriable(error) or time.monotonic() >= deadline:
                return error, value
            time.sleep(0.1)

    # -- cluster ----------------------------------------------------------------------------

    def cluster(self, topics: list[str] | None) -> Cluster:
        """Nodes, and the leader of every partition of `topics` (None: every topic)."""
        answer = self.bootstrap.call(METADATA, {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False})
        nodes = {b.node_id: Node(b.node_id, b.host, b.port) for b in answer.brokers}
        leaders, unknown = {}, []
        for t in answer.topics:
            if t.error_code == E.UNKNOWN_TOPIC_OR_PARTITION:
                unknown.append(t.name)
                continue
            for p in t.partitions:
                leaders[(t.name, p.partition_index)] = nodes.get(p.leader_id)
        return Cluster(nodes, leaders, unknown)

    def log_offsets(self, leaders: dict[TopicPartition, Node | None], timestamp: int) -> dict[TopicPartition, int]:
        """ListOffsets for `timestamp` from each partition's leader: what the leaders that
        could be reached answered without error (for a timestamp after the last record,
        that is -1). Partitions without an answer are left out."""
        by_leader: dict[Node, list[TopicPartition]] = {}
        for tp, node in leaders.items():
            if node is not None:
                by_leader.setdefault(node, []).append(tp)
        found = {}
        for node, tps in by_leader.items():
            try:
                answer = self.connect(node.host, node.port).call(LIST_OFFSETS, {
                    "replica_id": -1, "isolation_level": 0, "timeout_ms": int(self.timeout * 1000),
                    "topics": [{"name": topic, "partitions": [{"partition_index": p, "timestamp": timestamp}
                                                              for t, p in tps if t == topic]}
                               for topic in sorted({t for t, _ in tps})]})
            except Unreachable:
                continue
            found.update({(t.name, p.partition_index): _found_offset(p, timestamp) for t in answer.topics
                          for p in t.partitions if p.error_code == E.NONE and (t.name, p.partition_index) in leaders})
        return found

    # -- groups -----------------------------------------------------------------------------

    def coordinator(self, group: str) -> Node:
        def find():
            answer = self.bootstrap.call(FIND_COORDINATOR, {"key": group, "key_type": 0})
            return answer.error_code, Node(answer.node_id, answer.host, answer.port)
        error, node = self._until_settled(find)
        if error == E.INVALID_GROUP_ID:
            raise GroupRefused(f"The group id {shown(group)} is invalid (INVALID_GROUP_ID).")
        if error == E.GROUP_AUTHORIZATION_FAILED:
            raise GroupRefused(f"Not authorized to access group {shown(group)} (GROUP_AUTHORIZATION_FAILED).")
        if error != E.NONE:
            raise AdminError(f"the coordinator of group {shown(group)} is not available ({error_name(error)})")
        return node

    def _at_coordinator(self, group: str, ask: Callable[[NodeConnection], tuple[int, Any]]) -> tuple[Node, int, Any]:
        """`ask` the group's coordinator, found anew on every attempt (`_until_settled`), so
        that a group that moved (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) or a node that
        went away is followed. (node, error, answer); a node still unreachable at the end
        raises Unreachable."""
        failure: list[Unreachable] = []

        def attempt() -> tuple[int, tuple[Node, Any]]:
            failure.clear()
            node = self.coordinator(group)
            try:
                error, value = ask(self.connect(node.host, node.port))
            except Unreachable as exc:
                failure.append(exc)
                error, value = E.COORDINATOR_NOT_AVAILABLE, None
            if error in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE):
                self._connections.pop((node.host, node.port), None)  # it may be back in a moment
            return error, (node, value)

        error, (node, value) = self._until_settled(attempt)
        if failure:
            raise failure[0]
        return node, error, value

    def list_groups(self, typed: bool = False) -> list[Listed]:
        """The groups of every coordinator instance in Metadata (brokers coordinate none of
        them), by name. `typed`: their types are needed, and an instance that cannot say
        (below ListGroups v5) is an AdminError."""
        instances = [n for n in self.cluster([]).nodes.values() if n.id >= INSTANCE_NODE_BASE]
        listed = {}
        for node in instances:
            connection = self.connect(node.host, node.port)
            if typed and connection.version(LIST_GROUPS) < 5:
                raise AdminError(f"{connection.address} does not serve ListGroups v5, which gives the groups' types")
            error, answer = self._until_settled(lambda: _with_error(connection.call(LIST_GROUPS, {})))
            if error != E.NONE:
                raise AdminError(f"listing the groups of {connection.address} failed: {error_name(error)}")
            version = connection.version(LIST_GROUPS)
            for g in answer.groups:
                listed[g.group_id] = Listed(g.group_id, g.protocol_type, g.group_state if version >= 4 else None,
                                            (g.group_type or None) if version >= 5 else None)
        return [listed[g] for g in sorted(listed)]

    def describe(self, group: str) -> tuple[Node, Description]:
        """The coordinator and a description of `group`, of either type (state Dead when no
        group has the name). DescribeGroups first: it describes classic groups and answers
        Dead for consumer groups (as Kafka does) as for unknown ones; only then, and if the
        coordinator serves it, ConsumerGroupDescribe, on the same connection."""
        def describe(connection: NodeConnection):
            classic = connection.call(DESCRIBE_GROUPS, {"groups": [group]}).groups[0]
            if (classic.error_code != E.NONE or classic.group_state != DEAD
                    or not connection.serves(CONSUMER_GROUP_DESCRIBE)):
                return classic.error_code, _classic(classic)
            described = connection.call(CONSUMER_GROUP_DESCRIBE, {
                "group_ids": [group], "include_authorized_operations": False}).groups[0]
            if described.error_code == E.GROUP_ID_NOT_FOUND:  # neither type: Dead
                return E.NONE, _classic(classic)
            return described.error_code, _consumer(described)
        node, error, described = self._at_coordinator(group, describe)
        if error != E.NONE:
            raise GroupRefused(f"describing group {shown(group)} failed: {error_name(error)}")
        return node, described

    def committed(self, group: str) -> dict[TopicPartition, Committed]:
        """Every committed offset of `group`, with its leader epoch (OffsetFetch v5 and later)."""
        _, error, answer = self._at_coordinator(group, lambda connection: _with_error(
            connection.call(OFFSET_FETCH, {"group_id": group, "topics": None})))
        if error != E.NONE:
            raise GroupRefused(f"fetching the offsets of group {shown(group)} failed: {error_name(error)}")
        return {(t.name, p.partition_index): Committed(p.committed_offset, _epoch(p)) for t in answer.topics
                for p in t.partitions if p.error_code == E.NONE and p.committed_offset >= 0}

    def commit(self, group: str, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Commit as an admin (no member, generation -1), which a coordinator accepts only
        while the group has no members; the error code of each partition."""
        topics = sorted({t for t, _ in offsets})

        def commit(connection: NodeConnection):
            answer = connection.call(OFFSET_COMMIT, {
                "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                    for (t, p), o in sorted(offsets.items()) if t == topic]} for topic in topics]})
            errors = {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}
            moved = {e for e in errors.values() if e in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE)}
            return (moved.pop() if moved else E.NONE), errors  # a moved group: ask its new coordinator
        _, _, errors = self._at_coordinator(group, commit)
        return errors

    def delete_offsets(self, group: str, partitions: dict[str, list[int]]) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete: (the top-level error code, each partition's)."""
        def delete(connection: NodeConnection):
            answer = connection.call(OFFSET_DELETE, {"group_id": group, "topics": [
                {"name": topic, "partitions": [{"partition_index": p} for p in sorted(ps)]}
                for topic, ps in sorted(partitions.items())]})
            return answer.error_code, answer
        _, error, answer = self._at_coordinator(group, delete)
        if answer is None:
            return error, {}
        return error, {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}

    def delete(self, group: str) -> int:
        """DeleteGroups' error code for `group`."""
        _, error, _ = self._at_coordinator(group, lambda connection: (
            connection.call(DELETE_GROUPS, {"groups_names": [group]}).results[0].error_code, None))
        return error


def _with_error(answer: Any) -> tuple[int, Any]:
    return answer.error_code, answer


def _found_offset(partition: Any, timestamp: int) -> int:
    """A ListOffsets answer's offset; for a time, -1 when no record is that late. Kafka says
    so with offset -1 and timestamp -1; Tansu 0.6 answers offset 0 and timestamp -1, which
    read as it stands would reset a group to the log's first record. A record found carries
    its timestamp in Kafka's answers (v1 and later), so offset 0 without one is read as
    none. (Only offset 0: tests/support/standin_broker.py gives found offsets without timestamps.)"""
    if timestamp >= 0 and partition.timestamp == -1 and partition.offset == 0:
        return -1
    return partition.offset


def _epoch(partition: Any) -> int | None:
    """An OffsetFetch partition's committed leader epoch; None below v5 or when -1 (none)."""
    epoch = getattr(partition, "committed_leader_epoch", -1)
    return None if epoch is None or epoch < 0 else epoch


def _classic(described: Any) -> Description:
    """DescribeGroups' answer for one group."""
    return Description(described.group_id, CLASSIC, described.group_state, described.protocol_type or "",
                       described.protocol_data or "", [
                           Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                  _classic_assignment(m.member_assignment) if described.protocol_type == "consumer"
                                  else {})
                           for m in described.members], status=described.groupkeeper_status)


def _classic_assignment(data: bytes) -> dict[str, list[int]]:
    """A classic consumer member's assignment, {} when it has none or it cannot be read."""
    assignment: dict[str, list[int]] = {}
    if data:
        try:
            _, decoded = decode_assignment(data)
        except DecodeError:
            return {}
        for tp in decoded.assigned_partitions:
            assignment.setdefault(tp.topic, []).extend(sorted(tp.partitions))
    return assignment


def _consumer(described: Any) -> Description:
    """ConsumerGroupDescribe's answer for one group."""
    return Description(described.group_id, CONSUMER, described.group_state, CONSUMER, described.assignor_name or "", [
        Member(m.member_id, m.instance_id, m.client_id, m.client_host, _partitions(m.assignment), m.member_epoch,
               _partitions(m.target_assignment), _upgraded(getattr(m, "member_type", -1)))
        for m in described.members], described.group_epoch, described.assignment_epoch,
        described.groupkeeper_status)


def _upgraded(member_type: int) -> bool | None:
    """ConsumerGroupDescribe v1's member type (-1 unknown, 0 classic, 1 consumer) as Kafka's
    admin client reads it: whether the member was upgraded to the consumer protocol."""
    return None if member_type not in (0, 1) else member_type == 1


def _partitions(assignment: Any) -> dict[str, list[int]]:
    """A ConsumerGroupDescribe assignment as {topic: sorted partitions}."""
    partitions: dict[str, list[int]] = {}
    for t in assignment.topic_partitions:
        partitions.setdefault(t.topic_name, []).extend(t.partitions)
    return {topic: sorted(ps) for topic, ps in partitions.items() if ps}
