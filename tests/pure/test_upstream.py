"""groupkeeper's own side of security towards the brokers, without a broker: the SCRAM client
(RFC 7677's example to the byte, and whole exchanges with our own server), the SASL login
as frames (SaslHandshake v1, SaslAuthenticate v2) against a broker made of our codec and
server, TLS's client side for the poll loop (`TLSSocket.client`) against its server side,
and the start-up checks of the gateway_* settings, one line each."""

from __future__ import annotations

import base64
import socket
import ssl

import pytest

from coordinator.config import KEYS
from coordinator.daemon import StartupError, _upstream_security
from coordinator import logs
from coordinator.security import upstream as upstream_module
from coordinator.security.scram import (MAX_CLIENT_ITERATIONS, MIN_ITERATIONS, AuthenticationFailed, ScramClient,
                                        ScramServer, make_credential)
from coordinator.security.tls import TLSError, TLSSocket, client_context, listener_context
from coordinator.security.upstream import Login, LoginFailed, UpstreamSecurity, configure
from protocol import ErrorCode, RequestHeader, decode_request, encode_response
from protocol import messages as m
from protocol.schemas import SASL_AUTHENTICATE, SASL_HANDSHAKE
from tests.support.certs import Authority
from tests.pure.test_scram import (BOTH, RFC_CLIENT_FINAL, RFC_CLIENT_FIRST, RFC_SALT, RFC_SERVER_FINAL,
                              RFC_SERVER_FIRST, RFC_SERVER_NONCE)

# RFC 7677, section 3 (the exchange's messages as test_scram.py checks the server on them)
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"


# -- the SCRAM client ---------------------------------------------------------------------

def test_the_client_makes_rfc_7677s_example_to_the_byte():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_NONCE)
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert not client.done
    client.verify(RFC_SERVER_FINAL)
    assert client.done


def test_the_client_and_rfc_7677s_server_meet_in_the_middle():
    """Our server, given the example's salt and nonce, and our client, given its nonce,
    exchange exactly the example's messages."""
    server = ScramServer("SCRAM-SHA-256", {"user": make_credential("SCRAM-SHA-256", "pencil", 4096, RFC_SALT)}.get,
                         nonce=RFC_SERVER_NONCE)
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_NONCE)
    server_first = server.first(client.first())
    assert server_first == RFC_SERVER_FIRST
    server_final = server.final(client.final(server_first))
    assert server_final == RFC_SERVER_FINAL
    client.verify(server_final)
    assert client.done and server.done


@pytest.mark.parametrize("mechanism", BOTH)
@pytest.mark.parametrize("user", ["alice", "a,b=c", "émile"])
def test_the_client_authenticates_to_our_server(mechanism, user):
    server = ScramServer(mechanism, {user: make_credential(mechanism, "secret", 8192)}.get)
    client = ScramClient(mechanism, user, "secret")
    client.verify(server.final(client.final(server.first(client.first()))))
    assert client.done and server.done and server.user == user


@pytest.mark.parametrize("mechanism", BOTH)
def test_a_wrong_password_is_refused_by_the_server_and_a_server_without_the_credential_by_the_client(mechanism):
    server = ScramServer(mechanism, {"alice": make_credential(mechanism, "secret")}.get)
    client = ScramClient(mechanism, "alice", "guess")
    with pytest.raises(AuthenticationFailed, match="wrong password or unknown user"):
        server.final(client.final(server.first(client.first())))
    # a server that does not hold the credential (here: one made from another password)
    # cannot sign the exchange, and the client says so
    impostor = ScramServer(mechanism, {"alice": make_credential(mechanism, "guess")}.get)
    honest = ScramClient(mechanism, "alice", "secret")
    final = honest.final(impostor.first(honest.first()))
    with pytest.raises(AuthenticationFailed):
        impostor.final(final)
    with pytest.raises(AuthenticationFailed, match="signature is wrong"):
        honest.verify(b"v=" + base64.b64encode(b"\0" * 32))
    assert not honest.done


