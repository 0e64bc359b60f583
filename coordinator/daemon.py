"""One groupkeeper instance: its ZooKeeper (embedded or external), its session, its place
in the instance registry, and an orderly shutdown on SIGINT or SIGTERM."""

from __future__ import annotations

import gc
import signal
import ssl
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

from . import logs, metrics, systemd
from .assignors import Assignor
from .assignors.registry import AssignorError, consumer_group_assignors, load_assignors
from .config import parse_address, parse_addresses
from .listeners import Listener, parse_listeners
from .events import DISCARD, EventLog
from .groups.consumer_group import ConsumerGroupConfig
from .groups.group import GroupConfig
from .groups.migration import POLICIES
from .cluster.membership import AlreadyRegistered, Instance, Membership
from .cluster import lag
from .cluster.ownership import Coordinator
from .api.router import Api
from .security.acls.store import AclStore
from .security.audit import AuditWatch
from .security.passwords import check_hash
from .security.sasl import MECHANISMS, Authentication, Pacing
from .security.tls import CLIENT_AUTH, TLSError, listener_context, server_context
from .security.upstream import UpstreamSecurity, configure as configure_upstream
from .security.users import UserStore
from .serving.metrics_http import serve_metrics
from .gateway.cluster import GatewayClusterApi
from .gateway.embedded import BrokerUnavailable, EmbeddedBroker
from .gateway.links import BrokerSecurity
from .gateway.nodes import Gateway
from .gateway.ports import PortScheme
from .serving.interfaces import Limits
from .serving.server import WAITS, Security, Server
from .store import layout, protection
from .store.blocking import read_digest
from .store.bridge import ZooKeeperBridge
from .topics.brokers import BrokerTopics
from .topics.log_ends import LogEndPoller, LogEnds
from .topics.markers import MarkerReader
from .topics.zookeeper import ZooKeeperTopics
from .store.session import SessionGuard
from .store.transactions import TransactionOutcomes
from .gateway.transactions import Recorder
from .store.zkserver import ZooKeeperServer, data_bytes
from .store.budget import Budget, derived_budget


# seconds after the ZooKeeper session timeout by which a crashed instance's groups are served
# again (the survivor's load, its clients' FindCoordinator): GroupConfig.failover_detection
FAILOVER_MARGIN = 3.0
ZOOKEEPER_DATA_INTERVAL = 5.0  # seconds between readings of how much data ZooKeeper holds
ZOOKEEPER_READY_TIMEOUT = 30.0  # seconds for the embedded ZooKeeper to serve at start-up
# The last steps of a shutdown, after the connections: deregistering (again) and closing the
# session, each at most this long. ZooKeeper answers them in milliseconds; unreachable, it
# never does (kazoo holds requests until it reconnects, and its close waits 10 s or more),
# and the session then ends by expiring, as after a crash.
LEAVE_ZOOKEEPER_TIMEOUT = 1.0
# SIGTERM to the embedded ZooKeeper, SIGKILL after this long: it exits in well under a
# second (0.4 s) unless it is hung (its data is safe either way: it syncs its log before
# answering a write).
EMBEDDED_ZOOKEEPER_STOP_TIMEOUT = 5.0
# The cyclic collector's thresholds once serving (Python's: 700, 10, 10). A commit's
# entries live until the member's next commit, long enough to be promoted, so at the
# defaults the collector ran 1,300 times in a 5,000 commits/s load and took 10 % of the
# core; at these, twice (docs/benchmarks.md, `bench load`, "Commits").
GC_THRESHOLDS = (50_000, 20, 100)


class StartupError(Exception):
    """A reason the instance cannot start, phrased for the operator."""


