"""`groupkeeper bench security`: what TLS, SASL (SCRAM-SHA-512) and ACLs cost, each beside the
plaintext reference measured in the same run.

A fresh local ZooKeeper and two `groupkeeper run` processes, each in a chroot of its own:

- *main*: listeners PLAINTEXT, SSL and SASL_SSL in the one process (a certificate made for the
  run by a CA of its own, EC P-256; SCRAM-SHA-512 at 4,096 iterations), ACLs off;
- *acls*: one PLAINTEXT listener, `acls = true`, no super user, and one ACL allowing
  User:ANONYMOUS Read on its group.

Each phase runs for `seconds`, from one single-threaded client (this process):

1. **connections**: sequential connect, TLS handshake (SSL, SASL_SSL), ApiVersions v3
   answered, then SaslHandshake v1 and SCRAM's two SaslAuthenticate v2 (SASL_SSL), close;
   per second and the coordinator's CPU per connection;
2. **heartbeats**: one Stable member per listener (joined for real: JoinGroup v5 twice,
   SyncGroup v3), batches of 100 Heartbeat v4 frames in one write, their 100 answers read
   and compared with the NONE answers, for each protocol; then again one heartbeat per
   write (a round trip each, as members send them);
3. **acls**: the same pipelined heartbeats on the ACL instance (the fast path and the
   authorizer's cached decision). To part the path from the check, heartbeats whose request
   header carries one empty tagged field, which the fast path declines, on main's PLAINTEXT
   listener (the general path without ACLs) and on the ACL instance (with them); the header
   costs both the same ~0.5 us more to decode. The reference is phase 2's PLAINTEXT row
   (the fast path).

The coordinator's CPU is its user + system time from /proc/PID/stat over the phase (all its
threads), per operation; the client's is this process's `time.process_time()`. With two
cores the coordinator runs on CPU 0 and the client and ZooKeeper on CPU 1. The client's
SCRAM keeps its salted password per (salt, iterations), so reconnecting skips PBKDF2;
kafka-python and librdkafka compute it on every connection (`client_pbkdf2_ms` is that cost).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import ipaddress
import json
import os
import socket
import ssl
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from protocol import ErrorCode, RequestHeader, decode_response, encode_request
from protocol.consumer import encode_subscription
from protocol.messages import ConsumerProtocolSubscription, build
from protocol.schemas import API_VERSIONS, HEARTBEAT, JOIN_GROUP, SASL_AUTHENTICATE, SASL_HANDSHAKE, SYNC_GROUP

from coordinator.security.acls.store import AclAdmin
from coordinator.security.acls.authorizer import Acl, Operation, PatternType, Permission, Resource, ResourceType
from coordinator.security.users import UserAdmin
from coordinator.store.zkserver import ZooKeeperServer, free_port
from .load import profile as py_spy
from .process import NotStarted, RunProcess, chroot

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD, MECHANISM, ITERATIONS = "bench", "bench-password", "SCRAM-SHA-512", 4096
BATCH = 100  # heartbeats per write
HEARTBEAT_VERSION = 4
CLIENT_ID = "groupkeeper-bench"
ACL_GROUP = "bench-acls"
SETTINGS = {"group_initial_rebalance_delay_ms": 0, "max_connections_per_ip": 10_000}
SERVER_CPUS, CLIENT_CPUS = {0}, {1}
_PINNING = (SERVER_CPUS | CLIENT_CPUS) <= os.sched_getaffinity(0)


class SecurityBenchError(Exception):
    """A coordinator that did not start, or an answer that was not the one expected."""


# -- the coordinators -------------------------------------------------------------------------

def _certificates(directory: Path) -> tuple[str, str, str]:
    """(CA, certificate, key) PEM paths: a CA made for the run, and the certificate it signed
    for 127.0.0.1, EC P-256 (as tests/support/certs.py makes them)."""
    now = datetime.datetime.now(datetime.timezone.utc)

    def builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1)))

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "groupkeeper bench CA")])
    ca = (builder(ca_name, ca_name, ca_key.public_key())
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    cert = (builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "groupkeeper")]), ca_name, key.public_key())
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(paths[0]), str(paths[1]), str(paths[2])


class _Coordinator:
    """A `groupkeeper run` process with its listeners (protocol -> port) and configuration."""

    def __init__(self, name: str, work: Path, zookeeper: str, protocols: tuple[str, ...], settings: dict):
        self.name, self.log = name, work / f"{name}.log"
        self.ports = {protocol: free_port() for protocol in protocols}
        config = work / f"{name}.toml"
        config.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in {**SETTINGS, **settings}.items()))
        self.run = RunProcess(["--config", str(config), "--zookeeper", zookeeper, "--listeners",
                               ",".join(f"{p}://127.0.0.1:{port}" for p, port in self.ports.items()),
                               "--metrics-listen", "", "--data-dir", str(work / name)])

    def start(self) -> None:
        try:
            self.run.start(self.log, timeout=60, preexec_fn=_pin(SERVER_CPUS))
        except NotStarted as exc:
            raise SecurityBenchError(f"the {self.name} coordinator did not start: {exc}") from None

    @property
    def pid(self) -> int:
        return self.run.process.pid

    def cpu(self) -> tuple[float, float]:
        """(user, system) CPU seconds of the process so far."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            raise SecurityBenchError(f"the {self.name} coordinator is gone; see {self.log}") from None
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick

    def stop(self) -> None:
        self.run.stop(30)


