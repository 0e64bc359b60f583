"""Certificates made for a test with the `cryptography` package: a CA of its own, server
certificates for 127.0.0.1 and client certificates with the subject a test names."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_NAMES = {"CN": NameOID.COMMON_NAME, "O": NameOID.ORGANIZATION_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
          "C": NameOID.COUNTRY_NAME, "L": NameOID.LOCALITY_NAME}


def _name(subject: str) -> x509.Name:
    """"CN=alice,O=Example" (most specific first, as RFC 2253 writes it) as an X.509 name."""
    parts = [part.split("=", 1) for part in subject.split(",")]
    return x509.Name([x509.NameAttribute(_NAMES[key], value) for key, value in reversed(parts)])


class Authority:
    """A CA whose certificate is `cafile`; `issue` writes a certificate it signed and its key."""

    def __init__(self, directory: Path, subject: str = "CN=groupkeeper test CA"):
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(subject)
        cert = (self._builder(self.name, self.key.public_key())
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(self.key, hashes.SHA256()))
        self.cafile = str(self._write("ca.pem", cert.public_bytes(serialization.Encoding.PEM)))

    def _builder(self, subject: x509.Name, public_key) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.timezone.utc)
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(self.name).public_key(public_key)
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1)))

    def _write(self, filename: str, data: bytes) -> Path:
        path = self.directory / filename
        path.write_bytes(data)
        return path

    def issue(self, subject: str, filename: str, server: bool = False) -> tuple[str, str]:
        """(certificate, key) PEM paths for `subject`: a server's for 127.0.0.1, or a client's."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = self._builder(_name(subject), key.public_key()).add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path = self._write(f"{filename}.pem", cert.public_bytes(serialization.Encoding.PEM))
        key_path = self._write(f"{filename}.key", key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        return str(cert_path), str(key_path)
