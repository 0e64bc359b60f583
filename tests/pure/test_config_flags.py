"""Every configuration key is a flag of `groupkeeper run`, made from the one declaration of
keys, read and checked as the file's values are; a wrong one is one line and exit 1."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from coordinator.config import KEYS, flag_name
from tools.cli import main, run, run_config


def test_every_key_is_a_flag_of_run():
    flags = {opt for param in run.params for opt in param.opts}
    assert {flag_name(key) for key in KEYS} <= flags
    assert {param.name for param in run.params} >= set(KEYS)


def test_flags_win_over_the_file_and_read_as_the_file_does(tmp_path):
    path = tmp_path / "gk.toml"
    path.write_text('lag_refresh_interval_ms = 60000\nacls = false\nsuper_users = ["User:a"]\n')
    config = run_config(str(path), {"lag_refresh_interval_ms": "5000", "acls": "true",
                                    "super_users": "User:admin, User:ops", "metrics_users": "ops=hash1,dev=hash2",
                                    "group_max_size": "17", "zk_session_timeout": 7.5, "brokers": None})
    assert config["lag_refresh_interval_ms"] == 5000 and config["acls"] is True
    assert config["super_users"] == ["User:admin", "User:ops"]
    assert config["metrics_users"] == {"ops": "hash1", "dev": "hash2"}
    assert config["group_max_size"] == 17 and config["zk_session_timeout"] == 7.5
    assert config["brokers"] == KEYS["brokers"][1]  # not given: the file's or the default


@pytest.mark.parametrize("args,message", [
    (["--lag-refresh-interval-ms", "5"], "--lag-refresh-interval-ms must be between 1000 and 86400000, not 5"),
    (["--acls", "maybe"], "--acls must be true or false, not 'maybe'"),
    (["--group-max-size", "many"], "--group-max-size must be a whole number, not 'many'"),
    (["--metrics-users", "nobody"], "--metrics-users: 'nobody' is not NAME=VALUE"),
])
def test_a_wrong_flag_is_one_line(args, message):
    result = CliRunner().invoke(main, ["run", *args])
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: {message}"
