"""Tools beside the runtime: what operators and developers run, never what `groupkeeper
run` executes.

| Module | Holds |
| --- | --- |
| `cli.py` | the `groupkeeper` command (`python -m tools` is the same) and its smaller subcommands |
| `groups_cli.py`, `acls_cli.py`, `users_cli.py` | `groupkeeper groups`, `acls`, `users` (kafka-consumer-groups.sh's, kafka-acls.sh's and kafka-configs.sh's counterparts) |
| `kafka_admin.py` | a blocking Kafka-protocol client for the CLIs and benchmarks (`NodeConnection`, `Cluster`) |
| `topics_admin.py` | Kafka's topic registry in ZooKeeper, for development (`groupkeeper topics`, `brokers`) |
| `cluster_status.py` | `groupkeeper cluster`: instances and group-partitions as ZooKeeper records them |
| `assign_whatif.py` | `groupkeeper assign`: a strategy run offline on a described group |
| `zookeeper_options.py` | the CLIs' ZooKeeper digest options |
| `tables.py` | the CLIs' one table printer (Kafka's tool's layout) |
| `client_config.py` | `--command-config`: a Kafka client properties file (security protocol, SASL, PEM TLS) for the CLIs |
| `events_generate.py` | synthetic event logs for the analytics job's tests and benchmarks |
| `bench/` | `groupkeeper bench ...`: each benchmark beside a reference in the same run |
| `analyze/` | `groupkeeper analyze`: the PySpark job over many coordinators' event logs |

May import: `coordinator` (the runtime) and `protocol`. Nothing in `coordinator` or
`protocol` imports this package (an import-linter contract, checked by `make test`).
"""