async def run(config: dict[str, Any]) -> None:
    log = logs.get("groupkeeper").bind(instance=config["instance_id"])
    try:  # before anything starts: a strategy that cannot load is a configuration error
        assignors = load_assignors(config["assignors"])
        consumer_assignors = consumer_group_assignors(config["group_consumer_assignors"], assignors)
    except AssignorError as exc:
        raise StartupError(str(exc)) from None
    if config["group_consumer_migration_policy"] not in POLICIES:
        raise StartupError(f"group_consumer_migration_policy must be one of {', '.join(POLICIES)}, "
                           f"not {config['group_consumer_migration_policy']!r}")
    if config["serving_wait"] not in WAITS:
        raise StartupError(f"serving_wait must be one of {', '.join(WAITS)}, not {config['serving_wait']!r}")
    if config["group_consumer_heartbeat_interval_ms"] >= config["group_consumer_session_timeout_ms"]:
        raise StartupError("group_consumer_heartbeat_interval_ms must be less than "
                           "group_consumer_session_timeout_ms")
    if config["embedded_broker"] and (config["gateway"] or config["brokers"]):
        raise StartupError("embedded_broker is the cluster: leave gateway and brokers empty")
    if config["embedded_broker"]:
        config = {**config, "gateway": config["embedded_broker"]}
    if config["gateway"] and config["brokers"]:
        raise StartupError("gateway names the cluster's brokers already: give gateway or brokers, not both")
    source = "gateway" if config["gateway"] else "brokers"
    try:
        bootstrap = parse_addresses(config[source]) if config[source] else None
    except ValueError as exc:
        raise StartupError(f"{source}: {exc}") from None
    metrics_tls = _metrics_security(config)
    listeners, tls = _listeners(config)
    upstream = _upstream_security(config, bootstrap is not None, log)
    digest = _zookeeper_digest(config["zookeeper_digest_file"])
    embedded = None
    hosts = config["zookeeper"]
    if not hosts:
        zk_dir = Path(config["data_dir"]) / "zookeeper"
        embedded = ZooKeeperServer(zk_dir, config["embedded_zookeeper_port"], heap_mb=config["embedded_zookeeper_heap_mb"])
        # spawned from trio's thread, the main one, which lives as long as this process: the
        # kernel kills the server when this process dies (PR_SET_PDEATHSIG follows the thread
        # that forks, and trio's worker threads end when idle)
        embedded.spawn()
    broker = None
    try:
        if embedded is not None:
            await trio.to_thread.run_sync(embedded.wait_ready, ZOOKEEPER_READY_TIMEOUT)
            hosts = embedded.connect_string
            log.info("embedded zookeeper started", zookeeper=hosts, data_dir=str(zk_dir))
        if config["embedded_broker"]:
            broker = EmbeddedBroker(*bootstrap[0], Path(config["data_dir"]))
            try:
                await broker.start()
            except BrokerUnavailable as exc:
                raise StartupError(str(exc)) from None
            log.info("embedded broker started", broker=config["embedded_broker"], log=str(broker.log_path))
        await _serve(config, hosts, (assignors, consumer_assignors), bootstrap, metrics_tls, listeners, tls, digest,
                     log, upstream)
    finally:
        if broker is not None:
            await broker.stop()
            log.info("embedded broker stopped")
        if embedded is not None:
            await trio.to_thread.run_sync(embedded.stop, EMBEDDED_ZOOKEEPER_STOP_TIMEOUT)
            log.info("embedded zookeeper stopped")


def _zookeeper_digest(path: str) -> tuple[str, str] | None:
    """(user, password) from zookeeper_digest_file, if set."""
    try:
        return read_digest(path) if path else None
    except ValueError as exc:
        raise StartupError(f"zookeeper_digest_file: {exc}") from None


