"""Kafka's listener settings, and TLS the poll-loop server's way (`TLSSocket`): parsing,
principals from certificates, and the write contract under a full socket."""

from __future__ import annotations

import os
import select
import socket
import ssl
import threading
import time

import pytest

from coordinator.listeners import Listener, parse_listeners
from coordinator.security.tls import TLSSocket, listener_context, principal_of
from tests.support.certs import Authority


def test_listeners_are_named_by_protocol_or_by_the_map():
    bound, told = parse_listeners(
        ["PLAINTEXT://127.0.0.1:9094", "sasl_ssl://0.0.0.0:9096", "INTERNAL://[::1]:9097"],
        ["SASL_SSL://gk-1.example.com:19096"], {"internal": "sasl_plaintext"})
    assert bound == [Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9094),
                     Listener("SASL_SSL", "SASL_SSL", "0.0.0.0", 9096),
                     Listener("INTERNAL", "SASL_PLAINTEXT", "::1", 9097)]
    assert told == {"SASL_SSL": Listener("SASL_SSL", "SASL_SSL", "gk-1.example.com", 19096)}
    assert [(x.tls, x.sasl) for x in bound] == [(False, False), (True, True), (False, True)]
    assert str(bound[2]) == "INTERNAL://[::1]:9097"


@pytest.mark.parametrize("listeners, advertised, mapping, message", [
    ([], [], {}, "listeners is empty"),
    (["127.0.0.1:9094"], [], {}, "is not NAME://HOST:PORT"),
    (["HTTPS://127.0.0.1:1"], [], {}, "listener HTTPS has no security protocol"),
    (["PLAINTEXT://127.0.0.1:70000"], [], {}, "port 70000 out of range"),
    (["PLAINTEXT://127.0.0.1:1", "PLAINTEXT://127.0.0.1:2"], [], {}, "each name once"),
    (["PLAINTEXT://127.0.0.1:1"], ["SSL://h:1"], {}, "SSL is not among listeners"),
    (["PLAINTEXT://0.0.0.0:1"], ["PLAINTEXT://0.0.0.0:1"], {}, "wildcard address"),
    (["A://h:1"], [], {"A": "TLS"}, "A = 'TLS' is not one of"),
])
def test_a_bad_listener_setting_says_what_is_wrong(listeners, advertised, mapping, message):
    with pytest.raises(ValueError, match=message):
        parse_listeners(listeners, advertised, mapping)


def test_a_client_certificate_names_its_principal_as_kafka_does():
    subject = ((("countryName", "GB"),), (("organizationName", "Example, Ltd."),),
               (("organizationalUnitName", "eng"), ("commonName", "alice")), (("emailAddress", "a@x"),))
    assert principal_of({"subject": subject}) == \
        "User:emailAddress=a@x,OU=eng+CN=alice,O=Example\\, Ltd.,C=GB"
    assert principal_of({"subject": ((("commonName", " #lead"),),)}) == "User:CN=\\ #lead"


@pytest.fixture
def tls_pair(tmp_path):
    """A server-side TLSSocket and a client's blocking TLS socket, handshake done."""
    authority = Authority(tmp_path)
    cert, key = authority.issue("CN=server", "server", server=True)
    client_cert, client_key = authority.issue("CN=alice,O=Example", "alice")
    theirs, ours = socket.socketpair()
    ours.setblocking(False)
    server = TLSSocket(ours, listener_context(cert, key, authority.cafile, "required"))
    context = ssl.create_default_context(cafile=authority.cafile)
    context.load_cert_chain(client_cert, client_key)
    shaken: list = []
    thread = threading.Thread(target=lambda: shaken.append(context.wrap_socket(theirs, server_hostname="localhost")))
    thread.start()
    # serve the handshake from this side, as the poll loop would, until both ends are through
    # (with TLS 1.3 the client is through first: its Finished is still on its way)
    deadline = time.monotonic() + 10
    while thread.is_alive() or not server.handshaken:
        assert time.monotonic() < deadline, "no handshake"
        if select.select([ours], [], [], 0.1)[0]:
            with pytest.raises(BlockingIOError):
                server.recv(65536)
    thread.join()
    try:
        yield server, shaken[0]
    finally:
        shaken[0].close()
        server.close()


