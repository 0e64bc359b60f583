"""The topic source beside clusters without ZooKeeper (KRaft Kafka 3.3+ and 4.x, Redpanda):
the brokers' own Metadata API, learned as Kafka's clients learn it.

One connection to one broker at a time. Every `max_age` seconds, and at once (at most every
`WANT_INTERVAL`) when a member subscribes to a topic not known, it asks Metadata for every
topic (v12 or the broker's highest, topic ids from v10) and replaces the view with the
answer. A broker that refuses, times out or answers what cannot be read is left for the
next: the live brokers of the last answer first, then the bootstrap addresses, so a broker
that goes away is replaced by another. When none answers, the coordinator keeps serving
from the last view, says which addresses it tried (one log line per failed round) and
tries again with a backoff that grows to `max_age`; the view's age is a metric.

The connection speaks what `security` says (`gateway_security_protocol`, as the gateway's
links do): TLS (trio's SSLStream, the broker's certificate checked) and a SASL login
before the first request. Both are made elsewhere (`security.upstream`, a layer this one
does not import) and handed in; a broker that refuses them is left for the next like one
that cannot be reached, and counted as "tls" or "authentication".
"""

from __future__ import annotations

import math
import ssl
from collections.abc import Sequence
from typing import Protocol

import structlog
import trio

from protocol import (DecodeError, ErrorCode, FrameReader, ProtocolError, RequestHeader, decode_broker_response,
                      encode_request)
from protocol.messages import build
from protocol.schema import Api
from protocol.schemas import API_VERSIONS, METADATA

from .. import metrics
from .view import Broker, PartitionState, TopicView

METADATA_VERSIONS = (1, 12)  # v1: a null topic list asks for every topic; v10+: topic ids
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # a bigger answer is a broken broker, not a big cluster
MIN_BACKOFF = 0.25  # seconds before the first retry after a round in which no broker answered
WANT_INTERVAL = 0.25  # seconds: the least time between two refreshes asked for by subscriptions
CLIENT_ID = "groupkeeper"


class Login(Protocol):
    """One connection's SASL login, sans I/O (`security.upstream.Login`)."""

    def first(self) -> bytes:
        """The first request, a whole frame (size included)."""

    def feed(self, frame: bytes) -> bytes | None:
        """The next request for the answer `frame` (without its size); None: authenticated.
        Raises PermissionError (the broker refused, or answered wrongly), saying why."""


class Security(Protocol):
    """How to connect to the brokers (`security.upstream.UpstreamSecurity`)."""
    tls: ssl.SSLContext | None  # None: no TLS

    def server_hostname(self, host: str) -> str:
        """The name the broker's certificate is checked against."""

    def login(self) -> Login | None:
        """A new login for a connection; None: no SASL."""


