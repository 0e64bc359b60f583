"""Keeping strangers out: password hashes and TLS contexts, shared by every listener that
asks for them (today the metrics endpoint)."""