def _listeners(config: dict[str, Any]) -> tuple[list[tuple[Listener, Listener]], dict[str, ssl.SSLContext]]:
    """Each listener to bind with what it advertises, and the TLS contexts by protocol if one
    speaks TLS: what is wrong stops start-up, named. As in Kafka, ssl_client_auth applies to
    SSL listeners; a SASL_SSL client authenticates with SASL and is not asked for a certificate."""
    try:
        bound, told = parse_listeners(config["listeners"], config["advertised_listeners"],
                                      config["listener_security_protocol_map"])
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    for name in config["sasl_enabled_mechanisms"]:
        if name not in MECHANISMS:
            raise StartupError(f"sasl_enabled_mechanisms: {name!r} is not one of {', '.join(MECHANISMS)}")
    if any(listener.sasl for listener in bound) and not config["sasl_enabled_mechanisms"]:
        raise StartupError("sasl_enabled_mechanisms is empty, but a listener speaks SASL")
    if config["ssl_client_auth"] not in CLIENT_AUTH:
        raise StartupError(f"ssl_client_auth must be one of {', '.join(CLIENT_AUTH)}, not {config['ssl_client_auth']!r}")
    tls = {}
    protocols = {listener.protocol for listener in bound if listener.tls}
    if protocols and not (config["ssl_certfile"] and config["ssl_keyfile"]):
        raise StartupError("an SSL or SASL_SSL listener needs ssl_certfile and ssl_keyfile")
    try:  # a context for each TLS protocol in use
        for protocol in sorted(protocols):
            tls[protocol] = listener_context(config["ssl_certfile"], config["ssl_keyfile"], config["ssl_cafile"],
                                             config["ssl_client_auth"] if protocol == "SSL" else "none")
    except TLSError as exc:
        raise StartupError(f"listeners: {exc}") from None
    return [(listener, told.get(listener.name, listener)) for listener in bound], tls


def _upstream_security(config: dict[str, Any], brokers: bool, log) -> UpstreamSecurity:
    """How this instance connects to the brokers (the gateway's links and the brokers topic
    source): what is wrong stops start-up, named; the password read from its file."""
    try:
        upstream = configure_upstream(
            config["gateway_security_protocol"], config["gateway_ssl_cafile"], config["gateway_ssl_certfile"],
            config["gateway_ssl_keyfile"], config["gateway_ssl_check_hostname"], config["gateway_sasl_mechanism"],
            config["gateway_sasl_username"], config["gateway_sasl_password_file"])
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    if upstream.protocol != "PLAINTEXT" and not brokers:
        raise StartupError(f"gateway_security_protocol {upstream.protocol} is for the connections to the brokers: "
                           "set gateway (or brokers) too")
    if upstream.protocol == "SASL_PLAINTEXT" and upstream.mechanism == "PLAIN":
        log.warning("gateway_sasl_mechanism PLAIN over SASL_PLAINTEXT sends the gateway's password to the brokers "
                    "in clear: use SASL_SSL or SCRAM")
    return upstream


def _metrics_security(config: dict[str, Any]) -> ssl.SSLContext | None:
    """The metrics endpoint's TLS context, if configured, with its users' hashes checked:
    what is wrong with either stops start-up, named."""
    for name, stored in config["metrics_users"].items():
        try:
            check_hash(stored)
        except ValueError as exc:
            raise StartupError(f"metrics_users: {name}: {exc}") from None
    cert, key = config["metrics_tls_cert"], config["metrics_tls_key"]
    if bool(cert) != bool(key):
        raise StartupError("metrics_tls_cert and metrics_tls_key go together: set both or neither")
    if not cert:
        return None
    try:
        return server_context(cert, key)
    except TLSError as exc:
        raise StartupError(f"metrics endpoint: {exc}") from None


