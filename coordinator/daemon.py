"""One groupkeeper instance: its ZooKeeper (embedded or external), its session, its place
in the instance registry, and an orderly shutdown on SIGINT or SIGTERM."""

from __future__ import annotations

import gc
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import trio
from kazoo.exceptions import NodeExistsError

from . import logs, metrics, systemd
from .assignors import Assignor
from .assignors.registry import AssignorError, load_assignors
from .config import parse_address
from .events import DISCARD, EventLog
from .groups.group import GroupConfig
from .handlers import INSTANCE_NODE_BASE, Handlers, Node
from .ownership import Coordinator
from .server import Limits, Server
from .store import layout
from .store.bridge import ZooKeeperBridge
from .store.registry import TopicRegistry
from .store.session import SessionGuard
from .store.zkserver import ZooKeeperServer


class StartupError(Exception):
    """A reason the instance cannot start, phrased for the operator."""


async def run(config: dict[str, Any]) -> None:
    log = logs.get("groupkeeper").bind(instance=config["instance_id"])
    try:  # before anything starts: a strategy that cannot load is a configuration error
        assignors = load_assignors(config["assignors"])
    except AssignorError as exc:
        raise StartupError(str(exc)) from None
    embedded = None
    hosts = config["zookeeper"]
    if not hosts:
        zk_dir = Path(config["data_dir"]) / "zookeeper"
        embedded = ZooKeeperServer(zk_dir, config["embedded_zookeeper_port"])
        await trio.to_thread.run_sync(embedded.start)
        hosts = embedded.connect_string
        log.info("embedded zookeeper started", zookeeper=hosts, data_dir=str(zk_dir))
    try:
        await _serve(config, hosts, assignors, log)
    finally:
        if embedded is not None:
            await trio.to_thread.run_sync(embedded.stop)
            log.info("embedded zookeeper stopped")


async def _serve(config: dict[str, Any], hosts: str, assignors: dict[str, Assignor], log) -> None:
    zk = ZooKeeperBridge(hosts, config["zk_session_timeout"])
    try:  # not connected within one session timeout: give up
        await zk.start(timeout=config["zk_session_timeout"])
    except (trio.TooSlowError, ConnectionError):
        raise StartupError(f"cannot connect to ZooKeeper at {hosts}") from None
    try:
        instance = layout.instance_path(config["instance_id"])
        try:
            await zk.create(instance, layout.encode({
                "host": socket.gethostname(), "listen": config["listen"], "pid": os.getpid(),
                "started": int(time.time() * 1000)}), ephemeral=True, makepath=True)
        except NodeExistsError:
            raise StartupError(f"instance id {config['instance_id']} is already registered in "
                               f"ZooKeeper ({instance}): is another instance running with it?") from None
        # the event log outlives the coordinator's tasks, so that the last events are written
        async with trio.open_nursery() as events_nursery, trio.open_nursery() as nursery:
            guard = SessionGuard(zk, config["zk_session_timeout"])
            await nursery.start(guard.run)
            registry = TopicRegistry(zk)
            await nursery.start(registry.run)
            events = DISCARD
            if config["events"]:
                events = EventLog(Path(config["data_dir"]) / "events", config["instance_id"],
                                  max_bytes=config["events_max_bytes"], max_age=config["events_max_age"],
                                  compress=config["events_compress"], queue_limit=config["events_queue_limit"])
                await events_nursery.start(events.run)
            coordinator = Coordinator(zk, guard, registry, config["instance_id"], _group_config(config),
                                      assignors, config["strict_assignment"], events)
            guard.on_fenced = coordinator.fenced
            await nursery.start(coordinator.run)
            host, port = _address(config["listen"])
            advertised = config["advertised_listener"] or config["listen"]
            adv_host, adv_port = _address(advertised)
            server = Server(Handlers(coordinator, registry, Node(
                INSTANCE_NODE_BASE + config["instance_id"], adv_host, adv_port or port)), Limits(
                config["max_request_bytes"], config["max_connections"],
                config["connections_max_idle_ms"] / 1000))
            bound = await _listen(nursery, server.serve, host, port)
            if config["metrics_listen"]:
                metrics.REGISTRY.register(metrics.GroupsCollector(
                    lambda: ((gid, state, members) for gid, _, state, members in coordinator.all_groups()),
                    lambda: len(coordinator.owned), lambda: coordinator.group_partitions,
                    config["metrics_group_series"]))
                m_host, m_port = _address(config["metrics_listen"])
                m_bound = await _listen(nursery, metrics.serve_metrics, m_host, m_port)
                log.info("metrics endpoint", url=f"http://{m_host}:{m_bound}/metrics")
            log.info("instance registered", zookeeper=hosts, path=instance)
            log.info("listening", host=host, port=bound, advertised=advertised)
            gc.freeze()  # long-lived start-up objects leave the collector's full scans
            # start_soon: the task first runs at the next checkpoint, inside the signal receiver
            # below, so by the time systemd hears READY=1, SIGTERM already means an orderly stop
            ready = trio.CancelScope()
            nursery.start_soon(_notify_ready, ready, coordinator, f"serving on {host}:{bound}")
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("stopping", signal=signal.Signals(signum).name)
                    break
            ready.cancel()  # stopping before every partition loaded: never READY=1 after STOPPING=1
            systemd.notify("STOPPING=1", f"STATUS=stopping ({signal.Signals(signum).name})")
            server.shutdown(config["shutdown_grace"])
            with trio.move_on_after(config["shutdown_grace"] + 1):
                await server.stopped.wait()
            await coordinator.release_all()
            nursery.cancel_scope.cancel()
            events_nursery.cancel_scope.cancel()
        await zk.delete(instance)
        log.info("instance deregistered")
    finally:
        await zk.stop()


async def _notify_ready(scope: trio.CancelScope, coordinator: Coordinator, status: str) -> None:
    """READY=1 to systemd (if it started us) once every owned group-partition is loaded.

    Not at the listener's bind: until its partition is loaded a group answers
    COORDINATOR_LOAD_IN_PROGRESS, so an instance still loading cannot serve its groups yet,
    and `systemctl start`/`restart` (and a rolling restart waiting on it) should wait for
    the moment it can. The listener is bound and ZooKeeper connected (the instance is
    registered) before this starts; loading adds little (tens of ms for 50 empty
    group-partitions, more with many groups and offsets: mind TimeoutStartSec)."""
    with scope:
        await coordinator.all_loaded()
        systemd.notify("READY=1", f"STATUS={status}, {len(coordinator.owned)} group-partitions loaded")


async def _listen(nursery: trio.Nursery, serve, host: str, port: int) -> int:
    try:
        return await nursery.start(serve, host, port)
    except OSError as exc:
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _address(text: str) -> tuple[str, int]:
    try:
        return parse_address(text)
    except ValueError as exc:
        raise StartupError(str(exc)) from None


def _group_config(config: dict[str, Any]) -> GroupConfig:
    return GroupConfig(config["group_min_session_timeout_ms"] / 1000,
                       config["group_max_session_timeout_ms"] / 1000,
                       config["group_initial_rebalance_delay_ms"] / 1000,
                       config["group_max_size"])
