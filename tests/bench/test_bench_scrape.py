"""`groupkeeper bench scrape`, tiny: both ways make the same /metrics text, the stepping way
lets the serving loop run many more times during a scrape than the one-piece reference
(turns counted, not timed), and bad arguments are one line."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tools.bench import scrape
from tools.cli import main


def test_a_tiny_run_steps_and_makes_the_reference_text():
    result = scrape.run([600], partitions=2, rounds=1)
    (row,) = result["results"]
    assert row["groups"] == 600 and row["partitions"] == 1_200 and row["same_text"]
    # the reference: a turn of the loop after each collector and before each family (and
    # one or two as the loop starts and ends), no more; the stepping way: those, and at least
    # one per RANK_CHUNK groups of each of the three rankings and one after each source
    turns = 2 + 10  # 2 collectors; the lag collector's 5 families, the groups collector's 5
    assert row["one_piece"]["loop_turns"] <= turns + 3
    assert row["steps"]["loop_turns"] >= turns + 5
    assert row["steps"]["bytes"] == row["one_piece"]["bytes"] > 1_000
    text = scrape.table(result)
    assert "in steps" in text and "one piece" in text and "NO" not in text


def test_the_cli_prints_json():
    done = CliRunner().invoke(main, ["bench", "scrape", "--json", "--groups", "50", "--partitions", "1", "--rounds", "1"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["results"][0]["same_text"] is True


@pytest.mark.parametrize("args, message", [
    (["--groups", "x"], "Error: --groups: numbers from 1 to 100000, comma-separated; not 'x'"),
    (["--groups", "0"], "Error: --groups: numbers from 1 to 100000, comma-separated; not '0'"),
    (["--partitions", "0"], "Error: Invalid value for '--partitions'"),
])
def test_bad_arguments_are_one_line(args, message):
    result = CliRunner().invoke(main, ["bench", "scrape", *args])
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    assert result.output.strip().splitlines()[-1].startswith(message), result.output