async def _serve(config: dict[str, Any], hosts: str, assignors: tuple[dict[str, Assignor], dict[str, Assignor]],
                 bootstrap: list[tuple[str, int]] | None, metrics_tls: ssl.SSLContext | None,
                 kafka_listeners: list[tuple[Listener, Listener]], tls: dict[str, ssl.SSLContext],
                 digest: tuple[str, str] | None, log, upstream: UpstreamSecurity) -> None:
    listeners: list[tuple[trio.SocketListener, Listener]] = []
    endpoints = []
    try:  # before joining the cluster: a port in use stops start-up first
        for listener, advertised in kafka_listeners:
            sockets = await _listen(listener.host, listener.port)
            listeners += [(s, listener) for s in sockets]
            port = advertised.port or sockets[0].socket.getsockname()[1]
            if advertised.host in ("", "0.0.0.0", "::"):
                raise StartupError(f"listener {listener} binds every address: say in advertised_listeners "
                                   "which one its clients connect to")
            endpoints.append((listener.name, advertised.host, port))
        scheme = None
        if config["gateway"]:
            scheme = PortScheme(listeners[0][0].socket.getsockname()[1], endpoints[0][2], len(kafka_listeners),
                                config["gateway_node_port_offset"], config["gateway_max_node_id"])
            if problem := scheme.problem():
                raise StartupError(f"gateway: {problem}")
    except BaseException:
        for s, _ in listeners:
            s.socket.close()
        raise
    zk = ZooKeeperBridge(hosts, config["zk_session_timeout"], digest)
    try:  # not connected within one session timeout: give up
        await zk.start(timeout=config["zk_session_timeout"])
    except (trio.TooSlowError, ConnectionError):
        raise StartupError(f"cannot connect to ZooKeeper at {hosts}") from None
    try:
        try:
            if protected := await protection.protect(zk):
                log.info("zookeeper data protected", nodes=protected)
        except protection.Locked as exc:
            raise StartupError(str(exc)) from None
        membership = Membership(zk, Instance(config["instance_id"], endpoints[0][1], endpoints[0][2], tuple(endpoints)))
        try:  # a predecessor killed a moment ago holds the id until its session expires: wait that long
            await membership.register(wait=zk.session_timeout + 2)
        except AlreadyRegistered as exc:
            raise StartupError(str(exc)) from None
        # the event log outlives the coordinator's tasks, so that the last events are written
        async with trio.open_nursery() as events_nursery, trio.open_nursery() as nursery:
            guard = SessionGuard(zk)
            await nursery.start(guard.run)
            topics = (ZooKeeperTopics(zk) if bootstrap is None else
                      BrokerTopics(bootstrap, config["metadata_max_age_ms"] / 1000, security=upstream))
            await nursery.start(topics.run)
            metrics.TOPIC_METADATA_AGE.set_function(topics.age)
            events = DISCARD
            if config["events"]:
                events = EventLog(Path(config["data_dir"]) / "events", config["instance_id"],
                                  max_bytes=config["events_max_bytes"], max_age=config["events_max_age"],
                                  compress=config["events_compress"], queue_limit=config["events_queue_limit"])
                await events_nursery.start(events.run)
            classic_assignors, consumer_assignors = assignors
            group_config = replace(_group_config(config), failover_detection=zk.session_timeout + FAILOVER_MARGIN)
            if group_config.min_session_timeout <= group_config.failover_detection:
                log.info("failover detection", failover_detection_s=round(group_config.failover_detection, 3),
                         zk_session_timeout_s=round(zk.session_timeout, 3),
                         hint="classic members with a session timeout at or below it are rebalanced when this "
                              "instance crashes; longer sessions are not (docs/operations.md, What each failure costs)")
            coordinator = Coordinator(zk, guard, topics, membership, group_config, classic_assignors,
                                      config["strict_assignment"], events, consumer_assignors)
            guard.on_fenced, guard.on_recovered = coordinator.fenced, coordinator.recovered
            budget = coordinator.writer.budget = _data_budget(config, lambda: coordinator.group_partitions, log)
            log_ends = LogEnds()  # where partitions' logs end, and each partition's recent commits: for lag
            windows = lag.CommitWindows(log_ends)
            if config["metrics_listen"]:
                coordinator.on_durable = windows.committed
            # every transactional id's latest known state (begun, committed, aborted), for the
            # owners of groups with pending transactional offsets: coordinator.transactions
            outcomes = coordinator.transactions = TransactionOutcomes(zk, config["transactions_outcome_retention_ms"])
            metrics.TXN_PENDING.set_function(lambda: coordinator.pending_transactions()[0])
            metrics.TXN_PENDING_OLDEST.set_function(lambda: coordinator.pending_transactions()[1])
            if scheme is not None:  # ends the gateway did not record: read from the brokers' markers
                coordinator.markers = MarkerReader(topics, upstream)
                coordinator.pending_check_interval = config["transactions_check_interval_ms"] / 1000
                await nursery.start(coordinator.markers.run)
            await nursery.start(outcomes.run)
            await nursery.start(coordinator.run)
            authentication = acl_store = None
            if any(listener.sasl for listener, _ in kafka_listeners):
                users = UserStore(zk)
                await nursery.start(users.run)
                authentication = Authentication(config["sasl_enabled_mechanisms"], config["sasl_plain_without_tls"],
                                                users.credential,
                                                Pacing(config["connection_failed_authentication_delay_ms"] / 1000))
            await nursery.start(AuditWatch(zk, events).run)  # operators' ACL and user changes, told
            if config["acls"]:
                acl_store = AclStore(zk, frozenset(config["super_users"]), config["allow_everyone_if_no_acl_found"])
                await nursery.start(acl_store.run)
            gateway = cluster = None
            if scheme is not None:
                taken = {s.socket.getsockname()[1] for s, _ in listeners}
                if config["metrics_listen"]:
                    taken.add(_address(config["metrics_listen"])[1])
                gateway = Gateway(topics, kafka_listeners, scheme, lambda name: cluster.coordinator_nodes(name), taken,
                                  BrokerSecurity(upstream), config["gateway_max_connections_per_broker"])
                cluster = GatewayClusterApi(coordinator, topics, acl_store, gateway, config["metadata_cache_bytes"])
            api = Api(coordinator, topics, acl_store, cluster=cluster, metadata_cache_bytes=config["metadata_cache_bytes"])
            if config["metrics_listen"]:  # statuses are judged where lag is measured
                api.groups.status_of = windows.group_status
            server = Server(api, Limits(
                config["max_request_bytes"], config["max_connections"], config["connections_max_idle_ms"] / 1000,
                config["max_connections_per_ip"], config["request_read_timeout_ms"] / 1000,
                config["max_queued_reply_bytes"]), Security(tls, authentication), config["serving_wait"])
            if gateway is not None:
                gateway.transactions = Recorder(outcomes)  # what it relays of transactions, recorded
                await nursery.start(gateway.transactions.run)
                await gateway.prepare()
            await nursery.start(server.serve, listeners)
            if gateway is not None:
                await nursery.start(gateway.run, server)
            heap = config["embedded_zookeeper_heap_mb"] * 1024 * 1024 if not config["zookeeper"] else None
            nursery.start_soon(_watch_zookeeper_data, hosts, heap, log, budget.total)
            if config["metrics_listen"]:  # consumer lag, from the ends the gateway sees and the leaders'
                if gateway is not None:
                    gateway.log_ends = log_ends
                await nursery.start(LogEndPoller(
                    log_ends, topics, lambda: lag.committed_partitions_in_steps(coordinator),
                    config["lag_refresh_interval_ms"] / 1000, config["lag_list_offsets_per_second"],
                    security=upstream if bootstrap is not None else None).run)
                metrics.REGISTRY.register(metrics.LagCollector(
                    lambda: lag.lag_in_steps(coordinator, log_ends), config["metrics_group_series"],
                    config["metrics_lag_partition_series"],
                    lambda: windows.statuses_in_steps(coordinator, int(time.time() * 1000)), lag.SEVERITY))
                metrics.REGISTRY.register(metrics.MetadataCacheCollector(lambda: api.cluster.metadata_cache))
                metrics.REGISTRY.register(metrics.GroupsCollector(
                    lambda: ((gid, state, members, kind) for gid, _, state, members, kind in coordinator.all_groups()),
                    lambda: len(coordinator.owned), lambda: coordinator.group_partitions,
                    lambda: len(membership.live), config["metrics_group_series"]))
                m_host, m_port = _address(config["metrics_listen"])
                m_listeners = await _listen(m_host, m_port)
                await nursery.start(serve_metrics, m_listeners, metrics_tls, config["metrics_users"])
                scheme = "https" if metrics_tls is not None else "http"
                log.info("metrics endpoint", url=f"{scheme}://{m_host}:{m_listeners[0].socket.getsockname()[1]}/metrics",
                         basic_auth=bool(config["metrics_users"]))
            log.info("instance registered", zookeeper=hosts, path=layout.instance_path(config["instance_id"]),
                     session_timeout_s=round(zk.session_timeout, 3))
            log.info("topic source", source="zookeeper" if bootstrap is None else "brokers",
                     brokers=config["brokers"] or config["gateway"] or None, gateway=bool(config["gateway"]),
                     security_protocol=None if bootstrap is None else upstream.protocol)
            for (listener, _), (name, host, port) in zip(kafka_listeners, endpoints):
                log.info("listening", listener=name, protocol=listener.protocol, host=listener.host,
                         advertised=f"{host}:{port}")
            gc.freeze()  # long-lived start-up objects leave the collector's full scans
            gc.set_threshold(*GC_THRESHOLDS)
            # start_soon: the task first runs at the next checkpoint, inside the signal receiver
            # below, so by the time systemd hears READY=1, SIGTERM already means an orderly stop
            ready = trio.CancelScope()
            nursery.start_soon(_notify_ready, ready, coordinator,
                               "serving on " + ", ".join(f"{name}://{host}:{port}" for name, host, port in endpoints))
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("stopping", signal=signal.Signals(signum).name)
                    break
            ready.cancel()  # stopping before every partition loaded: never READY=1 after STOPPING=1
            systemd.notify("STOPPING=1", f"STATUS=stopping ({signal.Signals(signum).name})")
            started = trio.current_time()
            await coordinator.hand_over(config["shutdown_grace"])
            log.info("group-partitions handed over", duration_s=round(trio.current_time() - started, 3),
                     left=len(coordinator.owned))
            server.shutdown(config["shutdown_grace"])
            with trio.move_on_after(config["shutdown_grace"] + 1):
                await server.stopped.wait()
            nursery.cancel_scope.cancel()
            events_nursery.cancel_scope.cancel()
        with trio.move_on_after(LEAVE_ZOOKEEPER_TIMEOUT) as leaving:
            await membership.deregister()  # again: the session may have come back, registered anew
        if leaving.cancelled_caught:
            log.warning("zookeeper did not answer: the instance's registration ends with its session",
                        timeout_s=LEAVE_ZOOKEEPER_TIMEOUT)
        else:
            log.info("instance deregistered")
    finally:
        await _close_session(zk, LEAVE_ZOOKEEPER_TIMEOUT, log)
        for listener, _ in listeners:  # if the server never took them
            listener.socket.close()


