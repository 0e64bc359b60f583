"""SASL/SCRAM's server side: RFC 7677's example to the byte, whole exchanges with
kafka-python's own SCRAM client, and every way an exchange must fail."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from kafka.net.sasl.scram import ScramClient

from coordinator.security.scram import (MECHANISMS, MIN_ITERATIONS, AuthenticationFailed, ScramCredential,
                                        ScramServer, make_credential, verify_plain)

# RFC 7677, section 3
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

BOTH = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
USERS = {mechanism: {"alice": make_credential(mechanism, "alice-secret"),
                     "a,b=c": make_credential(mechanism, "escaped")} for mechanism in BOTH}


def server(mechanism: str = "SCRAM-SHA-256") -> ScramServer:
    return ScramServer(mechanism, USERS[mechanism].get)


def client_final(mechanism: str, password: str, client_first: bytes, server_first: bytes, *,
                 channel: bytes | None = None, nonce: bytes | None = None) -> bytes:
    """RFC 5802's client-final for this exchange, computed here; `channel` (the gs2 header
    the binding claims) and `nonce` replace the right ones."""
    cbind, authzid, bare = client_first.split(b",", 2)
    server = dict(a.split(b"=", 1) for a in server_first.split(b","))
    without_proof = (b"c=" + base64.b64encode(channel or cbind + b"," + authzid + b",") +
                     b",r=" + (nonce or server[b"r"]))
    digest = MECHANISMS[mechanism]
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), base64.b64decode(server[b"s"]), int(server[b"i"]))
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    auth_message = bare + b"," + server_first + b"," + without_proof
    signature = hmac.new(hashlib.new(digest, client_key).digest(), auth_message, digest).digest()
    return without_proof + b",p=" + base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature)))


def exchange(client_first: bytes, password: str = "alice-secret", mechanism: str = "SCRAM-SHA-256",
             **tamper) -> ScramServer:
    scram = server(mechanism)
    scram.final(client_final(mechanism, password, client_first, scram.first(client_first), **tamper))
    return scram


def test_rfc_7677_example_byte_for_byte():
    credential = make_credential("SCRAM-SHA-256", "pencil", 4096, RFC_SALT)
    scram = ScramServer("SCRAM-SHA-256", {"user": credential}.get, nonce=RFC_SERVER_NONCE)
    assert scram.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert scram.user == "user" and not scram.done
    assert scram.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert scram.done


@pytest.mark.parametrize("mechanism", BOTH)
def test_kafka_pythons_client_authenticates(mechanism):
    client = ScramClient("alice", "alice-secret", mechanism)
    scram = server(mechanism)
    client.process_server_first_message(scram.first(client.first_message()))
    client.process_server_final_message(scram.final(client.final_message()))  # raises on a wrong signature
    assert scram.done and scram.user == "alice"


def _failure(mechanism: str, user: str, password: str) -> tuple[str, str]:
    """At which message, and with what message, kafka-python's client fails."""
    client = ScramClient(user, password, mechanism)
    scram = server(mechanism)
    try:
        client.process_server_first_message(scram.first(client.first_message()))
    except AuthenticationFailed as exc:
        return "first", str(exc)
    with pytest.raises(AuthenticationFailed) as failed:
        scram.final(client.final_message())
    assert not scram.done
    return "final", str(failed.value)


@pytest.mark.parametrize("mechanism", BOTH)
def test_an_unknown_user_fails_where_and_as_a_wrong_password_does(mechanism):
    assert _failure(mechanism, "alice", "guess") == (
        "final", f"{mechanism} authentication of 'alice' failed: wrong password or unknown user")
    assert _failure(mechanism, "mallory", "guess") == (
        "final", f"{mechanism} authentication of 'mallory' failed: wrong password or unknown user")
    # its salt is the same every time, as a real one is, and as long as ours
    firsts = [server(mechanism).first(b"n,,n=mallory,r=abc").decode() for _ in range(2)]
    salts = {dict(a.split("=", 1) for a in first.split(","))["s"] for first in firsts}
    assert len(salts) == 1 and len(base64.b64decode(salts.pop())) == len(USERS[mechanism]["alice"].salt)
    assert firsts[0].endswith(f",i={MIN_ITERATIONS}")


def test_what_rfc_5802_allows_and_kafka_accepts():
    assert exchange(b"y,,n=alice,r=abc").done  # the client could bind a channel; we cannot
    assert exchange(b"n,a=alice,n=alice,r=abc").done  # an authorization id that is the user's own
    assert exchange(b"n,,n=alice,r=abc,ext=ignored").done  # extensions other than tokenauth are ignored
    assert exchange(b"n,,n=alice,r=abc,tokenauth=false").done
    escaped = exchange(b"n,,n=a=2Cb=3Dc,r=abc", "escaped")
    assert escaped.done and escaped.user == "a,b=c"