class BrokerTopics(TopicView):
    def __init__(self, bootstrap: Sequence[tuple[str, int]], max_age: float, timeout: float = 10.0,
                 security: Security | None = None):
        super().__init__()
        self.bootstrap = list(bootstrap)
        self.max_age = max_age
        self.timeout = timeout  # for connecting (TLS and SASL included), and for each answer
        self.security = security  # None: PLAINTEXT
        self.log = structlog.get_logger("groupkeeper.topics").bind(source="brokers")
        self._connection: BrokerConnection | None = None
        self._wanted = trio.Event()
        self._last_round = (-math.inf, False)  # (trio time the last round began, whether a broker answered)
        self._round_ended = trio.Event()  # set, and replaced, as each round ends

    def want(self, topic: str) -> None:
        self._wanted.set()

    async def partition_counts(self, topics: set[str], timeout: float) -> dict[str, int] | None:
        """From a round begun after this call: the next one is asked for at once (within
        `WANT_INTERVAL` of the last), and its answer is the brokers' now. None if no broker
        answers that round, or it does not end within `timeout`."""
        began = trio.current_time()
        self.want("")
        with trio.move_on_after(timeout):
            while True:
                await self._round_ended.wait()
                round_began, answered = self._last_round
                if round_began >= began:
                    return {topic: self.partitions.get(topic, 0) for topic in topics} if answered else None
        return None

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Learn, then keep learning; started after the first round, answered or not: a
        cluster that cannot be reached delays nothing else."""
        backoff = MIN_BACKOFF
        try:
            while True:
                learned = await self.refresh()
                task_status.started()
                task_status = trio.TASK_STATUS_IGNORED
                backoff = MIN_BACKOFF if learned else min(backoff * 2, self.max_age)
                with trio.move_on_after(self.max_age if learned else backoff):
                    await trio.sleep(WANT_INTERVAL)
                    await self._wanted.wait()
                self._wanted = trio.Event()
        finally:
            if self._connection is not None:
                self._connection.close()

    async def refresh(self) -> bool:
        """One round: ask the brokers in turn until one answers. Whether one did."""
        began, answered = trio.current_time(), False
        try:
            answered = await self._round()
        finally:
            self._last_round = (began, answered)
            ended, self._round_ended = self._round_ended, trio.Event()
            ended.set()
        return answered

    async def _round(self) -> bool:
        tried = []
        for address in self._candidates():
            try:
                with trio.fail_after(self.timeout):
                    answer = await self._ask(address)
            except (OSError, trio.TooSlowError, trio.BrokenResourceError, ProtocolError, _Refused,
                    _NotAdmitted) as exc:
                kind, text = _failure(exc)
                tried.append(f"{address[0]}:{address[1]} ({text})")
                metrics.TOPIC_METADATA_FAILURES.labels(kind).inc()
                if self._connection is not None:
                    self._connection.close()
                    self._connection = None
                continue
            self._learn(answer)
            return True
        self.log.warning("no broker answered Metadata: serving from what was known",
                         tried=tried, age_s=None if math.isinf(self.age()) else round(self.age(), 1))
        return False

    def _candidates(self) -> list[tuple[str, int]]:
        """The broker connected now, the live brokers of the last answer, the bootstrap list."""
        order = [] if self._connection is None else [self._connection.address]
        order += [(b.host, b.port) for _, b in sorted(self.brokers.items())]
        order += self.bootstrap
        return list(dict.fromkeys(order))

    async def _ask(self, address: tuple[str, int]):
        if self._connection is None:
            self._connection = await BrokerConnection.open(address, self.security)
            self.api_versions = await self._connection.api_versions()
        low, high = self.api_versions.get(METADATA.key, (0, -1))
        version = min(high, METADATA_VERSIONS[1])
        if version < max(low, METADATA_VERSIONS[0]):
            raise _Refused(f"Metadata v{low}-{high} only")
        return await self._connection.call(METADATA, version, {
            "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})

    def _learn(self, answer) -> None:
        """The view becomes the answer: topics (and their changes announced), leaders, brokers."""
        self.brokers = {b.node_id: Broker(b.node_id, b.host, b.port, b.rack) for b in answer.brokers}
        self.cluster_id = answer.cluster_id
        self.controller_id = answer.controller_id if answer.controller_id in self.brokers else None
        listed = set()
        for topic in answer.topics:
            if topic.error_code != ErrorCode.NONE or not topic.name:
                continue  # not authorized, or being deleted: as if absent
            listed.add(topic.name)
            partitions = [p for p in topic.partitions if 0 <= p.partition_index < len(topic.partitions)]
            self._set_topic(topic.name, {p.partition_index: list(p.replica_nodes) for p in partitions},
                            topic.topic_id)  # NO_TOPIC_ID from brokers before Metadata v10
            for p in partitions:
                if p.leader_id >= 0:
                    self.states[(topic.name, p.partition_index)] = PartitionState(
                        p.leader_id, tuple(p.isr_nodes), p.leader_epoch)
                else:
                    self.states.pop((topic.name, p.partition_index), None)
        for gone in set(self.partitions) - listed:
            self._forget(gone)
        self.learned_at = trio.current_time()


class _Refused(Exception):
    """A broker that answered, but not what we can use."""


class _NotAdmitted(Exception):
    """TLS or the SASL login with a broker failed."""

    def __init__(self, kind: str, text: str):
        super().__init__(text)
        self.kind = kind  # "tls" or "authentication"


def _failure(exc: BaseException) -> tuple[str, str]:
    """(kind, as a metric's label; what happened, for the log)."""
    if isinstance(exc, trio.TooSlowError):
        return "timeout", "no answer in time"
    if isinstance(exc, _NotAdmitted):
        return exc.kind, str(exc)
    if isinstance(exc, (ProtocolError, _Refused)):
        return "bad answer", str(exc)
    if isinstance(exc, trio.BrokenResourceError):
        if isinstance(exc.__cause__, ssl.SSLError):  # an alert after the handshake (a certificate refused)
            return "tls", _tls_text(exc.__cause__)
        return "connection lost", str(exc) or "connection lost"
    return "unreachable", str(exc) or type(exc).__name__


def _tls_text(exc: ssl.SSLError) -> str:
    verify = getattr(exc, "verify_message", None)
    return f"TLS: {exc.reason or exc}" + (f" ({verify})" if verify else "")


class BrokerConnection:
    """One connection to a broker speaking our codec, a request at a time."""

    def __init__(self, address: tuple[str, int], stream: trio.abc.Stream, transport: trio.SocketStream):
        self.address = address
        self.stream = stream  # the transport, or TLS over it
        self.transport = transport
        self.reader = FrameReader(MAX_ANSWER_BYTES)
        self.correlation = 0

    @classmethod
    async def open(cls, address: tuple[str, int], security: Security | None = None) -> BrokerConnection:
        """Connected, through TLS and SASL if `security` asks for them."""
        transport = await trio.open_tcp_stream(*address)
        try:
            stream: trio.abc.Stream = transport
            if security is not None and security.tls is not None:
                stream = trio.SSLStream(transport, security.tls, server_hostname=security.server_hostname(address[0]))
                try:
                    await stream.do_handshake()
                except trio.BrokenResourceError as exc:
                    cause = exc.__cause__
                    raise _NotAdmitted("tls", _tls_text(cause) if isinstance(cause, ssl.SSLError) else
                                       f"TLS: {cause or exc}") from None
            connection = cls(address, stream, transport)
            login = security.login() if security is not None else None
            if login is not None:
                await connection.log_in(login)
        except BaseException:
            transport.socket.close()
            raise
        return connection

    async def log_in(self, login: Login) -> None:
        request = login.first()
        while request is not None:
            try:
                await self.stream.send_all(request)
                answer = await self._answer()
            except trio.BrokenResourceError as exc:
                if isinstance(exc.__cause__, ssl.SSLError):
                    raise _NotAdmitted("tls", _tls_text(exc.__cause__)) from None
                raise _NotAdmitted("authentication", f"the broker went away during SASL: {exc}") from None
            except ProtocolError as exc:
                raise _NotAdmitted("authentication", f"bad frame from the broker during SASL: {exc}") from None
            try:
                request = login.feed(answer)
            except PermissionError as exc:  # security.upstream.LoginFailed
                raise _NotAdmitted("authentication", str(exc)) from None

    async def _answer(self) -> bytes:
        """The next answer frame (one only: a request is answered before the next is sent)."""
        while not (frames := self.reader.frames()):
            data = await self.stream.receive_some(65536)
            if not data:
                raise trio.BrokenResourceError("closed by the broker")
            self.reader.feed(data)
        if len(frames) > 1:
            raise _Refused("answered more than was asked")
        return frames[0]

    async def api_versions(self) -> dict[int, tuple[int, int]]:
        """The broker's API ranges (ApiVersions v3, or v0 if it does not speak v3, or answers
        v3 with what does not read: librdkafka's mock cluster refuses v3 in a shape of its own,
        and librdkafka, like Kafka's clients, then asks v0)."""
        try:
            answer = await self.call(API_VERSIONS, 3, {"client_software_name": CLIENT_ID,
                                                       "client_software_version": "1"})
        except DecodeError:
            answer = None
        if answer is None or answer.error_code == ErrorCode.UNSUPPORTED_VERSION:
            answer = await self.call(API_VERSIONS, 0, {})
        if answer.error_code != ErrorCode.NONE:
            raise _Refused(f"ApiVersions error {answer.error_code}")
        return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}

    async def call(self, api: Api, version: int, body: dict):
        self.correlation += 1
        await self.stream.send_all(encode_request(
            RequestHeader(api.key, version, self.correlation, CLIENT_ID), build(api.request.struct, body)))
        # read as clients read a broker's answer: bytes past the schema ignored
        correlation_id, answer, _ = decode_broker_response(api.key, version, await self._answer())
        if correlation_id != self.correlation:
            raise _Refused(f"answered request {correlation_id}, not {self.correlation}")
        return answer

    def close(self) -> None:
        self.transport.socket.close()