async def _close_session(zk: ZooKeeperBridge, timeout: float, log) -> None:
    """Close the ZooKeeper session, or give up after `timeout`: kazoo's stop waits for
    ZooKeeper's answer to the close and then for its connection thread (10 s or more, then
    with no deadline) when ZooKeeper does not answer. Given up, it goes on in its thread, which
    does not hold the exit (kazoo's threads and trio's workers are daemon threads); the session
    expires on ZooKeeper's side as after a crash."""
    def stop() -> None:  # what zk.stop() does, in a thread the wait can be abandoned by
        zk.client.stop()
        zk.client.close()

    with trio.move_on_after(timeout) as waited:
        await trio.to_thread.run_sync(stop, abandon_on_cancel=True)
    metrics.ZOOKEEPER_CONNECTED.set(0)
    if waited.cancelled_caught:
        log.warning("zookeeper did not answer the session's close: it ends by expiring",
                    timeout_s=timeout, session_timeout_s=round(zk.session_timeout, 3))


async def _notify_ready(scope: trio.CancelScope, coordinator: Coordinator, status: str) -> None:
    """READY=1 to systemd (if it started us) once every group-partition placed on this
    instance is taken and loaded.

    Not at the listener's bind: until its partition is loaded a group answers
    COORDINATOR_LOAD_IN_PROGRESS, so an instance still loading cannot serve its groups yet,
    and `systemctl start`/`restart` (and a rolling restart waiting on it) should wait for
    the moment it can. The listener is bound and ZooKeeper connected (the instance is
    registered) before this starts; taking and loading add little (the others hand their
    share over at once; tens of ms for 50 empty group-partitions, more with many groups and
    offsets: mind TimeoutStartSec). A previous run of this instance killed without a chance
    to release holds its group-partitions until its session expires."""
    with scope:
        await coordinator.all_loaded()
        systemd.notify("READY=1", f"STATUS={status}, {len(coordinator.owned)} group-partitions loaded")


