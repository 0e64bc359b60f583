"""Issue 29, item 5: the ZooKeeper commands (`users`, `acls`, `cluster`, `topics`, `brokers`)
against a ZooKeeper that cannot be reached say so in one line, as real processes: before,
kazoo's retries ("Cannot resolve ...", "Connection dropped ...") came first, printed by
Python's last-resort logging handler."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coordinator.store.zkserver import free_port

COMMANDS = {
    "users": ["users", "list", "--zookeeper-timeout", "2"],
    "acls": ["acls", "list", "--zookeeper-timeout", "2"],
    "cluster": ["cluster"],
    "topics": ["topics", "list"],
    "brokers": ["brokers", "list"],
}


@pytest.mark.parametrize("where", ["refused", "unresolvable"])
def test_an_unreachable_zookeeper_is_one_line(where):
    hosts = f"127.0.0.1:{free_port()}" if where == "refused" else "nosuchhost.invalid:2181"
    # all at once: each waits out its timeout (2 s, or the 5 s default of cluster, topics, brokers)
    running = {name: subprocess.Popen([sys.executable, "-m", "tools", *args, "--zookeeper", hosts],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for name, args in COMMANDS.items()}
    for name, process in running.items():
        out, err = process.communicate(timeout=60)
        timeout = "2s" if name in ("users", "acls") else "5s"
        assert (process.returncode, out, err) == (
            1, "", f"Error: cannot reach ZooKeeper at {hosts} within {timeout}\n"), name
