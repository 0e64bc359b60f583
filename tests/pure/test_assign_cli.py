"""`groupkeeper assign`: a strategy's answer for a described group, its balance and what it
moves; bad input is one clear line and exit 1."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tools.cli import main

GROUP = {"topics": {"t": 6, "u": 2},
         "members": [{"id": "a", "topics": ["t", "u"], "owned": {"t": [0, 1, 2], "u": [0, 1]}},
                     {"id": "b", "topics": ["t", "u"], "owned": {"t": [3, 4, 5]}},
                     {"id": "c", "topics": ["t", "u"]}]}


def run(*args: str, stdin: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["assign", *args], input=stdin)
    return result.exit_code, result.output


def test_sticky_preview_moves_only_what_balance_needs():
    code, out = run("--strategy", "sticky", stdin=json.dumps(GROUP))
    assert code == 0
    answer = json.loads(out)
    loads = {m: sum(len(ps) for ps in ts.values()) for m, ts in answer["assignment"].items()}
    assert sorted(loads.values()) == [2, 3, 3]
    # a held 5 and b 3 of 8; balance needs 3-3-2: a gives up 2, b gives up none
    assert answer["stats"] == {"members": 3, "partitions": 8, "min_load": 2, "max_load": 3,
                               "moved": 2, "newly_assigned": 0, "unassigned": 0}


def test_range_preview_ignores_what_members_own(tmp_path):
    path = tmp_path / "group.json"
    path.write_text(json.dumps(GROUP))
    code, out = run("--strategy", "range", "--input", str(path), stdin="")
    assert code == 0
    assert json.loads(out)["assignment"] == {"a": {"t": [0, 1], "u": [0]}, "b": {"t": [2, 3], "u": [1]},
                                             "c": {"t": [4, 5]}}


@pytest.mark.parametrize("stdin, args, message", [
    ("not json", ("--strategy", "range"), "Error: input is not JSON"),
    ('{"topics": {"t": -1}, "members": []}', ("--strategy", "range"), "Error: input: topics.t: a partition count"),
    ('{"topics": {}, "members": [{"id": "a", "topics": "t"}]}', ("--strategy", "range"),
     'Error: input: members[0]: "topics" must be a list'),
    ('{"topics": {}, "members": [{"id": "a", "topics": []}, {"id": "a", "topics": []}]}', ("--strategy", "range"),
     "Error: input: members[1]: member id 'a' appears twice"),
    ("{}", ("--strategy", "bogus"), "Error: unknown strategy 'bogus' (known: cooperative-sticky, range, roundrobin, sticky, uniform)"),
])
def test_bad_input_is_one_line(stdin, args, message):
    code, out = run(*args, stdin=stdin)
    assert code == 1
    assert len(out.strip().splitlines()) == 1 and out.startswith(message)


@pytest.mark.parametrize("target, message", [
    ("tests.zookeeper.test_assignor_registry:Raises", "Error: strategy 'mine' raised ValueError: no partitions today"),
    ("tests.zookeeper.test_assignor_registry:BeyondTheEnd", "Error: strategy 'mine' gave t-6, which does not exist"),
])
def test_a_failing_configured_strategy_is_one_line(tmp_path, target, message):
    config = tmp_path / "groupkeeper.toml"
    config.write_text(f'[assignors]\nmine = "{target}"\n')
    code, out = run("--strategy", "mine", "--config", str(config), stdin=json.dumps(GROUP))
    assert (code, out.strip()) == (1, message)