@pytest.mark.parametrize("server_first, reason", [
    (b"e=unknown-user", "the server refused: unknown-user"),
    (b"m=ext,r=rOprNGfwEbeRWgbNEkqOxyz,s=AAAA,i=4096", "mandatory extension"),
    (b"r=someone-elses,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend ours"),
    (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend ours"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=not base64!,i=4096", "salt"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=lots", "iterations"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=" + str(MIN_ITERATIONS - 1).encode(),
     "asks for 4095 iterations"),
    (b"r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=" + str(MAX_CLIENT_ITERATIONS + 1).encode(),
     "at most"),
    (b"s=W22ZaJ0SNY7soEsUEjb6gQ==,r=rOprNGfwEbeRWgbNEkqOxyz,i=4096", "malformed server-first"),
    (b"\xff", "not UTF-8"),
])
def test_server_firsts_the_client_refuses(server_first, reason):
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_NONCE)
    client.first()
    with pytest.raises(AuthenticationFailed, match=reason):
        client.final(server_first)
    with pytest.raises(AuthenticationFailed, match="out of order"):  # and the exchange is over
        client.verify(RFC_SERVER_FINAL)


def test_the_clients_steps_go_in_order():
    client = ScramClient("SCRAM-SHA-512", "user", "pencil")
    with pytest.raises(AuthenticationFailed, match="final step out of order"):
        client.final(RFC_SERVER_FIRST)
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_NONCE)
    client.first()
    client.final(RFC_SERVER_FIRST)
    with pytest.raises(AuthenticationFailed, match="the server refused: other-error"):
        client.verify(b"e=other-error")
    with pytest.raises(ValueError, match="nonce"):
        ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="a,b")


def test_the_salted_password_is_computed_once_per_salt(monkeypatch):
    computed = []
    real = upstream_module.salted_password

    def counting(*args):
        computed.append(args[2:])
        return real(*args)

    monkeypatch.setattr(upstream_module, "salted_password", counting)
    security = UpstreamSecurity("SASL_PLAINTEXT", None, "SCRAM-SHA-512", "alice", "secret")
    credential = make_credential("SCRAM-SHA-512", "secret")
    for _ in range(3):
        assert _log_in(security.login(), {"alice": credential}) == "alice"
    assert computed == [(credential.salt, credential.iterations)]
    assert "secret" not in repr(security)


# -- the login as frames ------------------------------------------------------------------

def _request(frame: bytes):
    """A request frame as the login makes it (size included): (header, request)."""
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    return decode_request(frame[4:])


def _answer(header: RequestHeader, body) -> bytes:
    return encode_response(header, body)[4:]  # the login takes frames without their size


def _log_in(login: Login, users: dict, offered: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
            refuse: ErrorCode | None = None, password: str = "secret") -> str:
    """Drive `login` against a broker made of our codec and our SCRAM server; the user it
    authenticated as."""
    header, request = _request(login.first())
    assert (header.api_key, header.api_version, header.client_id) == (SASL_HANDSHAKE.key, 1, "groupkeeper")
    if request.mechanism not in offered:
        login.feed(_answer(header, m.SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                                           mechanisms=list(offered))))
        raise AssertionError("the login went on after its mechanism was refused")
    frame = login.feed(_answer(header, m.SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=list(offered))))
    server = None if request.mechanism == "PLAIN" else ScramServer(request.mechanism, users.get)
    user = None
    while frame is not None:
        header, request = _request(frame)
        assert (header.api_key, header.api_version) == (SASL_AUTHENTICATE.key, 2)
        if refuse is not None:
            return login.feed(_answer(header, m.SaslAuthenticateResponse(
                error_code=refuse, error_message="Authentication failed: Invalid username or password",
                auth_bytes=b"", session_lifetime_ms=0)))
        if server is None:
            user = request.auth_bytes.decode().split("\0")[1]
            assert request.auth_bytes.decode().split("\0")[2] == password
            token = b""
        elif server.user is None:
            token = server.first(request.auth_bytes)
        else:
            token = server.final(request.auth_bytes)
            user = server.user
        frame = login.feed(_answer(header, m.SaslAuthenticateResponse(
            error_code=ErrorCode.NONE, error_message=None, auth_bytes=token, session_lifetime_ms=0)))
    assert login.done
    return user


@pytest.mark.parametrize("mechanism", ["PLAIN", *BOTH])
def test_a_login_handshakes_then_authenticates(mechanism):
    security = UpstreamSecurity("SASL_SSL", None, mechanism, "alice", "secret")
    users = {"alice": make_credential("SCRAM-SHA-512" if mechanism == "PLAIN" else mechanism, "secret")}
    assert _log_in(security.login(), users) == "alice"


