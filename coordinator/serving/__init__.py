"""Serving: bytes from sockets to the API and back.

| Module | Holds |
| --- | --- |
| `interfaces.py` | what the serving layer asks of the API (`Api`) and of the server (`Host`), its `Limits` |
| `server.py` | `Server`: the listeners, one epoll loop serving every connection, the reaper of idle ones |
| `trioloop.py` | `TrioLoop`: whether trio has something to run, for a serving loop that waits in its own epoll |
| `connection.py` | `ClientConnection`: a client's frames handled in order, its answers out in the same order |
| `pending.py` | `Pending`: an answer that a callback completes |
| `outbox.py` | `Outbox`: bytes a socket has not taken yet, in order, as the buffers they came in |
| `splice.py` | `Pipe`, `Piped`: bytes moved from socket to socket by the kernel (a relayed answer's record sets) |
| `metrics_http.py` | the /metrics endpoint that Prometheus scrapes |

May import: `security` (TLS, the SASL gate, a connection's `Client`), the layers below it
and `protocol`; never `api` (it is given an `Api`), `cluster` or `daemon`.
"""
