"""Tests with Apache Kafka 4.4 (KRaft, from the jars `make install` caches): the gateway in
front of a real cluster, the Java client, Kafka's own tools and the Go clients.

Which tests share what: every module here except those that change the cluster under the
gateway shares one three-node cluster (conftest.py's `kafka`, package scope), each test
with topics and groups named for itself; `test_cluster_changes.py` starts a three-node
cluster of its own, since it kills and moves what the others would read.

Every module here is marked `conformance`: `make conformance` runs them beside the matrix
(`.ci/run` runs it after `make test`), which keeps `make test` within its 20 minutes."""