@pytest.mark.parametrize("client_first, reason", [
    (b"p=tls-unique,,n=alice,r=abc", "channel binding is not supported"),
    (b"n,a=bob,n=alice,r=abc", "authorization id is not the user name"),
    (b"n,,n=alice,r=abc,tokenauth=true", "delegation tokens are not supported"),
    (b"n,,n=alice,r=abc,tokenauth=TRUE", "delegation tokens are not supported"),
    (b"", "malformed"),
    (b"x,,n=alice,r=abc", "malformed"),
    (b"n,bob,n=alice,r=abc", "malformed"),
    (b"n,,r=abc,n=alice", "malformed"),
    (b"n,,n=alice", "malformed"),
    (b"n,,n=,r=abc", "malformed"),
    (b"n,,n=a=2Db,r=abc", "malformed"),  # "=" escapes only "," and "="
    (b"n,,n=al\x00ice,r=abc", "malformed"),
    (b"n,,n=alice,r=a\x01c", "malformed"),
    (b"n,,n=alice,r=", "malformed"),
    (b"n,,m=mandatory,n=alice,r=abc", "malformed"),
    (b"n,,n=alice,r=abc,no-extension", "malformed"),
    (b"n,,n=\xffalice,r=abc", "not UTF-8"),
    (b"n,,n=alice,r=" + b"a" * 4096, "bytes \\(at most 4096\\)"),
])
def test_client_firsts_refused(client_first, reason):
    scram = server()
    with pytest.raises(AuthenticationFailed, match=reason):
        scram.first(client_first)
    with pytest.raises(AuthenticationFailed):  # and the exchange is over
        scram.final(b"c=biws,r=abc,p=AAAA")
    assert not scram.done


def test_client_finals_refused():
    first = b"n,,n=alice,r=abc"
    for tamper, reason in [
        ({"nonce": b"abc"}, "nonce is not the one of this exchange"),
        ({"channel": b"y,,"}, "channel binding is not the gs2 header's"),
        ({"channel": b"n,a=alice,"}, "channel binding is not the gs2 header's"),
    ]:
        with pytest.raises(AuthenticationFailed, match=reason):
            exchange(first, **tamper)
    for final, reason in [
        (lambda right: b"garbage", "malformed client-final"),
        (lambda right: right.split(b",p=")[0], "malformed client-final"),
        (lambda right: right.split(b",p=")[0] + b",p=not base64!", "malformed client-final \\(proof\\)"),
        (lambda right: right.split(b",p=")[0] + b",p=AAAA", "malformed client-final \\(proof\\)"),
        (lambda right: right.replace(b",p=", b",x,p="), "malformed client-final"),
        (lambda right: right + b"," + b"x" * 4096, "bytes \\(at most 4096\\)"),
        (lambda right: right[:-6] + b"AAAAA=", "wrong password"),  # a proof flipped: tampered in flight
    ]:
        scram = server()
        right = client_final("SCRAM-SHA-256", "alice-secret", first, scram.first(first))
        with pytest.raises(AuthenticationFailed, match=reason):
            scram.final(final(right))
        assert not scram.done


def test_calls_out_of_order_fail():
    with pytest.raises(AuthenticationFailed, match="out of order"):
        server().final(b"c=biws,r=abc,p=AAAA")
    scram = server()
    scram.first(b"n,,n=alice,r=abc")
    with pytest.raises(AuthenticationFailed, match="out of order"):
        scram.first(b"n,,n=alice,r=abc")
    with pytest.raises(AuthenticationFailed, match="out of order"):  # the failure ended it
        scram.final(b"c=biws,r=abc,p=AAAA")
    done = exchange(b"n,,n=alice,r=abc")
    with pytest.raises(AuthenticationFailed, match="out of order"):
        done.final(b"c=biws,r=abc,p=AAAA")
    assert done.done  # still authenticated: a stray message does not undo that


def test_credentials_in_kafkas_stored_form():
    credential = make_credential("SCRAM-SHA-512", "secret", 8192)
    text = credential.to_kafka()
    assert text.startswith("salt=") and text.endswith(",iterations=8192")
    assert [part.split("=", 1)[0] for part in text.split(",")] == ["salt", "stored_key", "server_key", "iterations"]
    assert ScramCredential.from_kafka(text) == credential
    reordered = ",".join(reversed(text.split(",")))  # Kafka reads them as properties: any order
    assert ScramCredential.from_kafka(reordered) == credential
    assert "stored_key" not in repr(credential) and "server_key" not in repr(credential)


@pytest.mark.parametrize("text, reason", [
    ("", "not ''"),
    ("salt=AAAA,stored_key=AAAA,server_key=AAAA", "without iterations"),
    ("salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=4096,extra=1", "not 'extra'"),
    ("salt=AAAA,salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=4096", "salt twice"),
    ("salt=A!AA,stored_key=AAAA,server_key=AAAA,iterations=4096", "salt is not base64"),
    ("salt=AAAA,stored_key=AAAé,server_key=AAAA,iterations=4096", "stored_key is not base64"),
    ("salt=,stored_key=AAAA,server_key=AAAA,iterations=4096", "empty salt"),
    ("salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=many", "not a positive number"),
    ("salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=0", "not a positive number"),
    ("salt=AAAA,stored_key=AAAA,server_key=AAAA,iterations=²", "not a positive number"),
])
def test_stored_forms_refused_with_what_is_wrong(text, reason):
    with pytest.raises(ValueError, match=reason):
        ScramCredential.from_kafka(text)


def test_making_credentials_refuses_weak_or_unknown_ones():
    with pytest.raises(ValueError, match="iterations must be between 4096"):
        make_credential("SCRAM-SHA-256", "secret", 1000)
    with pytest.raises(ValueError, match="unknown SCRAM mechanism 'SCRAM-SHA-1'"):
        make_credential("SCRAM-SHA-1", "secret")


@pytest.mark.parametrize("mechanism", BOTH)
def test_plain_passwords_checked_against_scram_credentials(mechanism):
    credential = USERS[mechanism]["alice"]
    assert verify_plain(mechanism, credential, "alice-secret")
    assert not verify_plain(mechanism, credential, "alice-secret ")
    assert not verify_plain(mechanism, credential, "")
    assert not verify_plain("SCRAM-SHA-256" if mechanism == "SCRAM-SHA-512" else "SCRAM-SHA-512",
                            credential, "alice-secret")
