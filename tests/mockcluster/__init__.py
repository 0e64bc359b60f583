"""Tests with librdkafka's own mock cluster (tests/support/mock_cluster.py) behind the
gateway: a second Kafka-protocol broker implementation, written by others, whose answers
are not always as Kafka's schemas say, which Kafka's clients read all the same."""
