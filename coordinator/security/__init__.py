"""Keeping strangers out.

| Module | Holds |
| --- | --- |
| `tls.py` | TLS for the poll loop's sockets (`TLSSocket`, memory BIOs) and the contexts |
| `sasl.py` | the SASL gate before a connection's first request: PLAIN and SCRAM |
| `scram.py` | SCRAM-SHA-256/512 (RFC 5802/7677): the server, and the client |
| `upstream.py` | groupkeeper's own connections to the brokers: their security, and the SASL login on them (sans I/O) |
| `users.py` | SCRAM credentials in Kafka's ZooKeeper layout, followed and changed |
| `passwords.py` | password hashes for the metrics endpoint's basic auth |
| `client.py` | `Client`: who is on the other end of a connection (address, listener, principal) |
| `acls/` | Kafka's ACLs: what they mean (`authorizer.py`) and where they are kept (`store.py`) |
| `audit.py` | operators' ACL and user changes (made in ZooKeeper by the CLIs), logged and in the event log |

May import: `store`, `events`, `listeners`, `logs`, `metrics` and `protocol`.
"""
