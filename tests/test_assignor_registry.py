"""Strategies from configuration and entry points, and the clear refusals at start-up."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from coordinator.assignors import BUILT_IN
from coordinator.assignors.base import Assigned
from coordinator.assignors.registry import AssignorError, load_assignors


class EverythingToTheFirst:
    """A user's strategy: all partitions to the first member in id order."""

    def assign(self, members, partitions):
        first = min(m.member_id for m in members)
        return Assigned({m.member_id: ({t: list(range(partitions[t])) for t in m.topics if t in partitions}
                                       if m.member_id == first else {}) for m in members})


def test_built_ins_and_a_configured_strategy():
    assignors = load_assignors({"everything": "tests.test_assignor_registry:EverythingToTheFirst"})
    assert set(BUILT_IN) <= set(assignors)
    assert isinstance(assignors["everything"], EverythingToTheFirst)


def test_a_strategy_from_an_installed_entry_point(tmp_path, monkeypatch):
    dist = tmp_path / "fake_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[groupkeeper.assignors]\nfirst = tests.test_assignor_registry:EverythingToTheFirst\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert isinstance(load_assignors({})["first"], EverythingToTheFirst)


@pytest.mark.parametrize("target, message", [
    ("no_such_module:X", "assignor 'bad': cannot import no_such_module"),
    ("tests.test_assignor_registry:Missing", "assignor 'bad': tests.test_assignor_registry has no Missing"),
    ("tests.test_assignor_registry", "assignor 'bad': 'tests.test_assignor_registry' is not \"module:Class\""),
    ("tests.test_assignor_registry:load_assignors", "has no assign(members, partitions)"),
])
def test_an_unloadable_strategy_names_itself(target, message):
    with pytest.raises(AssignorError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_assignors({"bad": target})


def test_run_refuses_to_start_with_an_unloadable_strategy(tmp_path):
    config = tmp_path / "groupkeeper.toml"
    config.write_text(textwrap.dedent("""
        [assignors]
        mine = "nowhere:Mine"
    """))
    done = subprocess.run([sys.executable, "-m", "coordinator", "run", "--config", str(config),
                           "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["Error: assignor 'mine': cannot import nowhere: No module named 'nowhere'"]
