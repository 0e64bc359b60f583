"""`Gateway`: the cluster's broker nodes as ports of this instance, and relaying to them.

It follows the brokers the topic source learns (the cluster's own Metadata, every
`metadata_max_age_ms`, and at once when a relayed answer names a node it does not know):
a node that appears gets its ports (`ports.PortScheme`) on every listener, a node that
leaves has them closed with its clients' connections, so that they look the cluster up
again. A node refused a port (its id out of range, its port taken) is one log line, once,
and is left out of the answers, never a crash.

`relay` hands a client's request frame to that connection's `BrokerLink`, made on first
use: to the broker its port stands for, or, on a listener's own port, to one of the
cluster's brokers (the same one for as long as the connection lasts). An answer that names
brokers is rewritten on its way back (`rewrite`): the nodes' addresses become this
instance's ports, and this instance's coordinator nodes are added to Metadata.
"""

from __future__ import annotations

import itertools
import socket
import struct
import uuid
from collections import Counter
from collections.abc import Callable
from functools import partial

import trio

from protocol import ErrorCode, ProtocolError
from protocol.framing import frame as framed
from protocol.peek import head, produce_acks
from protocol.schemas import APIS, END_TXN, FETCH, FIND_COORDINATOR, METADATA, PRODUCE

from .. import logs, metrics
from ..listeners import Listener
from ..serving.interfaces import CloseConnection
from ..serving.pending import Pending
from ..topics.brokers import BrokerConnection, BrokerTopics
from ..topics.log_ends import LogEnds
from . import rewrite, transactions
from .links import BrokerLink, BrokerSecurity, FetchReading
from .ports import PortScheme

SYNC_INTERVAL = 1.0  # seconds between looks at the brokers the topic source knows
MAX_TOPIC_NAMES = 100_000  # topic ids whose names are remembered (a lookup for the rest)
MAX_ANSWER_READINGS = 1_000  # (api, version, listener, broker) kept for the data path; past it, made again
_VERSION_CORRELATION = struct.Struct(">hi")  # a request's api version and correlation id, after its size and api key
# how long a share group's or transactional id's coordinator is taken as known (NOT_COORDINATOR forgets it)
ROUTE_SECONDS = 60.0
MAX_ROUTES = 100_000  # share groups and transactional ids whose coordinators are remembered
SHARE, TRANSACTION = 0, 1  # FindCoordinator's key types
MAX_METADATA_REWRITES = 64  # brokers' Metadata answers whose rewrites are remembered (`_metadata_rewriter`)
MAX_MALFORMED_LOGGED = 10_000  # (broker, API, kind) of malformed answers remembered as logged (past it: logged again)


