"""The test suite, laid out by what a test starts (`make test` runs all but `conformance/`
and the modules marked `conformance`, which `make conformance` runs):

- `pure/`: nothing: logic, codecs and rules, with MockClock; in-process sockets at most;
- `zookeeper/`: a real ZooKeeper (the session's one, conftest.py) and `groupkeeper run`
  processes on it;
- `tansu/`: Tansu, the light Kafka-protocol broker, behind the gateway (the static members'
  restarts of four clients in turn are marked `conformance`);
- `kafka/`: Apache Kafka 4.4 (KRaft) from the jars `make install` caches, with the Java
  client, Kafka's own tools and the Go clients (every module marked `conformance`: they run
  in `make conformance`, beside the matrix);
- `bench/`: the benchmarks (`groupkeeper bench ...`) run small, for correctness only;
- `conformance/`: the client x broker matrix (`make conformance`), which writes the table
  in docs/conformance.md;
- `support/`: what the tests share: the real parts they start (ZooKeeper's chroots,
  `groupkeeper run`, Tansu, Kafka), clients, certificates and stand-ins.

Test modules import `tests.support` and, for shared helpers, each other; nothing in
coordinator/, protocol/ or tools/ imports the tests.
"""