def test_the_handshake_gives_the_client_certificate(tls_pair):
    server, client = tls_pair
    assert server.handshaken
    assert principal_of(server.peer_certificate()) == "User:CN=alice,O=Example"
    client.sendall(b"hello")
    select.select([server], [], [], 5)
    assert server.recv(65536) == b"hello"


def test_what_the_kernel_does_not_take_is_offered_again_and_arrives_once_in_order(tls_pair):
    """The caller's contract is a socket's: it keeps what `send` did not count as sent and
    offers it again from its start; every byte arrives once, in order, however full the socket."""
    server, client = tls_pair
    data = os.urandom(3 << 20)
    received = bytearray()
    reader = threading.Thread(target=lambda: _read(client, received, len(data)))
    out = bytearray(data)
    refusals = 0
    while out:
        try:
            sent = server.send(out)
        except BlockingIOError:
            sent = 0
        if not sent:
            refusals += 1
            if not reader.is_alive() and refusals == 1:  # full, with ciphertext held: now the client reads
                reader.start()
            select.select([], [server], [], 5)
        del out[:sent]
    reader.join(30)
    assert refusals > 0
    assert bytes(received) == data


def _read(client: ssl.SSLSocket, into: bytearray, size: int) -> None:
    while len(into) < size:
        chunk = client.recv(65536)
        if not chunk:
            return
        into += chunk


def test_plaintext_bytes_to_a_tls_socket_are_a_tls_error(tmp_path):
    authority = Authority(tmp_path)
    cert, key = authority.issue("CN=server", "server", server=True)
    theirs, ours = socket.socketpair()
    ours.setblocking(False)
    server = TLSSocket(ours, listener_context(cert, key, "", "none"))
    try:
        theirs.sendall(b"\x00\x00\x00\x15\x00\x12\x00\x03\x00\x00\x00\x01\x00\x00" + b"\x00" * 11)
        select.select([ours], [], [], 5)
        with pytest.raises(ssl.SSLError):
            server.recv(65536)
    finally:
        theirs.close()
        server.close()


def test_a_close_notify_ends_the_connection_after_what_came_before_it(tls_pair):
    """An empty read from TLS is the client's close_notify: the bytes before it, then the end
    (once, this looped for ever on the poll loop's thread)."""
    server, client = tls_pair
    client.sendall(b"last words")
    closing = threading.Thread(target=_unwrap, args=(client,))  # it waits for our close_notify: none comes
    closing.start()
    received = b""
    while True:
        select.select([server], [], [], 5)
        try:
            chunk = server.recv(65536)
        except BlockingIOError:
            continue
        if not chunk:
            break
        received += chunk
    assert received == b"last words"
    server.close()
    closing.join(10)


def _unwrap(client: ssl.SSLSocket) -> None:
    try:
        client.unwrap()
    except (ssl.SSLError, OSError):
        pass


def test_client_certificates_are_asked_for_on_ssl_listeners_only(tmp_path):
    """ssl_client_auth is the SSL listeners' (as in Kafka): a SASL_SSL-only set-up neither
    needs nor uses a client CA, and an SSL listener that asks for certificates does."""
    from coordinator.config import KEYS
    from coordinator.daemon import StartupError, _listeners

    cert, key = Authority(tmp_path).issue("CN=server", "server", server=True)
    config = {k: default for k, (_, default) in KEYS.items()}
    config.update(ssl_certfile=cert, ssl_keyfile=key, ssl_client_auth="required",
                  listeners=["SASL_SSL://127.0.0.1:0"])
    _, contexts = _listeners(config)
    assert set(contexts) == {"SASL_SSL"} and contexts["SASL_SSL"].verify_mode == ssl.CERT_NONE
    config["listeners"] = ["SASL_SSL://127.0.0.1:0", "SSL://127.0.0.1:0"]
    with pytest.raises(StartupError, match="needs ssl_cafile"):
        _listeners(config)
