"""Logs: our lines and the standard library's (kazoo's) come out through one structlog setup."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from coordinator import logs

SCRIPT = """
import logging
from coordinator import logs
logs.configure({fmt!r})
logs.get("groupkeeper").bind(group="orders", generation=7).info("rebalance completed")
logging.getLogger("kazoo.client").warning("Connection dropped: %s", "socket connection broken")
"""


def _run(fmt: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(fmt=fmt)], capture_output=True,
                          text=True, timeout=60, check=True)
    return done.stderr.strip().splitlines()


def test_json_lines_carry_bound_context_and_kazoo_lines_alike():
    ours, kazoo = (json.loads(line) for line in _run("json"))
    assert ours["event"] == "rebalance completed" and ours["group"] == "orders"
    assert ours["generation"] == 7 and ours["level"] == "info" and "timestamp" in ours
    assert kazoo["logger"] == "kazoo.client" and kazoo["level"] == "warning"
    assert kazoo["event"] == "Connection dropped: socket connection broken"


def test_console_format_is_readable_text():
    lines = _run("console")
    assert len(lines) == 2
    assert "rebalance completed" in lines[0] and "group=orders" in lines[0]
    assert "kazoo.client" in lines[1]
    for line in lines:
        with pytest.raises(ValueError):
            json.loads(line)


def test_auto_writes_json_when_stderr_is_not_a_terminal():
    ours, _ = (json.loads(line) for line in _run("auto"))  # captured: a pipe, as under systemd
    assert ours["event"] == "rebalance completed"


def test_auto_writes_console_text_in_a_terminal():
    import os
    import pty
    leader, follower = pty.openpty()
    with subprocess.Popen([sys.executable, "-c", SCRIPT.format(fmt="auto")], stderr=follower,
                          stdout=subprocess.DEVNULL) as child:
        os.close(follower)
        output = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        assert child.wait(timeout=60) == 0
    os.close(leader)
    text = output.decode(errors="replace")
    assert "rebalance completed" in text and not text.lstrip().startswith("{")


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="auto, json, console"):
        logs.configure("xml")