async def _listen(host: str, port: int) -> list[trio.SocketListener]:
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _address(text: str) -> tuple[str, int]:
    try:
        return parse_address(text)
    except ValueError as exc:
        raise StartupError(str(exc)) from None


# Of the embedded ZooKeeper's heap, the data (by ZooKeeper's own estimate, which leaves out
# the JVM's overhead per znode) past which the instance warns: a 512 MiB ZooKeeper died with
# OutOfMemoryError at 29-36 % (issue 31, docs/operations.md), its log of the last 500 writes
# and the per-znode overhead taking the rest; a third was too late to act on.
HEAP_WARNING = 0.2


async def _watch_zookeeper_data(hosts: str, heap: int | None, log, budget: int | None = None) -> None:
    """Export how much data ZooKeeper holds, and warn when the embedded one's data passes
    HEAP_WARNING of its heap (the data tree, snapshots being written, request buffers and its
    log of recent writes share it),
    and when it passes the groups' data budget: the budget counts more than ZooKeeper's figure
    does (store/budget.py), so something else fills it (another application, an external
    ensemble's other users), which the budget cannot refuse."""
    if heap is not None:
        metrics.ZOOKEEPER_HEAP.set(heap)
    warned = over = False
    while True:
        # abandoned if cancelled: a hung server takes a second per address to time out, which
        # shutdown does not wait for
        held = await trio.to_thread.run_sync(data_bytes, hosts, abandon_on_cancel=True)
        if held is not None:
            metrics.ZOOKEEPER_DATA.set(held)
            if heap is not None:
                if held > heap * HEAP_WARNING and not warned:
                    log.warning("zookeeper data nears its heap", data_bytes=held, heap_bytes=heap,
                                hint="raise embedded_zookeeper_heap_mb, or lower the group limits")
                warned = held > heap * HEAP_WARNING
            if budget is not None:
                if held > budget and not over:
                    log.warning("zookeeper holds more than the groups' data budget", data_bytes=held,
                                budget_bytes=budget, hint="what is not the groups' own (ZooKeeper's figure "
                                "leaves out its overhead, which the budget counts) is filling it")
                over = held > budget
        await trio.sleep(ZOOKEEPER_DATA_INTERVAL)


