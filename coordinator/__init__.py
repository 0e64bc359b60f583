"""groupkeeper's runtime: everything `groupkeeper run` executes, and nothing else.

General layout. Each package may import the ones below it and never one above (an
import-linter contract in pyproject.toml, checked by `make test`, says so as data):

    daemon.py            wires one instance together from its configuration, runs it to the end
    gateway/             the cluster's front door: node ports, relaying, answers rewritten
    api/                 the Kafka APIs: a decoded request in, a response out
    serving/             sockets, frames, client connections, the poll loop, answers that
                         wait, the /metrics endpoint
    cluster/             which instance coordinates which groups
    groups/ security/ topics/
                         consumer groups; TLS, SASL and Kafka's ACLs; the Kafka cluster beside us
    assignors/ store/    assignment strategies; everything kept in ZooKeeper
    events.py systemd.py listeners.py
    metrics.py logs.py config.py
                         observability and configuration, used by every layer

Packages on one line are siblings that do not import each other (but for `listeners.py`,
which reads `config.py`). `protocol` (the wire protocol, sans I/O) is below all of it. The
tools (`tools/`: the command line, benchmarks, the analytics job) import the runtime; the
runtime never imports the tools.
"""
