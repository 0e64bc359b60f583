"""`groupkeeper run`: its own ZooKeeper or an existing one, registration, clean shutdown."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import pytest
from kazoo.client import KazooClient

from coordinator.store.zkserver import four_letter_word
from coordinator.store.zkserver import free_port


def _isolated(tmp_path, **flags: str | None) -> list[str]:
    """Flags of `groupkeeper run` that keep it off this machine's state: every socket it may
    open on a free port, not on the defaults (9094, 9095 and 2181: `make run`'s, which may be
    up, whatever order start-up checks and binds in), and its data under `tmp_path`, not
    ./var/groupkeeper. `flags` win, by option name with "_" for "-"; None leaves an option out
    (for a config file that sets it)."""
    chosen = {"listeners": f"PLAINTEXT://127.0.0.1:{free_port()}", "metrics_listen": f"127.0.0.1:{free_port()}",
              "embedded_zookeeper_port": str(free_port()), "data_dir": str(tmp_path), **flags}
    return [arg for name, value in chosen.items() if value is not None
            for arg in ("--" + name.replace("_", "-"), value)]


def _start(tmp_path, *args: str, **flags: str | None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tools", "run", "--log-format", "json",
                             *_isolated(tmp_path, **flags), *args],
                            stderr=subprocess.PIPE, text=True)


def _wait_for(proc: subprocess.Popen, event: str) -> dict:
    """Read the JSON log until `event`; the process ending first fails the test."""
    for line in proc.stderr:
        entry = json.loads(line)
        if entry["event"] == event:
            return entry
    raise AssertionError(f"groupkeeper run exited ({proc.wait()}) before logging {event!r}")


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_run_with_an_embedded_zookeeper(tmp_path):
    port = free_port()
    proc = _start(tmp_path, "--instance-id", "3", embedded_zookeeper_port=str(port))
    try:
        _wait_for(proc, "instance registered")
        client = KazooClient(hosts=f"127.0.0.1:{port}")
        client.start(timeout=10)
        try:
            assert client.exists("/groupkeeper/instances/3") is not None
        finally:
            client.stop()
            client.close()
        assert (tmp_path / "zookeeper" / "zoo.cfg").exists()
        assert _stop(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    try:
        four_letter_word("127.0.0.1", port, b"ruok", timeout=0.5)
        raise AssertionError("the embedded ZooKeeper outlived groupkeeper run")
    except OSError:
        pass


def test_run_with_an_existing_zookeeper_registers_and_deregisters(zookeeper, tmp_path):
    proc = _start(tmp_path, "--zookeeper", zookeeper.connect_string, "--instance-id", "41")
    client = KazooClient(hosts=zookeeper.connect_string)
    client.start(timeout=10)
    try:
        _wait_for(proc, "instance registered")
        assert client.exists("/groupkeeper/instances/41") is not None
        # on ports of its own: its listener is bound before it registers, and one in use
        # would stop it first
        second = subprocess.run([sys.executable, "-m", "tools", "run", "--zookeeper",
                                 zookeeper.connect_string, "--instance-id", "41",
                                 *_isolated(tmp_path, metrics_listen="")],
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert "instance id 41 is already registered" in second.stderr
        assert "Traceback" not in second.stderr
        assert _stop(proc) == 0
        assert client.exists("/groupkeeper/instances/41") is None
    finally:
        if proc.poll() is None:
            proc.kill()
        client.stop()
        client.close()


@pytest.mark.parametrize("text, message", [
    ('listeners = ["PLAINTEXT://127.0.0.1:0"]\nzookeper = "localhost:2181"\n', "unknown key 'zookeper'"),
    ("group_max_record_bytes = 10\n", "key 'group_max_record_bytes' must be between 65536 and 67108864, not 10"),
    ("listeners = [9094]\n", "key 'listeners' must be a list of strings, not [9094]"),
    ('listeners = ["HTTP://127.0.0.1:0"]\n', "listener HTTP has no security protocol"),
    ('listeners = ["PLAINTEXT://0.0.0.0:0"]\n', "binds every address: say in advertised_listeners"),
    ('listeners = ["SASL_SSL://127.0.0.1:0"]\n', "an SSL or SASL_SSL listener needs ssl_certfile and ssl_keyfile"),
    ('listeners = ["SASL_PLAINTEXT://127.0.0.1:0"]\nsasl_enabled_mechanisms = ["GSSAPI"]\n',
     "sasl_enabled_mechanisms: 'GSSAPI' is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ('listeners = ["SSL://127.0.0.1:0"]\nssl_certfile = "/nonexistent.pem"\nssl_keyfile = "/nonexistent.key"\n',
     "/nonexistent.pem: no such file"),
    ('advertised_listeners = ["SSL://example.com:9096"]\n', "advertised_listeners: SSL is not among listeners"),
    ('ssl_client_auth = "always"\n', "ssl_client_auth must be one of none, requested, required, not 'always'"),
], ids=["unknown key", "out of range", "listeners not strings", "unknown protocol", "wildcard advertised",
        "TLS without a certificate", "unknown mechanism", "missing certificate", "advertised unknown listener", "bad client auth"])
def test_a_bad_config_value_names_itself(tmp_path, text, message):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    # free ports for what the file leaves to its defaults: a value found wrong only after
    # something started (an embedded ZooKeeper, a listener) must not need 2181 or 9094
    own = {"listeners": None} if re.search(r"^listeners\s*=", text, re.M) else {}
    done = subprocess.run([sys.executable, "-m", "tools", "run", "--config", str(config),
                           *_isolated(tmp_path, **own)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreachable_zookeeper_is_one_clear_line(tmp_path):
    dead = free_port()  # nothing listens there
    done = subprocess.run([sys.executable, "-m", "tools", "run", "--zookeeper", f"127.0.0.1:{dead}",
                           "--zk-session-timeout", "2", *_isolated(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == f"Error: cannot connect to ZooKeeper at 127.0.0.1:{dead}"


def test_brokers_that_are_not_host_port_are_one_clear_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tools", "run", "--brokers", "kafka-1:9092,kafka-2",
                           "--zookeeper", f"127.0.0.1:{free_port()}", *_isolated(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["Error: brokers: 'kafka-2' is not HOST:PORT"]


def test_no_broker_reachable_at_start_up_names_the_addresses_and_serves_anyway(zookeeper, tmp_path):
    dead = [free_port(), free_port()]
    proc = _start(tmp_path, "--zookeeper", zookeeper.connect_string, "--instance-id", "43",
                  "--brokers", ",".join(f"127.0.0.1:{p}" for p in dead))
    try:
        warning = _wait_for(proc, "no broker answered Metadata: serving from what was known")
        assert [t.split(" ")[0] for t in warning["tried"]] == [f"127.0.0.1:{p}" for p in dead]
        _wait_for(proc, "group-partitions loaded")  # serving, though nothing is known of the cluster
        assert _stop(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
