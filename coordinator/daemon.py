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

from . import logs
from .store import layout
from .store.bridge import ZooKeeperBridge
from .store.registry import TopicRegistry
from .store.session import SessionGuard
from .store.zkserver import ZooKeeperServer


class StartupError(Exception):
    """A reason the instance cannot start, phrased for the operator."""


async def run(config: dict[str, Any]) -> None:
    log = logs.get("groupkeeper").bind(instance=config["instance_id"])
    embedded = None
    hosts = config["zookeeper"]
    if not hosts:
        zk_dir = Path(config["data_dir"]) / "zookeeper"
        embedded = ZooKeeperServer(zk_dir, config["embedded_zookeeper_port"])
        await trio.to_thread.run_sync(embedded.start)
        hosts = embedded.connect_string
        log.info("embedded zookeeper started", zookeeper=hosts, data_dir=str(zk_dir))
    try:
        await _serve(config, hosts, log)
    finally:
        if embedded is not None:
            await trio.to_thread.run_sync(embedded.stop)
            log.info("embedded zookeeper stopped")


async def _serve(config: dict[str, Any], hosts: str, log) -> None:
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
        async with trio.open_nursery() as nursery:
            await nursery.start(SessionGuard(zk, config["zk_session_timeout"]).run)
            await nursery.start(TopicRegistry(zk).run)
            log.info("instance registered", zookeeper=hosts, path=instance)
            gc.freeze()  # long-lived start-up objects leave the collector's full scans
            log.warning("the Kafka protocol listener is not built yet; it arrives with the "
                        "coordinator issue")
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("stopping", signal=signal.Signals(signum).name)
                    break
            nursery.cancel_scope.cancel()
        await zk.delete(instance)
        log.info("instance deregistered")
    finally:
        await zk.stop()
