"""The metrics endpoint behind TLS and basic auth (issue 16's item 5), and the password
hashes it checks against."""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
import subprocess
import sys

import pytest
from coordinator.security.passwords import check_hash, hash_password, verify_password
from tests.support.certs import Authority
from tests.support.coordinator_process import CoordinatorProcess


def test_a_hash_verifies_its_password_only_and_is_salted():
    stored = hash_password("correct horse")
    assert verify_password("correct horse", stored)
    assert not verify_password("correct hors", stored)
    assert hash_password("correct horse") != stored  # salted: the same password, another hash
    check_hash(stored)


@pytest.mark.parametrize("stored", [
    "", "correct horse", "bcrypt$10$abc", "scrypt$16384$8$1$c2FsdA==",
    "scrypt$16385$8$1$c2FsdHNhbHQ=$" + "A" * 44,  # N not a power of two
    "scrypt$2097152$8$1$c2FsdHNhbHQ=$" + "A" * 44,  # N over the bound: 2 GiB a check
    "scrypt$16384$8$1$not*base64$" + "A" * 44,
])
def test_a_hash_that_is_not_one_is_refused_with_a_reason(stored):
    with pytest.raises(ValueError):
        check_hash(stored)


def _certificate(tmp_path):
    """A certificate for 127.0.0.1 and its key, as PEM files, and the CA that signed it."""
    authority = Authority(tmp_path)
    return (*authority.issue("CN=groupkeeper-test", "metrics", server=True), authority.cafile)


def _get(port: int, cafile: str, user: str | None = None, password: str | None = None):
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10,
                                             context=ssl.create_default_context(cafile=cafile))
    headers = {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    try:
        connection.request("GET", "/metrics", headers=headers)
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        connection.close()


def test_the_metrics_endpoint_over_tls_answers_only_its_users(zookeeper, tmp_path):
    cert, key, ca = _certificate(tmp_path)
    process = CoordinatorProcess(zookeeper, tmp_path, metrics_tls_cert=cert, metrics_tls_key=key,
                                 metrics_users={"prometheus": hash_password("s3cret")})
    process.start()
    try:
        port = process.metrics_port
        status, headers, _ = _get(port, ca)
        assert status == 401 and headers["WWW-Authenticate"].startswith('Basic realm="groupkeeper metrics"')
        assert _get(port, ca, "prometheus", "wrong")[0] == 401
        assert _get(port, ca, "stranger", "s3cret")[0] == 401
        status, _, body = _get(port, ca, "prometheus", "s3cret")
        assert status == 200 and b"groupkeeper_connections" in body
        with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:  # HTTP to the TLS port
            plain.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b"groupkeeper_" not in plain.recv(65536)
        assert _get(port, ca, "prometheus", "s3cret")[0] == 200  # and the endpoint still serves
        entry = process.wait_for_log("metrics endpoint")
        assert entry["url"].startswith("https://") and entry["basic_auth"] is True
    finally:
        assert process.stop() == 0


@pytest.mark.parametrize("settings, message", [
    ({"metrics_tls_cert": "/nonexistent.pem"}, "metrics_tls_cert and metrics_tls_key go together"),
    ({"metrics_tls_cert": "/nonexistent.pem", "metrics_tls_key": "/nonexistent.key"}, "/nonexistent.pem: no such file"),
    ({"metrics_users": {"prometheus": "plaintext"}}, "metrics_users: prometheus: not a password hash"),
], ids=["cert without key", "missing file", "not a hash"])
def test_a_bad_metrics_security_setting_is_one_line(tmp_path, settings, message):
    config = tmp_path / "bad.toml"
    scalars = "".join(f'{k} = "{v}"\n' for k, v in settings.items() if isinstance(v, str))
    tables = "".join(f"[{k}]\n" + "".join(f'{n} = "{h}"\n' for n, h in v.items())
                     for k, v in settings.items() if isinstance(v, dict))
    config.write_text(scalars + tables)
    done = subprocess.run([sys.executable, "-m", "tools", "run", "--config", str(config),
                           "--zookeeper", "127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("Error: ") and message in line
