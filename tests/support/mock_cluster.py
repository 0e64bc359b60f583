"""librdkafka's own mock cluster as a second real Kafka-protocol broker implementation (the
one librdkafka's test suite runs against), in a process of its own.

`python -m tests.support.mock_cluster --brokers 3 --topic orders:6` creates a producer
handle through librdkafka's C API (ctypes on the library the confluent-kafka wheel
bundles), starts a mock cluster of that many brokers (ids 1, 2, ...) on it, creates the
topics with their leaders spread over the brokers in turn (partition p led by broker
p % n + 1), prints one line of JSON ({"bootstrap": "127.0.0.1:p1,...", "brokers": n}) and
lives until it is killed or its stdin closes. Python's confluent-kafka does not hand out
its rd_kafka_t, hence ctypes; a process of its own keeps the tests' process clean of it.

What the tests may rely on (librdkafka 2.16.0's mock): broker ids 1..n on loopback ports;
it serves Produce, Fetch, ListOffsets, Metadata and its own group coordinator (never
reached through the gateway); its ApiVersions answer to v3 and v4 is an UNSUPPORTED_VERSION
that does not read as v0 (as clients read a refusal), and its Metadata v9+ answers carry a
byte past the schema (issue 38): the gateway takes both as Kafka's clients do.

`MockCluster` is the tests' handle (a context manager): `start()` returns once the
bootstrap line is read.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

_RD_KAFKA_PRODUCER = 0


def library() -> ctypes.CDLL:
    """librdkafka as bundled in the confluent-kafka wheel (the library its clients use)."""
    import confluent_kafka

    site = Path(confluent_kafka.__file__).resolve().parent.parent
    found = sorted(glob.glob(str(site / "confluent_kafka.libs" / "librdkafka*.so*")))
    if not found:
        raise RuntimeError(f"no librdkafka beside confluent_kafka under {site}")
    lib = ctypes.CDLL(found[0])
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_partition_set_leader.restype = ctypes.c_int
    lib.rd_kafka_mock_partition_set_leader.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32,
                                                       ctypes.c_int32]
    return lib


def serve(brokers: int, topics: dict[str, int]) -> None:
    lib = library()
    error = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    if lib.rd_kafka_conf_set(conf, b"log_level", b"3", error, len(error)) != 0:
        raise RuntimeError(error.value.decode())
    handle = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, error, len(error))
    if not handle:
        raise RuntimeError(f"rd_kafka_new: {error.value.decode()}")
    cluster = lib.rd_kafka_mock_cluster_new(handle, brokers)
    if not cluster:
        raise RuntimeError("rd_kafka_mock_cluster_new failed")
    for topic, partitions in topics.items():
        name = topic.encode()
        if (code := lib.rd_kafka_mock_topic_create(cluster, name, partitions, min(3, brokers))) != 0:
            raise RuntimeError(f"rd_kafka_mock_topic_create {topic}: error {code}")
        for partition in range(partitions):
            if (code := lib.rd_kafka_mock_partition_set_leader(cluster, name, partition,
                                                                 partition % brokers + 1)) != 0:
                raise RuntimeError(f"rd_kafka_mock_partition_set_leader {topic}/{partition}: error {code}")
    bootstrap = lib.rd_kafka_mock_cluster_bootstraps(cluster).decode()
    print(json.dumps({"bootstrap": bootstrap, "brokers": brokers}), flush=True)
    sys.stdin.read()  # until the parent closes it (or kills this process)
    os._exit(0)  # the mock's threads are not torn down: the process simply ends


class MockCluster:
    """The tests' handle on a mock cluster process; `bootstrap` once started."""

    def __init__(self, tmp_path: Path, brokers: int = 3, topics: dict[str, int] | None = None):
        self.brokers = brokers
        self.topics = topics or {}
        self.log_path = Path(tmp_path) / "mock-cluster.log"
        self.process: subprocess.Popen | None = None
        self.bootstrap: str | None = None

    def start(self, timeout: float = 30.0) -> MockCluster:
        command = [sys.executable, "-m", "tests.support.mock_cluster", "--brokers", str(self.brokers),
                   *[arg for topic, n in self.topics.items() for arg in ("--topic", f"{topic}:{n}")]]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=log, cwd=Path(__file__).resolve().parents[2])
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if not line or not line[0]:
            self.stop()
            raise AssertionError(f"the mock cluster did not start; log:\n{self.log_path.read_text()[-3000:]}")
        self.bootstrap = json.loads(line[0])["bootstrap"]
        return self

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            self.process.stdin.close()
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> MockCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--topic", action="append", default=[], help="NAME:PARTITIONS")
    args = parser.parse_args()
    topics = {name: int(n) for name, n in (t.rsplit(":", 1) for t in args.topic)}
    serve(args.brokers, topics)


if __name__ == "__main__":
    main()
