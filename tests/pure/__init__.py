"""Tests that start nothing: pure logic under MockClock, the codecs against kafka-python's,
and in-process sockets at most."""