class NodeConnections:
    """A connection to each broker asked (by node id, its address from `view`), opened when
    first needed with its API ranges asked once; one request at a time on each (callers take
    turns); a connection whose request fails is closed, and the next call opens another."""

    def __init__(self, view, security: Security | None = None):
        self.view = view
        self.security = security
        self._open: dict[int, tuple[BrokerConnection, dict[int, tuple[int, int]]]] = {}
        self._turns: dict[int, trio.Lock] = {}

    async def call(self, node: int, api: Api, versions: tuple[int, int], body: dict):
        """`api`'s answer from `node`, asked in the highest version within `versions` the
        broker speaks (ProtocolError when none). Raises what the connection raises."""
        async with self._turns.setdefault(node, trio.Lock()):
            try:
                if node not in self._open:
                    broker = self.view.brokers[node]
                    connection = await BrokerConnection.open((broker.host, broker.port), self.security)
                    try:
                        self._open[node] = connection, await connection.api_versions()
                    except BaseException:
                        connection.close()
                        raise
                connection, ranges = self._open[node]
                low, high = ranges.get(api.key, (0, -1))
                version = min(high, versions[1])
                if version < max(low, versions[0]):
                    raise ProtocolError(f"the broker serves {api.name} v{low}-{high} only")
                return await connection.call(api, version, body)
            except BaseException:
                self.drop(node)
                raise

    def drop(self, node: int) -> None:
        opened = self._open.pop(node, None)
        if opened is not None:
            opened[0].close()

    def close(self) -> None:
        for node in list(self._open):
            self.drop(node)