def test_a_login_refused_says_why():
    security = UpstreamSecurity("SASL_SSL", None, "SCRAM-SHA-512", "alice", "secret")
    with pytest.raises(LoginFailed, match=r"does not offer SCRAM-SHA-512 \(UNSUPPORTED_SASL_MECHANISM; "
                                          r"it offers: PLAIN\)"):
        _log_in(security.login(), {}, offered=("PLAIN",))
    with pytest.raises(LoginFailed, match=r"SCRAM-SHA-512 as 'alice' refused \(SASL_AUTHENTICATION_FAILED\): "
                                          r"Authentication failed: Invalid username or password"):
        _log_in(security.login(), {}, refuse=ErrorCode.SASL_AUTHENTICATION_FAILED)
    # a wrong password: the server fails the final message, so the broker refuses
    wrong = UpstreamSecurity("SASL_SSL", None, "SCRAM-SHA-256", "alice", "guess")
    with pytest.raises(AuthenticationFailed):
        _log_in(wrong.login(), {"alice": make_credential("SCRAM-SHA-256", "secret")})
    assert issubclass(LoginFailed, PermissionError)  # what the topic source, which cannot import it, catches


def test_a_login_refuses_answers_it_did_not_ask_for():
    login = UpstreamSecurity("SASL_SSL", None, "PLAIN", "alice", "secret").login()
    header, _ = _request(login.first())
    other = RequestHeader(header.api_key, header.api_version, header.correlation_id + 5, None)
    with pytest.raises(LoginFailed, match="answered request"):
        login.feed(_answer(other, m.SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"])))
    login = UpstreamSecurity("SASL_SSL", None, "PLAIN", "alice", "secret").login()
    login.first()
    with pytest.raises(LoginFailed, match="unreadable SaslHandshake answer"):
        login.feed(b"\x00\x00")
    login = UpstreamSecurity("SASL_SSL", None, "PLAIN", "alice", "secret").login()
    with pytest.raises(LoginFailed, match="not asked"):
        login.feed(b"\x00\x00\x00\x01\x00\x00")


# -- TLS's client side in the poll loop ------------------------------------------------------

@pytest.fixture
def authority(tmp_path):
    return Authority(tmp_path)


def _pair(authority: Authority, client: ssl.SSLContext, server_hostname: str = "127.0.0.1",
          client_auth: str = "none") -> tuple[TLSSocket, TLSSocket]:
    """A client TLSSocket and a server TLSSocket over a socket pair, the handshake driven
    as the poll loop drives it, to its end (or its failure, raised)."""
    cert, key = authority.issue("CN=broker", "broker", server=True)
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    server = TLSSocket(b, listener_context(cert, key, authority.cafile, client_auth))
    tls = TLSSocket.client(a, client, server_hostname)
    for _ in range(20):
        done = tls.handshake()
        try:
            server.recv(65536)  # the server's side runs inside recv
        except BlockingIOError:
            pass
        if done and server.handshaken:
            return tls, server
    raise AssertionError("the handshake did not end")


def _exchange(tls: TLSSocket, server: TLSSocket) -> None:
    assert tls.send(b"ping") == 4
    assert server.recv(65536) == b"ping"
    assert server.send(b"pong") == 4
    received = b""
    for _ in range(5):  # session tickets may come first: not data
        try:
            received += tls.recv(65536)
        except BlockingIOError:
            continue
        if received:
            break
    assert received == b"pong"


def test_a_client_handshake_without_blocking_then_data_both_ways(authority):
    tls, server = _pair(authority, client_context(authority.cafile))
    assert tls.handshaken and not tls.wants_write
    _exchange(tls, server)


def test_a_client_certificate_for_brokers_that_ask(authority):
    cert, key = authority.issue("CN=gateway,O=Example", "gateway")
    tls, server = _pair(authority, client_context(authority.cafile, cert, key), client_auth="required")
    _exchange(tls, server)
    assert dict(rdn[0] for rdn in server.peer_certificate()["subject"])["commonName"] == "gateway"


def test_a_broker_signed_by_another_ca_is_refused(authority, tmp_path):
    (tmp_path / "other").mkdir()
    other = Authority(tmp_path / "other", "CN=another CA")
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        _pair(authority, client_context(other.cafile))


def test_the_brokers_name_is_checked_unless_told_not_to(authority):
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        _pair(authority, client_context(authority.cafile), server_hostname="kafka-1.example.com")
    tls, server = _pair(authority, client_context(authority.cafile, check_hostname=False),
                        server_hostname="kafka-1.example.com")
    _exchange(tls, server)


def test_client_contexts_refuse_what_they_cannot_use(authority, tmp_path):
    cert, key = authority.issue("CN=gateway", "gateway")
    with pytest.raises(TLSError, match="both"):
        client_context(authority.cafile, cert)
    with pytest.raises(TLSError, match="no such file"):
        client_context(str(tmp_path / "missing.pem"))
    with pytest.raises(TLSError, match="cannot use certificate"):
        client_context(authority.cafile, cert, authority.cafile)
    default = client_context()  # the system's CAs
    assert default.verify_mode == ssl.CERT_REQUIRED and default.check_hostname
    assert default.minimum_version == ssl.TLSVersion.TLSv1_2


# -- the settings, checked at start-up -------------------------------------------------------

def _config(**settings) -> dict:
    return {**{k: default for k, (_, default) in KEYS.items()}, **settings}


@pytest.fixture
def password_file(tmp_path):
    path = tmp_path / "gateway.password"
    path.write_text("s3cret\nignored\n")
    return str(path)


def test_sasl_ssl_with_its_settings(authority, password_file):
    upstream = _upstream_security(_config(
        gateway_security_protocol="SASL_SSL", gateway_ssl_cafile=authority.cafile, gateway_sasl_mechanism="PLAIN",
        gateway_sasl_username="gk", gateway_sasl_password_file=password_file), True, logs.get("test"))
    assert upstream.sasl and upstream.tls is not None and upstream.tls.verify_mode == ssl.CERT_REQUIRED
    token = _request(upstream.login().first())
    assert token[1].mechanism == "PLAIN"
    assert _log_in(upstream.login(), {}, password="s3cret") == "gk"  # the file's first line, as PLAIN's token


def test_the_default_is_plaintext_with_or_without_a_cluster():
    for brokers in (True, False):
        upstream = _upstream_security(_config(), brokers, logs.get("test"))
        assert (upstream.protocol, upstream.tls, upstream.login(), upstream.secured) == ("PLAINTEXT", None, None, False)


@pytest.mark.parametrize("settings, line", [
    ({"gateway_security_protocol": "TLS"}, "gateway_security_protocol must be one of PLAINTEXT, SSL, "
                                           "SASL_PLAINTEXT, SASL_SSL, not 'TLS'"),
    ({"gateway_security_protocol": "SASL_SSL"}, "gateway_security_protocol SASL_SSL needs gateway_sasl_username"),
    ({"gateway_security_protocol": "SASL_PLAINTEXT", "gateway_sasl_username": "gk"},
     "SASL_PLAINTEXT needs gateway_sasl_password_file"),
    ({"gateway_security_protocol": "SASL_SSL", "gateway_sasl_username": "gk", "gateway_sasl_mechanism": "GSSAPI"},
     "gateway_sasl_mechanism must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, not 'GSSAPI'"),
    ({"gateway_security_protocol": "SASL_SSL", "gateway_sasl_username": "gk",
      "gateway_sasl_password_file": "/nonexistent/pw"}, "gateway_sasl_password_file: /nonexistent/pw: No such file"),
    ({"gateway_ssl_cafile": "/etc/ca.pem"}, "gateway_ssl_cafile is set, but gateway_security_protocol PLAINTEXT "
                                            "does not speak TLS"),
    ({"gateway_security_protocol": "SSL", "gateway_sasl_username": "gk"},
     "gateway_sasl_username is set, but gateway_security_protocol SSL does not speak SASL"),
    ({"gateway_security_protocol": "SSL", "gateway_ssl_cafile": "/nonexistent/ca.pem"},
     "gateway TLS: /nonexistent/ca.pem: no such file"),
    ({"gateway_security_protocol": "SSL", "gateway_ssl_certfile": "/etc/a.pem"},
     "gateway TLS: a client certificate needs both"),
])
def test_a_bad_setting_is_one_line_at_start_up(settings, line):
    with pytest.raises(StartupError) as raised:
        _upstream_security(_config(**settings), True, logs.get("test"))
    assert line in str(raised.value) and "\n" not in str(raised.value)


def test_an_empty_password_file_and_a_secured_protocol_without_a_cluster(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(StartupError, match="has no password on its first line"):
        _upstream_security(_config(gateway_security_protocol="SASL_SSL", gateway_sasl_username="gk",
                                   gateway_sasl_password_file=str(empty)), True, logs.get("test"))
    with pytest.raises(StartupError, match="is for the connections to the brokers: set gateway"):
        _upstream_security(_config(gateway_security_protocol="SSL"), False, logs.get("test"))
    with pytest.raises(ValueError, match="needs gateway_sasl_username"):
        configure("SASL_PLAINTEXT")