def _data_budget(config: dict[str, Any], partitions, log) -> Budget:
    """What all groups may make ZooKeeper hold (store/budget.py), as configured or derived from
    the embedded ZooKeeper's heap; exported and logged."""
    total, source = config["zookeeper_data_budget_bytes"], "zookeeper_data_budget_bytes"
    if not total:
        total, source = derived_budget(config["embedded_zookeeper_heap_mb"] * 1024 * 1024), "embedded_zookeeper_heap_mb"
    budget = Budget(total, config["zookeeper_data_budget_per_client_bytes"] or total // 2, partitions)
    metrics.ZOOKEEPER_BUDGET.set_function(budget.limit)
    metrics.ZOOKEEPER_BUDGET_USED.set_function(lambda: budget.used)
    log.info("zookeeper data budget", budget_bytes=budget.total, per_client_bytes=budget.per_client, source=source,
             **({"hint": "an external ensemble: set zookeeper_data_budget_bytes from its heap (docs/operations.md)"}
                if config["zookeeper"] and source != "zookeeper_data_budget_bytes" else {}))
    return budget


def _group_config(config: dict[str, Any]) -> GroupConfig:
    return GroupConfig(config["group_min_session_timeout_ms"] / 1000,
                       config["group_max_session_timeout_ms"] / 1000,
                       config["group_initial_rebalance_delay_ms"] / 1000,
                       config["group_max_size"], config["group_id_max_length"],
                       config["group_max_record_bytes"], config["offset_commit_max_partitions"],
                       config["group_max_offset_metadata_bytes"], ConsumerGroupConfig(
                           session_timeout=config["group_consumer_session_timeout_ms"] / 1000,
                           heartbeat_interval=config["group_consumer_heartbeat_interval_ms"] / 1000,
                           max_size=config["group_consumer_max_size"],
                           max_record_bytes=config["group_max_record_bytes"],
                           default_assignor=config["group_consumer_assignors"][0],
                           migration_policy=config["group_consumer_migration_policy"],
                           store_linger=config["group_consumer_store_linger_ms"] / 1000),
                       offsets_retention_ms=round(config["offsets_retention_minutes"] * 60_000),
                       offsets_retention_check_interval=config["offsets_retention_check_interval_ms"] / 1000)
