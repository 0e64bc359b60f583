"""The layout's contracts (pyproject.toml's [tool.importlinter]): tools beside the runtime,
the runtime's layers, the wire protocol sans I/O, no import circles. Checked statically by
import-linter over every import (those under TYPE_CHECKING too), shown able to fail, and
dynamically, in fresh interpreters, for what each entry point loads."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"


def lint(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(tree / "pyproject.toml"), "--no-cache"], cwd=tree,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)


def test_the_contracts_hold():
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 kept, 0 broken" in done.stdout


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """The packages and the contracts, in a tree of their own to break."""
    tree = tmp_path_factory.mktemp("layout")
    for package in ("coordinator", "protocol", "tools"):
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree)
    return tree


@pytest.mark.parametrize("module, line, broken", [
    ("coordinator/groups/state.py", "from tools import cli", "tools beside the runtime"),
    ("coordinator/store/layout.py", "from ..cluster import ownership", "the runtime's layers"),
    ("coordinator/serving/server.py", "from ..api import router", "the runtime's layers"),
    ("coordinator/groups/state.py", "from ..security import client", "the runtime's layers"),  # siblings
    ("protocol/varint.py", "import socket", "the wire protocol does no I/O"),
    ("protocol/varint.py", "from coordinator import logs", "tools beside the runtime, the wire protocol"),
    ("coordinator/store/writer.py",
     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .partition import PartitionStore",
     "no import circles among siblings"),
])
def test_each_contract_fails_when_broken(copy, module, line, broken):
    path = copy / module
    kept = path.read_text()
    path.write_text(kept + "\n" + line + "  # noqa\n")
    try:
        done = lint(copy)
    finally:
        path.write_text(kept)
    assert done.returncode == 1
    assert any(row.startswith(broken) and row.endswith("BROKEN") for row in done.stdout.splitlines()), done.stdout


def loaded(code: str) -> list[str]:
    """The modules of ours loaded after `code` runs in a fresh interpreter, and trio's, kazoo's
    and structlog's."""
    probe = (f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('tools', 'coordinator', 'protocol', 'trio', 'kazoo', 'structlog'))))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_protocol_loads_no_io_and_nothing_of_ours():
    found = loaded("import protocol, protocol.messages, protocol.codec, protocol.consumer, protocol.hot, "
                   "protocol.framing, protocol.requests, protocol.schemas")
    assert found and all(name.split(".")[0] == "protocol" for name in found)


def test_the_runtime_loads_no_tool():
    found = loaded("import coordinator.daemon")
    assert "coordinator.serving.server" in found and not [n for n in found if n.split(".")[0] == "tools"]


def test_the_command_line_loads_the_server_only_to_run_it():
    found = loaded("import tools.cli, tools.kafka_admin")
    assert "tools.groups_cli" in found
    assert not [n for n in found if n.startswith(("coordinator.daemon", "coordinator.serving", "coordinator.api",
                                                   "coordinator.cluster.ownership"))]
