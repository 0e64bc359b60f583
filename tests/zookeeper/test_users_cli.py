"""`groupkeeper users ...`: add, list and delete SCRAM users in ZooKeeper; every error one
line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from kazoo.client import KazooClient

from coordinator.security.scram import verify_plain
from coordinator.security.users import parse_user_config
from tools.users_cli import users
from tests.support.in_process import make_chroot


@pytest.fixture
def hosts(zookeeper) -> str:
    return zookeeper.connect_string + make_chroot(zookeeper.connect_string, "users-cli")


def cli(hosts: str, *args: str, input: str | None = None):
    return CliRunner().invoke(users, [*args, "--zookeeper", hosts], input=input)


def stored(hosts: str, user: str) -> dict:
    client = KazooClient(hosts=hosts)
    client.start(timeout=10)
    try:
        return parse_user_config(client.get(f"/config/users/{user}")[0])
    finally:
        client.stop()
        client.close()


def test_add_list_and_delete(hosts, tmp_path):
    password = tmp_path / "password"
    password.write_text("alice-secret\nignored\n")
    added = cli(hosts, "add", "alice", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
                "--password-file", str(password))
    assert added.exit_code == 0, added.output
    assert added.output == "Set the SCRAM-SHA-512 credential of user alice.\n"
    credential = stored(hosts, "alice")["SCRAM-SHA-512"]
    assert credential.iterations == 8192 and verify_plain("SCRAM-SHA-512", credential, "alice-secret")

    from_stdin = cli(hosts, "add", "alice", "--mechanism", "SCRAM-SHA-256", "--password-file", "-",
                     input="other-secret\n")
    assert from_stdin.exit_code == 0, from_stdin.output
    assert verify_plain("SCRAM-SHA-256", stored(hosts, "alice")["SCRAM-SHA-256"], "other-secret")
    prompted = cli(hosts, "add", "bob", "--mechanism", "SCRAM-SHA-256", input="typed\ntyped\n")
    assert prompted.exit_code == 0, prompted.output
    assert "typed" not in prompted.output  # hidden
    assert verify_plain("SCRAM-SHA-256", stored(hosts, "bob")["SCRAM-SHA-256"], "typed")
    assert stored(hosts, "bob")["SCRAM-SHA-256"].iterations == 4096

    listed = cli(hosts, "list")
    assert listed.exit_code == 0 and listed.output == "alice\tSCRAM-SHA-256,SCRAM-SHA-512\nbob\tSCRAM-SHA-256\n"
    assert json.loads(cli(hosts, "list", "--json").output) == {
        "alice": ["SCRAM-SHA-256", "SCRAM-SHA-512"], "bob": ["SCRAM-SHA-256"]}

    one = cli(hosts, "delete", "alice", "--mechanism", "SCRAM-SHA-256")
    assert one.exit_code == 0 and one.output == "Deleted the SCRAM-SHA-256 credential of user alice.\n"
    assert list(stored(hosts, "alice")) == ["SCRAM-SHA-512"]
    every = cli(hosts, "delete", "bob")
    assert every.exit_code == 0 and every.output == "Deleted the credentials of user bob.\n"
    assert json.loads(cli(hosts, "list", "--json").output) == {"alice": ["SCRAM-SHA-512"]}


def test_a_digest_file_protects_and_opens(hosts, tmp_path):
    digest, password = tmp_path / "digest", tmp_path / "password"
    digest.write_text("groupkeeper:s3cret\n")
    password.write_text("pw\n")
    added = cli(hosts, "add", "carol", "--mechanism", "SCRAM-SHA-256", "--password-file", str(password),
                "--zookeeper-digest-file", str(digest))
    assert added.exit_code == 0, added.output
    assert json.loads(cli(hosts, "list", "--json", "--zookeeper-digest-file", str(digest)).output) == {
        "carol": ["SCRAM-SHA-256"]}
    refused = cli(hosts, "list")
    assert refused.exit_code == 1
    assert refused.output == ("Error: ZooKeeper refused access to /config/users/carol: it is protected; "
                              "give --zookeeper-digest-file with its digest user\n")


def test_errors_are_one_line_and_non_zero(hosts, tmp_path):
    password, empty, bad_digest = tmp_path / "password", tmp_path / "empty", tmp_path / "digest"
    password.write_text("pw\n")
    empty.write_text("\n")
    bad_digest.write_text("no-colon\n")
    cli(hosts, "add", "dave", "--mechanism", "SCRAM-SHA-256", "--password-file", str(password))
    for args, message in [
        (("add", "x", "--mechanism", "SCRAM-SHA-1", "--password-file", str(password)),
         "Invalid value for '--mechanism'"),
        (("add", "x", "--mechanism", "SCRAM-SHA-256", "--iterations", "1000", "--password-file", str(password)),
         "Invalid value for '--iterations': 1000 is not in the range 4096<=x<=16384"),
        (("add", "x", "--mechanism", "SCRAM-SHA-256", "--password-file", str(empty)), "Error: the password is empty"),
        (("add", "x", "--mechanism", "SCRAM-SHA-256", "--password-file", str(tmp_path / "absent")),
         "Invalid value for '--password-file'"),
        (("add", "", "--mechanism", "SCRAM-SHA-256", "--password-file", str(password)),
         "Error: the user name is empty"),
        (("add", "x", "--mechanism", "SCRAM-SHA-256", "--password-file", str(password),
          "--zookeeper-digest-file", str(bad_digest)), "must hold user:password on its first line"),
        (("add", "x", "--mechanism", "SCRAM-SHA-256", "--password-file", str(password),
          "--zookeeper-digest-file", str(tmp_path / "absent")), "No such file or directory"),
        (("delete", "nobody"), "Error: user 'nobody' does not exist"),
        (("delete", "dave", "--mechanism", "SCRAM-SHA-512"), "Error: user 'dave' has no SCRAM-SHA-512 credential"),
    ]:
        result = cli(hosts, *args)
        assert result.exit_code != 0, args
        lines = result.output.strip().splitlines()
        assert message in lines[-1], (args, result.output)
        assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
        if lines[0].startswith("Error"):  # ours: one line; click's usage errors: its usage, then one line
            assert len(lines) == 1, (args, result.output)
    mismatch = cli(hosts, "add", "x", "--mechanism", "SCRAM-SHA-256", input="one\ntwo\none\none\n")
    assert mismatch.exit_code == 0  # click asks again when the two do not match
    assert "Error: The two entered values do not match." in mismatch.output


def test_unreachable_zookeeper_is_one_line():
    result = CliRunner().invoke(users, ["list", "--zookeeper", "127.0.0.1:1", "--zookeeper-timeout", "0.5"])
    assert result.exit_code == 1
    assert result.output == "Error: cannot reach ZooKeeper at 127.0.0.1:1 within 0.5s\n"