def _pin(cpus: set[int]):
    return (lambda: os.sched_setaffinity(0, cpus)) if _PINNING else None


# -- the client -------------------------------------------------------------------------------

class _Scram:
    """RFC 5802's client side for SCRAM-SHA-512 (no channel binding, as Kafka's), its salted
    password kept per (salt, iterations)."""

    def __init__(self, user: str, password: str):
        self.user, self.password = user, password.encode()
        self._salted: dict[tuple[bytes, int], bytes] = {}

    def exchange(self, send: Callable[[bytes], bytes]) -> None:
        """Authenticate through `send` (a token out, the server's token back); the server's
        signature is checked too."""
        nonce = base64.b64encode(os.urandom(24)).decode()
        bare = f"n={self.user},r={nonce}"
        server_first = send(f"n,,{bare}".encode()).decode()
        fields = dict(part.split("=", 1) for part in server_first.split(","))
        if not fields.get("r", "").startswith(nonce):
            raise SecurityBenchError(f"SCRAM: the server's nonce does not extend ours: {server_first!r}")
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        salted = self._salted.get((salt, iterations))
        if salted is None:
            salted = self._salted[salt, iterations] = hashlib.pbkdf2_hmac("sha512", self.password, salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", "sha512")
        without_proof = f"c=biws,r={fields['r']}"
        message = f"{bare},{server_first},{without_proof}".encode()
        signature = hmac.digest(hashlib.sha512(client_key).digest(), message, "sha512")
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_final = send(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
        expected = hmac.digest(hmac.digest(salted, b"Server Key", "sha512"), message, "sha512")
        if server_final != b"v=" + base64.b64encode(expected):
            raise SecurityBenchError(f"SCRAM: the server's signature is not the one expected: {server_final!r}")


_API_VERSIONS = encode_request(RequestHeader(API_VERSIONS.key, 3, 0, CLIENT_ID), build(
    API_VERSIONS.request.struct, {"client_software_name": CLIENT_ID, "client_software_version": "1"}))


class _Client:
    """A blocking connection speaking our codec, over TLS with `context`; its ApiVersions
    answered, then (with `scram`) authenticated, as Kafka's clients do."""

    def __init__(self, port: int, context: ssl.SSLContext | None = None, scram: _Scram | None = None):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0
        try:
            self.sock = context.wrap_socket(sock, server_hostname="127.0.0.1") if context else sock
            self.sock.sendall(_API_VERSIONS)
            _, answer = decode_response(API_VERSIONS.key, 3, self.frame())
            if answer.error_code != ErrorCode.NONE:
                raise SecurityBenchError(f"ApiVersions: {ErrorCode(answer.error_code).name}")
            if scram is not None:
                handshake = self.call(SASL_HANDSHAKE, 1, {"mechanism": MECHANISM})
                if handshake.error_code != ErrorCode.NONE:
                    raise SecurityBenchError(f"SaslHandshake: {ErrorCode(handshake.error_code).name}")
                scram.exchange(self._authenticate)
        except BaseException:
            getattr(self, "sock", sock).close()  # wrapping took the descriptor over
            raise

    def _authenticate(self, token: bytes) -> bytes:
        answer = self.call(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        if answer.error_code != ErrorCode.NONE:
            raise SecurityBenchError(f"SaslAuthenticate: {ErrorCode(answer.error_code).name} {answer.error_message}")
        return answer.auth_bytes

    def call(self, api, version: int, body: dict):
        self.correlation += 1
        self.sock.sendall(encode_request(RequestHeader(api.key, version, self.correlation, CLIENT_ID),
                                         build(api.request.struct, body)))
        correlation, answer = decode_response(api.key, version, self.frame())
        if correlation != self.correlation:
            raise SecurityBenchError(f"{api.name}: answer to request {correlation}, not {self.correlation}")
        return answer

    def frame(self) -> bytes:
        """The next response frame, without its size."""
        size, = struct.unpack(">i", self.read(4))
        return self.read(size)

    def read(self, n: int) -> bytes:
        data = bytearray(n)
        self.read_into(memoryview(data))
        return bytes(data)

    def read_into(self, view: memoryview) -> None:
        got = 0
        while got < len(view):
            k = self.sock.recv_into(view[got:])
            if not k:
                raise SecurityBenchError("the coordinator closed the connection")
            got += k

    def close(self) -> None:
        self.sock.close()


def _tls_context(cafile: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=cafile)


# -- measuring --------------------------------------------------------------------------------

class _Phase:
    """One measured phase: the coordinator's CPU (from /proc) and this process's over it, and
    py-spy's samples of the coordinator if asked for."""

    def __init__(self, server: _Coordinator, seconds: float, raw: Path | None):
        self.server, self.seconds, self.raw = server, seconds, raw
        self.sampler: subprocess.Popen | None = None

    def run(self, work: Callable[[float], int]) -> dict:
        """`work(deadline)` does operations until the deadline and returns how many it did."""
        if self.raw is not None:
            self.sampler = subprocess.Popen(
                [py_spy.py_spy() or "py-spy", "record", "--pid", str(self.server.pid), "--duration",
                 str(max(1, round(self.seconds))), "--rate", str(py_spy.RATE), "--format", "raw",
                 "--output", str(self.raw)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)  # attached
        try:
            server_before, client_before = self.server.cpu(), time.process_time()
            started = time.perf_counter()
            count = work(started + self.seconds)
            elapsed = time.perf_counter() - started
            client_cpu = time.process_time() - client_before
            time.sleep(0.05)  # what the last operations left to the coordinator (closes)
            server_after = self.server.cpu()
        finally:
            if self.sampler is not None:
                try:
                    self.sampler.wait(self.seconds + 30)
                except subprocess.TimeoutExpired:
                    self.sampler.kill()
                    self.sampler.wait()
        user, system = (after - before for before, after in zip(server_before, server_after))
        result = {"count": count, "seconds": round(elapsed, 3), "per_s": round(count / elapsed, 1),
                  "server_user_s": round(user, 2), "server_system_s": round(system, 2),
                  "server_cpu_us": round((user + system) / count * 1e6, 2) if count else None,
                  "client_cpu_us": round(client_cpu / count * 1e6, 2) if count else None}
        if self.raw is not None:
            # py-spy runs without --gil here, so time in OpenSSL (which releases the GIL) counts
            result["profile"] = py_spy.serving_summary([self.raw]) if self.raw.exists() else None
        return result


def _connecting(port: int, context: ssl.SSLContext | None, scram: _Scram | None) -> Callable[[float], int]:
    def work(deadline: float) -> int:
        count = 0
        while time.perf_counter() < deadline:
            _Client(port, context, scram).close()
            count += 1
        return count
    return work


SUBSCRIPTION = encode_subscription(ConsumerProtocolSubscription(topics=[]), 0)


def _member(client: _Client, group: str) -> tuple[str, int]:
    """Join `group` alone (a Stable member): (member id, generation)."""
    member_id = ""
    for _ in range(20):
        joined = client.call(JOIN_GROUP, 5, {
            "group_id": group, "session_timeout_ms": 30_000, "rebalance_timeout_ms": 10_000, "member_id": member_id,
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": SUBSCRIPTION}]})
        member_id = joined.member_id
        if joined.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            continue
        if joined.error_code != ErrorCode.NONE:
            raise SecurityBenchError(f"JoinGroup {group}: {ErrorCode(joined.error_code).name}")
        synced = client.call(SYNC_GROUP, 3, {"group_id": group, "generation_id": joined.generation_id,
                                             "member_id": member_id, "assignments": []})
        if synced.error_code == ErrorCode.NONE:
            return member_id, joined.generation_id
        if synced.error_code != ErrorCode.REBALANCE_IN_PROGRESS:
            raise SecurityBenchError(f"SyncGroup {group}: {ErrorCode(synced.error_code).name}")
    raise SecurityBenchError(f"{group}: no generation formed")


def _heartbeat_batch(group: str, member_id: str, generation: int, size: int, tagged: bool) -> bytes:
    """`size` heartbeat frames; `tagged`: each header's tagged-field section holds one empty
    field (tag 0), which the fast path leaves to the general one."""
    body = build(HEARTBEAT.request.struct, {"group_id": group, "generation_id": generation,
                                            "member_id": member_id, "group_instance_id": None})
    frames = []
    for correlation in range(size):
        frame = encode_request(RequestHeader(HEARTBEAT.key, HEARTBEAT_VERSION, correlation, CLIENT_ID), body)
        if tagged:
            at = 4 + 10 + len(CLIENT_ID)  # the header's tagged-field count: 0
            assert frame[at] == 0
            frame = struct.pack(">i", len(frame) - 4 + 2) + frame[4:at] + b"\x01\x00\x00" + frame[at + 1:]
        frames.append(frame)
    return b"".join(frames)


def _heartbeating(client: _Client, batch: bytes, size: int) -> Callable[[float], int]:
    """One batch sent and its answers checked one by one (NONE, in order); then, measured,
    batches whose answers must be those same bytes."""
    client.sock.sendall(batch)
    answers = []
    for correlation in range(size):
        frame = client.frame()
        got, answer = decode_response(HEARTBEAT.key, HEARTBEAT_VERSION, frame)
        if got != correlation or answer.error_code != ErrorCode.NONE:
            raise SecurityBenchError(f"heartbeat {correlation}: answer {got}, {ErrorCode(answer.error_code).name}")
        answers.append(struct.pack(">i", len(frame)) + frame)
    expected = b"".join(answers)

    def work(deadline: float) -> int:
        received = bytearray(len(expected))
        view = memoryview(received)
        count = 0
        while time.perf_counter() < deadline:
            client.sock.sendall(batch)
            client.read_into(view)
            if received != expected:
                raise SecurityBenchError("a heartbeat was not answered NONE")
            count += size
        return count
    return work


def _heartbeats(server: _Coordinator, protocol: str, group: str, context: ssl.SSLContext | None,
                scram: _Scram | None, seconds: float, raw: Path | None, size: int = BATCH,
                tagged: bool = False) -> dict:
    client = _Client(server.ports[protocol], context if protocol != "PLAINTEXT" else None,
                     scram if protocol.startswith("SASL") else None)
    try:
        member_id, generation = _member(client, group)
        work = _heartbeating(client, _heartbeat_batch(group, member_id, generation, size, tagged), size)
        return _Phase(server, seconds, raw).run(work)
    finally:
        client.close()


def _pbkdf2_ms() -> float:
    """What a SCRAM-SHA-512 client that does not keep its salted password computes per connection."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        hashlib.pbkdf2_hmac("sha512", PASSWORD.encode(), os.urandom(16), ITERATIONS)
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 3)


def run(seconds: float, profile_dir: Path | None = None) -> dict:
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        if py_spy.py_spy() is None:
            raise SecurityBenchError("--profile needs py-spy (the 'test' extra)")
    mine = os.sched_getaffinity(0)
    if _PINNING:
        os.sched_setaffinity(0, CLIENT_CPUS)  # the JVM's threads inherit it
    try:
        with tempfile.TemporaryDirectory(prefix="groupkeeper-security-") as tmp:
            return _run(Path(tmp), seconds, profile_dir)
    finally:
        os.sched_setaffinity(0, mine)


def _run(work: Path, seconds: float, profile_dir: Path | None) -> dict:
    def raw(name: str) -> Path | None:
        return None if profile_dir is None else profile_dir / f"{name}.raw"

    cafile, cert, key = _certificates(work)
    with ZooKeeperServer(work / "zookeeper", free_port()) as zookeeper:
        main_zk = chroot(zookeeper.connect_string, "/groupkeeper-main")
        acls_zk = chroot(zookeeper.connect_string, "/groupkeeper-acls")
        with UserAdmin(main_zk) as users:
            users.add(USER, MECHANISM, PASSWORD, ITERATIONS)
        with AclAdmin(acls_zk) as acls:
            acls.add(Resource(ResourceType.GROUP, ACL_GROUP, PatternType.LITERAL),
                     {Acl("User:ANONYMOUS", "*", Operation.READ, Permission.ALLOW)})
        main = _Coordinator("main", work, main_zk, PROTOCOLS, {
            "ssl_certfile": cert, "ssl_keyfile": key, "sasl_enabled_mechanisms": [MECHANISM]})
        secured = _Coordinator("acls", work, acls_zk, ("PLAINTEXT",), {"acls": True, "super_users": []})
        started: list[_Coordinator] = []
        try:
            for coordinator in (main, secured):
                started.append(coordinator)
                coordinator.start()
            context, scram = _tls_context(cafile), _Scram(USER, PASSWORD)
            contexts = {"PLAINTEXT": (None, None), "SSL": (context, None), "SASL_SSL": (context, scram)}
            result: dict = {"seconds": seconds, "batch": BATCH, "heartbeat_version": HEARTBEAT_VERSION,
                            "scram_iterations": ITERATIONS, "client_pbkdf2_ms": _pbkdf2_ms(),
                            "pinned": _PINNING, "profiled": profile_dir is not None,
                            "tls_version": None, "connections": {}, "heartbeats": {}, "heartbeats_single": {},
                            "acls": {}}
            probe = _Client(main.ports["SSL"], context)
            result["tls_version"], result["tls_cipher"] = probe.sock.version(), probe.sock.cipher()[0]
            probe.close()
            for protocol in PROTOCOLS:
                _Client(main.ports[protocol], *contexts[protocol]).close()  # warm: each path once
                result["connections"][protocol] = _Phase(main, seconds, raw(f"connections-{protocol}")).run(
                    _connecting(main.ports[protocol], *contexts[protocol]))
            for protocol in PROTOCOLS:
                result["heartbeats"][protocol] = _heartbeats(main, protocol, f"bench-{protocol.lower()}",
                                                             context, scram, seconds, raw(f"heartbeats-{protocol}"))
            for protocol in PROTOCOLS:
                result["heartbeats_single"][protocol] = _heartbeats(
                    main, protocol, f"bench-single-{protocol.lower()}", context, scram, seconds,
                    raw(f"heartbeats-single-{protocol}"), size=1)
            result["acls"]["general_path"] = _heartbeats(main, "PLAINTEXT", "bench-general", None, None, seconds,
                                                         raw("heartbeats-general-path"), tagged=True)
            result["acls"]["general_path_acls_on"] = _heartbeats(
                secured, "PLAINTEXT", ACL_GROUP, None, None, seconds, raw("heartbeats-general-path-acls"), tagged=True)
            result["acls"]["acls_on"] = _heartbeats(secured, "PLAINTEXT", ACL_GROUP, None, None, seconds,
                                                    raw("heartbeats-acls"))
            return result
        finally:
            for coordinator in started:
                coordinator.stop()


# -- the table --------------------------------------------------------------------------------

def _cpu(us: float | None, unit: str) -> str:
    if us is None:
        return "-"
    return f"{us / 1000:.3f} ms" if unit == "ms" else f"{us:.2f} us"


def _rows(title: str, first: str, entries: list[tuple[str, dict]], unit: str) -> list[str]:
    ref = entries[0][1]
    rows = [title, f"  {first:<44} {'PER S':>11} {'X REF':>6} {'SERVER CPU/OP':>14} {'X REF':>6} {'CLIENT CPU/OP':>14}"]
    for name, r in entries:
        rate = r["per_s"] / ref["per_s"] if ref["per_s"] else 0
        cpu = r["server_cpu_us"] / ref["server_cpu_us"] if r["server_cpu_us"] and ref["server_cpu_us"] else 0
        rows.append(f"  {name:<44} {r['per_s']:>11,.0f} {rate:>6.2f} {_cpu(r['server_cpu_us'], unit):>14} "
                    f"{cpu:>6.2f} {_cpu(r['client_cpu_us'], unit):>14}")
    return rows


def table(result: dict) -> str:
    c, h, a = result["connections"], result["heartbeats"], result["acls"]
    rows = _rows("Connections (sequential: connect, TLS, ApiVersions answered, SCRAM; close)", "PROTOCOL",
                 [(p, c[p]) for p in PROTOCOLS], "ms")
    rows += [""] + _rows(f"Heartbeats (one Stable member, {result['batch']} v{result['heartbeat_version']} pipelined "
                         "per write)", "PROTOCOL", [(p, h[p]) for p in PROTOCOLS], "us")
    single = result["heartbeats_single"]
    rows += [""] + _rows("Heartbeats one per write (each a round trip, as a member sends them)", "PROTOCOL",
                         [(p, single[p]) for p in PROTOCOLS], "us")
    rows += [""] + _rows("ACLs (PLAINTEXT heartbeats, 100 pipelined per write)", "PATH", [
        ("fast path, acls = false (reference)", h["PLAINTEXT"]),
        ("general path (tagged header), acls = false", a["general_path"]),
        ("general path (tagged header), acls = true", a["general_path_acls_on"]),
        ("acls = true (the fast path + ACL check)", a["acls_on"])], "us")
    rows.append(f"({result['seconds']:g} s a phase; {result['tls_version']} {result['tls_cipher']}; SCRAM-SHA-512 "
                f"at {result['scram_iterations']} iterations, the client's PBKDF2 "
                f"({result['client_pbkdf2_ms']:.2f} ms) done once; CPU per operation, the server's from /proc"
                + (", coordinator on CPU 0, client on CPU 1" if result["pinned"] else "") + ")")
    if result["profiled"]:
        rows.append("(sampled by py-spy: figures skewed; the serving thread's busy samples by function, own time)")
        for section, entries in (("connections", c), ("heartbeats", h), ("heartbeats one per write", single),
                                 ("acls", a)):
            for name, r in entries.items():
                summary = r.get("profile")
                if summary:
                    top = ", ".join(f"{fn} {share:.0%}" for fn, share in summary["own"][:6])
                    rows.append(f"  {section} {name} ({summary['busy']} busy of {summary['samples']}): {top}")
    return "\n".join(rows)
