"""Tests that start a real ZooKeeper (the session's, conftest.py) and, most of them,
`groupkeeper run` processes on it."""