class Gateway:
    def __init__(self, topics: BrokerTopics, listeners: list[tuple[Listener, Listener]], scheme: PortScheme,
                 coordinator_nodes: Callable[[str], list[tuple[int, str, int]]], taken: set[int],
                 security: BrokerSecurity | None = None, max_links: int = 10_000):
        """`listeners`: (bound, advertised) in configuration order; `coordinator_nodes`:
        this deployment's instances as (node id, host, port) on a listener (by name);
        `taken`: ports of ours that no node may have (listeners, the metrics endpoint);
        `security`: how the links connect to the brokers (default PLAINTEXT); `max_links`:
        connections to one broker at most (gateway_max_connections_per_broker)."""
        self.topics = topics
        self.listeners = listeners
        self.scheme = scheme
        self.coordinator_nodes = coordinator_nodes
        self.taken = taken
        self.security = security if security is not None else BrokerSecurity()
        self.max_links = max_links
        self._links: Counter[tuple[str, int]] = Counter()  # open links by broker
        self._full: set[tuple[str, int]] = set()  # brokers at max_links, logged once each
        self.server = None  # the Server whose poll loop serves the links; set by `run`
        self.log = logs.get("groupkeeper.gateway")
        self.open: set[int] = set()  # nodes whose ports are open
        self.addresses: dict[int, tuple[str, int]] = {}  # node -> (host, port) as the cluster names it
        self._resolved: dict[tuple[str, int], tuple[int, tuple]] = {}  # (host, port) -> (family, sockaddr)
        self._refused: dict[int, str] = {}  # nodes refused a port, and why (logged once)
        self._failing: set[tuple[str, int]] = set()  # brokers in an outage, logged once each
        self._any = itertools.count()
        self._changed = trio.Event()
        self._index = {bound.name: i for i, (bound, _) in enumerate(listeners)}
        self._advertised = {bound.name: advertised for bound, advertised in listeners}
        self._log_ends: LogEnds | None = None
        # (key type, key) -> (the broker that coordinates it, until when): share groups (key
        # type 0) and transactional ids (1), asked of the cluster
        self._routes: dict[tuple[int, str], tuple[int, float]] = {}
        self._route_lock = trio.Lock()
        self._route_lookup: BrokerConnection | None = None  # the gateway's own connection for finding them
        self._lookup_versions: dict[int, tuple[int, int]] = {}
        self._topic_names: dict[bytes, str] = {}  # topic ids (as Fetch v13+ has them) -> names, as looked up
        # (api key, version, listener, broker) -> how a Produce's or Fetch's answer is read (its
        # rewriter, its FetchReading): made once, not per record
        self._readings: dict[tuple[int, int, str, tuple[str, int]],
                             tuple[Callable[[bytes], bytes] | None, FetchReading | None]] = {}
        # Produce and Fetch requests pass with no more than their headers read (`express`, and a
        # Produce as it arrives: `stream`); off with ACLs, which read their topics (GatewayClusterApi)
        self.passes_unread = True
        # (version, listener, answer's size) -> (the broker's answer after its correlation id, the
        # coordinator nodes and open nodes then, the rewrite's size prefix and bytes after its correlation id)
        self._metadata_rewrites: dict[tuple[int, str, int], tuple[bytes, list, set[int], bytes, bytes]] = {}
        self._malformed: set[tuple[tuple[str, int], int, str]] = set()  # (broker, api key, kind) logged once
        # where the transaction states relayed answers say are recorded (InitProducerId, EndTxn), if they are
        self.transactions: transactions.Recorder | None = None

    # -- nodes ---------------------------------------------------------------------------

    async def run(self, server, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Keep the node ports in step with the cluster's brokers, for ever."""
        self.server = server
        await self.prepare()
        await self._sync()
        task_status.started()
        while True:
            with trio.move_on_after(SYNC_INTERVAL):
                await self._changed.wait()
            self._changed = trio.Event()
            await self._sync()

    async def prepare(self) -> None:
        """Look the bootstrap brokers up: before the listeners serve, so that a client's first
        relayed request has a broker to go to even before the cluster's nodes are known."""
        for address in self.topics.bootstrap:
            await self._resolve(address)

    async def _sync(self) -> None:
        brokers = dict(self.topics.brokers)
        for node, broker in sorted(brokers.items()):
            address = (broker.host, broker.port)
            if not await self._resolve(address):
                continue
            self.addresses[node] = address
            if node not in self.open and node not in self._refused:
                await self._open(node)
        for node in sorted(self.open - set(brokers)):
            self.server.close_node(node)
            self.open.discard(node)
            self.addresses.pop(node, None)
            self.log.info("broker node left: its ports closed", node=node)
        for node in [n for n in self._refused if n not in brokers]:
            del self._refused[node]  # if it comes back, it is looked at (and logged) again
        metrics.GATEWAY_NODE_PORTS.set(len(self.open))

    async def _open(self, node: int) -> None:
        refusal = self.scheme.refusal(node, self.taken)
        opened = []
        if refusal is None:
            try:
                for i, (bound, _) in enumerate(self.listeners):
                    port = self.scheme.bound(node, i)
                    opened += [(listener, bound) for listener in
                               await trio.open_tcp_listeners(port, host=bound.host or None)]
            except OSError as exc:
                refusal = f"cannot listen on its port: {exc.strerror or exc}"
                for listener, _ in opened:
                    await listener.aclose()
        if refusal is not None:
            self._refused[node] = refusal
            self.log.error("broker node not reachable through this gateway", node=node, reason=refusal)
            return
        self.server.open_node(node, opened)
        self.open.add(node)
        self.log.info("broker node reachable", node=node, broker=f"{self.addresses[node][0]}:{self.addresses[node][1]}",
                      ports=[self.scheme.advertised(node, i) for i in range(len(self.listeners))])

    async def _resolve(self, address: tuple[str, int]) -> bool:
        """Whether `address` has a socket address (looked up once, off the poll loop)."""
        if address in self._resolved:
            return True
        try:
            found = await trio.socket.getaddrinfo(address[0], address[1], type=socket.SOCK_STREAM)
        except OSError as exc:
            self.log.warning("broker address cannot be resolved", broker=f"{address[0]}:{address[1]}",
                             error=str(exc))
            return False
        family, _, _, _, sockaddr = found[0]
        self._resolved[address] = (family, sockaddr)
        return True

    @property
    def log_ends(self) -> LogEnds | None:
        """Where relayed Fetch answers' high watermarks go, if consumer lag is measured."""
        return self._log_ends

    @log_ends.setter
    def log_ends(self, ends: LogEnds | None) -> None:
        self._log_ends = ends
        self._readings.clear()  # Fetch answers' readings hand their partitions to `ends` from now on

    def exposed(self, listener: str) -> Callable[[int], tuple[str, int] | None]:
        """Where a client of `listener` (by name) reaches each node through this instance:
        None for a node without ports (and one not known yet is looked for at once)."""
        index, advertised = self._index[listener], self._advertised[listener]

        def address(node: int) -> tuple[str, int] | None:
            if node in self.open:
                return advertised.host, self.scheme.advertised(node, index)
            if node not in self._refused:
                self._changed.set()
                self.topics.want("")
            return None
        return address

    # -- relaying ------------------------------------------------------------------------

    def relay(self, connection, frame: bytes, merge: Callable[[bytes], bytes] | None = None,
              node: int | None = None, pending: Pending | None = None) -> Pending | None:
        """Pass `frame` to the connection's broker (or to broker `node`, on a link of the
        connection's own to it); its answer (rewritten if it names brokers) completes the
        Pending returned (`pending`, if given); None for a Produce with acks=0, which has none.
        `merge` (with ACLs: the authorization's errors, answers filtered) changes the answer
        (a frame without its size) before it is rewritten."""
        try:
            api_key, api_version, correlation_id = head(frame)
            no_answer = api_key == PRODUCE.key and produce_acks(frame) == 0
        except ProtocolError as exc:
            raise CloseConnection(f"undecodable request: {exc}") from None
        link = connection.upstream
        if link is None or link.closed:
            link = connection.upstream = self._link(connection)
        if node is not None:
            link = self._routed_link(connection, link, node)
        if (api_key == PRODUCE.key or api_key == FETCH.key) and merge is None:
            # the data path: the request goes out first, what its answer needs is set up
            # after it (`BrokerLink.expect`), off the time from its arrival to its relay
            link.send(frame, None)
            return self._relayed(link, api_key, api_version, correlation_id, len(frame), no_answer, pending)
        metrics.gateway_relayed(api_key, link.node, len(frame))
        if no_answer:
            link.send(frame, None)
            return None
        pending = Pending() if pending is None else pending
        listener = connection.client.listener.name
        rewriter = self._rewriter(api_key, api_version, listener, merge, link.address)
        if self.transactions is not None and api_key == END_TXN.key:  # answered once its end is recorded
            held = self.transactions.hold_end(api_version, frame, pending)
            if held is not None:
                link.send(frame, (held, correlation_id, rewriter, None))
                return pending
        elif self.transactions is not None and api_key in transactions.OBSERVED:  # read on the way
            rewriter = transactions.observing(api_key, api_version, frame, self.transactions, rewriter)
        # a Fetch answer with `merge` (ACLs) is gathered and rewritten whole (its high
        # watermarks not read); without, it took the data path above
        link.send(frame, (pending, correlation_id, rewriter, None))
        return pending

    def express(self, link: BrokerLink, data: bytes) -> Pending | None | bool:
        """A Produce or Fetch read whole in one read (`data`, its size first), which `relay`
        would pass on unchanged, sent as it came by `link` (whose queue is empty): the data
        path's common case in as few steps as may be, since its Python steps are most of what
        a record costs the gateway (docs/benchmarks.md). Its answer's Pending, None for a
        Produce with acks=0, False for anything else (another API, ACLs on, a header that
        does not read: then it goes the usual way, which refuses it if it must)."""
        api_key = data[5]
        if data[4] or api_key > 1 or not self.passes_unread:  # api keys 0 and 1 (Produce, Fetch), no ACLs
            return False
        try:
            api_version, correlation_id = _VERSION_CORRELATION.unpack_from(data, 6)
            no_answer = not api_key and produce_acks(data, 4) == 0
        except (ProtocolError, IndexError, struct.error):
            return False
        link.send_now(data)
        return self._relayed(link, api_key, api_version, correlation_id, len(data) - 4, no_answer)

    def _relayed(self, link: BrokerLink, api_key: int, api_version: int, correlation_id: int, size: int,
                 no_answer: bool, pending: Pending | None = None) -> Pending | None:
        """What follows a Produce or Fetch of `size` bytes that `link` has just sent, with no
        ACLs: counted, and its answer expected (its Pending: `pending` if given; None for a
        Produce with acks=0)."""
        metrics.gateway_relayed(api_key, link.node, size)
        if no_answer:
            return None
        pending = Pending() if pending is None else pending
        rewriter, walks = self._reading(api_key, api_version, link)
        link.expect((pending, correlation_id, rewriter, walks))
        return pending

    def _reading(self, api_key: int, version: int, link: BrokerLink):
        """How the answer to a Produce or Fetch relayed by `link` without ACLs is read: what
        rewrites it whole, if it may name brokers, and for a Fetch how it is walked as it
        streams (its tagged fields fixed in place, its high watermarks read where lag is
        measured), or None. Made once per (api, version, listener, broker)."""
        listener = link.connection.client.listener.name
        key = (api_key, version, listener, link.address)
        try:
            return self._readings[key]
        except KeyError:
            if len(self._readings) >= MAX_ANSWER_READINGS:
                self._readings.clear()
            rewriter = self._rewriter(api_key, version, listener, None, link.address)
            walks = (self._walks(version, listener, rewriter is not None)
                     if api_key == FETCH.key and (rewriter is not None or self.log_ends is not None) else None)
            made = self._readings[key] = (rewriter, walks)
            return made

    def stream(self, link: BrokerLink, start, size: int) -> Pending | None | bool:
        """A Produce of `size` bytes relayed as it comes, once `start` (its first bytes) has:
        its records pass on from the client's socket in the order they arrive, never held
        whole (`BrokerLink.forward`). Only where nothing of the request needs reading past
        its header: not with ACLs (`passes_unread` False: the topics are authorized, the
        request perhaps cut), and not for another API. False: read it whole and relay it
        as any (also while `start` is too short to tell its acks)."""
        if not self.passes_unread:
            return False
        try:
            api_key, api_version, correlation_id = head(start)
            if api_key != PRODUCE.key:
                return False
            no_answer = produce_acks(start) == 0
        except ProtocolError:
            return False
        metrics.gateway_relayed(api_key, link.node, size)
        if no_answer:
            link.send_start(size, start, None)
            return None
        pending = Pending()
        link.send_start(size, start, (pending, correlation_id, self._reading(PRODUCE.key, api_version, link)[0], None))
        return pending

    def _walks(self, version: int, listener: str, rewritten: bool) -> FetchReading:
        fix = partial(rewrite.node_endpoints_in_place, addresses=self.exposed(listener)) if rewritten else None
        seen = self._high_watermarks() if self.log_ends is not None else None
        return FetchReading(version, seen, fix)

    def _high_watermarks(self) -> Callable[[str | bytes, int, int, int], None]:
        """What a walk hands each partition of a Fetch answer to: its high watermark, kept
        as its log's end when seen (topics named by id from Fetch v13 are looked up by name)."""
        ends, names, now = self.log_ends, self._topic_names, trio.current_time

        def seen(topic: str | bytes, partition: int, error: int, high_watermark: int) -> None:
            if error:
                return
            if isinstance(topic, bytes):
                name = names.get(topic)
                if name is None:
                    name = self.topics.names_by_id.get(uuid.UUID(bytes=topic))
                    if name is None:
                        return
                    if len(names) < MAX_TOPIC_NAMES:
                        names[topic] = name
                topic = name
            ends.seen(topic, partition, high_watermark, now())
        return seen

    def answer(self, frame: bytes) -> Pending:
        """A Pending already answered with `frame` (a request answered here, in its place)."""
        pending = Pending()
        pending.resolve(lambda: frame)
        return pending

    def _rewriter(self, api_key: int, api_version: int, listener: str,
                  merge: Callable[[bytes], bytes] | None = None,
                  broker: tuple[str, int] = ("", 0)) -> Callable[[bytes], bytes] | None:
        lowest = rewrite.REWRITTEN.get(api_key)
        if lowest is None or api_version < lowest:
            if merge is None:
                return None
            return self._reported(lambda frame: framed(merge(frame)), broker, api_key)
        exposed = self.exposed(listener)
        extra = self.coordinator_nodes(listener) if api_key == METADATA.key else []

        def past() -> None:
            self.malformed(broker, api_key, "past_schema")
        if merge is not None:
            return self._reported(lambda frame: rewrite.rewrite_frame(
                api_key, api_version, merge(frame), exposed, extra, past), broker, api_key)
        if api_key == METADATA.key:
            return self._reported(self._metadata_rewriter(api_version, listener, exposed, extra, past), broker, api_key)
        if api_key == PRODUCE.key or api_key == FETCH.key:
            return self._reported(rewrite.node_endpoints_rewriter(api_key, api_version, exposed, past), broker, api_key)
        return self._reported(lambda frame: rewrite.rewrite_frame(api_key, api_version, frame, exposed, extra, past),
                              broker, api_key)

    def _reported(self, rewriter: Callable[[bytes], bytes], broker: tuple[str, int],
                  api_key: int) -> Callable[[bytes], bytes]:
        """`rewriter`, whose answers that do not read are counted and logged (once per broker,
        API and kind) before they close the client's connection (their link's `close`): an
        answer that names brokers cannot be passed on unread, nor one the gateway must merge
        its authorization errors into."""
        def reported(frame: bytes) -> bytes:
            try:
                return rewriter(frame)
            except ProtocolError as exc:
                self.malformed(broker, api_key, "closed", str(exc))
                raise
        return reported

    def malformed(self, broker: tuple[str, int], api_key: int, kind: str, error: str = "") -> None:
        """A broker's answer that was not as its schema says (`kind`: past_schema, relayed,
        closed; docs/metrics.md): counted each time, logged once per broker, API and kind."""
        api = APIS.get(api_key)
        name = api.name if api is not None else str(api_key)
        metrics.BROKER_ANSWERS_MALFORMED.labels(name, kind).inc()
        key = (broker, api_key, kind)
        if key in self._malformed:
            return
        if len(self._malformed) < MAX_MALFORMED_LOGGED:
            self._malformed.add(key)
        where = f"{broker[0]}:{broker[1]}"
        if kind == "past_schema":
            self.log.warning("a broker's answers carry bytes past their schema: read as clients read them, "
                             "those bytes dropped where the answer is rewritten", broker=where, api=name)
        elif kind == "relayed":
            self.log.warning("a broker's answer does not read: relayed as it came (nothing in it to rewrite)",
                             broker=where, api=name, error=error)
        else:
            self.log.error("a broker's answer does not read and names brokers (or takes the gateway's "
                           "authorization errors): its clients' connections are closed", broker=where, api=name,
                           error=error)

    def _metadata_rewriter(self, version: int, listener: str, exposed, extra: list,
                           past: Callable[[], None] | None = None) -> Callable[[bytes], bytes]:
        """A broker's Metadata answer rewritten; or, when it is byte for byte the answer last
        rewritten of its size, version and listener (its correlation id apart) and the nodes
        with ports and the coordinator nodes are what they were then, that rewrite again,
        with this answer's correlation id (decoding and encoding 1,000 partitions costs
        milliseconds). The broker is asked every time, so a leader's change is seen at once:
        what is remembered is the rewriting, never the answer. One that named a node without
        ports is not remembered (rewriting it again looks for the node)."""
        def rewritten(frame: bytes) -> bytes:
            key = (version, listener, len(frame))
            known = self._metadata_rewrites.get(key)
            if (known is not None and known[1] == extra and known[2] == self.open
                    and (frame.endswith(known[0]) if type(frame) is bytes else bytes(frame[4:]) == known[0])):
                return b"".join((known[3], frame[:4], known[4]))
            missed = []

            def address(node: int) -> tuple[str, int] | None:
                if (found := exposed(node)) is None:
                    missed.append(node)
                return found
            answer = rewrite.rewrite_frame(METADATA.key, version, frame, address, extra, past)
            if not missed:
                if key not in self._metadata_rewrites and len(self._metadata_rewrites) >= MAX_METADATA_REWRITES:
                    del self._metadata_rewrites[next(iter(self._metadata_rewrites))]  # the oldest
                self._metadata_rewrites[key] = (bytes(frame[4:]), list(extra), set(self.open), answer[:4], answer[8:])
            return answer
        return rewritten

    def _link(self, connection, node: int | None | object = ...) -> BrokerLink:
        """A new link for `connection`: to the broker its port stands for, or to `node`."""
        if node is ...:
            node = connection.client.node
        if node is None:  # a listener's own port: any broker, in turn, those in an outage last
            known = sorted(n for n in self.open if n in self.addresses)
            known = [n for n in known if self.addresses[n] not in self._failing] or known
            candidates = ([self.addresses[known[next(self._any) % len(known)]]] if known else []) + [
                a for a in self.topics.bootstrap if a in self._resolved]
            if not candidates:
                raise CloseConnection("no broker of the cluster is known yet")
            address = candidates[0]
        else:
            address = self.addresses.get(node)
            if address is None or node not in self.open:
                raise CloseConnection(f"broker node {node} is not in the cluster")
        if self._links[address] >= self.max_links:
            metrics.GATEWAY_UPSTREAM_FAILURES.labels(_node_label(node), "limit").inc()
            if address not in self._full:
                self._full.add(address)
                self.log.warning("connections to a broker at their limit: clients beyond it are closed",
                                 broker=f"{address[0]}:{address[1]}", limit=self.max_links)
            raise CloseConnection(f"{self.max_links} connections to broker {address[0]}:{address[1]} already "
                                  "(gateway_max_connections_per_broker)")
        family, sockaddr = self._resolved[address]
        self._links[address] += 1  # before the link exists: one that fails at once reports `closed`
        link = BrokerLink(self, connection, node, address, sockaddr, family, self.security)
        if link.closed:
            raise CloseConnection(f"cannot reach broker {address[0]}:{address[1]}")
        return link

    # -- share groups: each request to the broker that coordinates its group ----------------

    def share_coordinator(self, group: str) -> int | None:
        """The broker node that coordinates share group `group`, if known lately."""
        return self._route(SHARE, group)

    def forget_share_coordinator(self, group: str) -> None:
        self._routes.pop((SHARE, group), None)

    async def find_share_coordinator(self, group: str) -> int | None:
        """Ask the cluster (FindCoordinator, key type 0, as a share consumer would) which
        broker coordinates `group`; None if no broker says (kept ROUTE_SECONDS)."""
        return await self._find(SHARE, group)

    def transaction_coordinator(self, transactional_id: str) -> int | None:
        """The broker node that coordinates `transactional_id`, as last asked of the cluster."""
        return self._route(TRANSACTION, transactional_id)

    async def find_transaction_coordinator(self, transactional_id: str) -> int | None:
        """Ask the cluster (FindCoordinator, key type 1) which broker coordinates
        `transactional_id`, afresh; None if no broker says. A client asks after its
        coordinator failed it (NOT_COORDINATOR, a broken connection): never from memory."""
        return await self._find(TRANSACTION, transactional_id, fresh=True)

    def _route(self, key_type: int, key: str) -> int | None:
        known = self._routes.get((key_type, key))
        if known is None or known[1] < trio.current_time():
            return None
        return known[0]

    async def _find(self, key_type: int, key: str, fresh: bool = False) -> int | None:
        """One question at a time, on one connection of the gateway's own; answers kept
        ROUTE_SECONDS."""
        async with self._route_lock:
            if not fresh and (node := self._route(key_type, key)) is not None:
                return node
            for _ in range(2):  # a connection that went stale: once more on a new one
                try:
                    with trio.fail_after(self.topics.timeout):
                        node = await self._ask_coordinator(key, key_type)
                except Exception as exc:  # noqa: BLE001 - unreachable, refused, slow: the client is told to retry
                    if self._route_lookup is not None:
                        self._route_lookup.close()
                        self._route_lookup = None
                    self.log.info("finding a coordinator at the brokers failed", key=key[:200], key_type=key_type,
                                  error=f"{type(exc).__name__}: {exc}")
                    continue
                if node is None:
                    self._routes.pop((key_type, key), None)
                    return None
                if len(self._routes) >= MAX_ROUTES:  # bounded: the oldest half goes
                    for old in list(self._routes)[:MAX_ROUTES // 2]:
                        del self._routes[old]
                self._routes.pop((key_type, key), None)  # re-inserted: the oldest go first
                self._routes[(key_type, key)] = (node, trio.current_time() + ROUTE_SECONDS)
                return node
            return None

    async def _ask_coordinator(self, key: str, key_type: int) -> int | None:
        if self._route_lookup is None:
            addresses = [self.addresses[n] for n in sorted(self.open) if n in self.addresses] + self.topics.bootstrap
            if not addresses:
                raise LookupError("no broker of the cluster is known yet")
            self._route_lookup = await BrokerConnection.open(addresses[0], self.topics.security)
            self._lookup_versions = await self._route_lookup.api_versions()
        low, high = self._lookup_versions.get(FIND_COORDINATOR.key, (0, -1))
        version = min(high, FIND_COORDINATOR.request.versions.high)
        if version < max(low, 1):
            raise LookupError(f"the broker serves FindCoordinator v{low}-{high} only")
        if version >= 4:
            answer = await self._route_lookup.call(FIND_COORDINATOR, version, {"key_type": key_type,
                                                                               "coordinator_keys": [key]})
            found = answer.coordinators[0] if answer.coordinators else None
        else:
            found = answer = await self._route_lookup.call(FIND_COORDINATOR, version, {"key": key,
                                                                                       "key_type": key_type})
        if found is None or found.error_code != ErrorCode.NONE or found.node_id < 0:
            return None
        return found.node_id

    def send_routed(self, connection, node: int, frame: bytes, pending: Pending,
                    rewrite: Callable[[bytes], bytes] | None) -> None:
        """Relay `frame` to broker `node` on a link of `connection`'s own to it (kept by its
        upstream link), its answer completing `pending`, `rewrite` reading it on the way."""
        api_key, _, correlation_id = head(frame)
        up = connection.upstream
        if up is None or up.closed:
            up = connection.upstream = self._link(connection)
        link = self._routed_link(connection, up, node)
        metrics.gateway_relayed(api_key, node, len(frame))
        link.send(frame, (pending, correlation_id, rewrite, None))

    def _routed_link(self, connection, up: BrokerLink, node: int) -> BrokerLink:
        """`connection`'s link to broker `node`: its upstream link, or one of its extras."""
        if up.node == node:
            return up
        link = next((x for x in up.extras if x.node == node and not x.closed), None)
        if link is None:
            link = self._link(connection, node)
            up.extras = [x for x in up.extras if not x.closed] + [link]
        return link

    # -- what links report ---------------------------------------------------------------

    def unreachable(self, link: BrokerLink, error: str) -> None:
        metrics.GATEWAY_UPSTREAM_FAILURES.labels(_node_label(link.node), "unreachable").inc()
        if link.address not in self._failing:
            self._failing.add(link.address)
            self.log.warning("broker unreachable", broker=f"{link.address[0]}:{link.address[1]}", error=error)

    def reachable(self, link: BrokerLink) -> None:
        if link.address in self._failing:
            self._failing.discard(link.address)
            self.log.info("broker reachable again", broker=f"{link.address[0]}:{link.address[1]}")

    def received(self, link: BrokerLink, size: int) -> None:
        metrics.gateway_received(link.node, size)

    def spliced(self, link: BrokerLink, size: int) -> None:
        metrics.gateway_spliced(link.node, size)

    def streamed(self, link: BrokerLink, size: int) -> None:
        metrics.gateway_streamed(link.node, size)

    def closed(self, link: BrokerLink, reason: str) -> None:
        self._links[link.address] -= 1
        if not self._links[link.address]:
            del self._links[link.address]
        if link.address in self._full and self._links[link.address] < self.max_links:
            self._full.discard(link.address)
        if reason.startswith(("closed by the broker", "broker went away")):
            metrics.GATEWAY_UPSTREAM_FAILURES.labels(_node_label(link.node), "closed").inc()
            if link.address not in self._failing:
                self._failing.add(link.address)
                self.log.warning("broker closed its connection", broker=f"{link.address[0]}:{link.address[1]}",
                                 reason=reason)


def _node_label(node: int | None) -> str:
    return "any" if node is None else str(node)
