"""TLS server contexts from PEM files, with the standard library's `ssl`."""

from __future__ import annotations

import os
import ssl


class TLSError(Exception):
    """A certificate or key that cannot be used, phrased for the operator."""


def server_context(cert: str, key: str) -> ssl.SSLContext:
    """A server context presenting `cert` (PEM, with its chain) and `key`: TLS 1.2 and later,
    Python's default ciphers."""
    for path in (cert, key):
        if not os.path.isfile(path):
            raise TLSError(f"{path}: no such file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise TLSError(f"cannot use certificate {cert} with key {key}: {exc}") from None
    return context
