"""`groupkeeper acls ...`: kafka-acls.sh's flags and output over Kafka's ACL layout in a
real ZooKeeper (each test in a chroot of its own)."""

from __future__ import annotations

import json

from click.testing import CliRunner
from kazoo.client import KazooClient

from tools.acls_cli import acls
from tests.support.in_process import make_chroot


def _connect(zookeeper) -> str:
    return zookeeper.connect_string + make_chroot(zookeeper.connect_string, "acls-cli")


def run(connect: str, *args: str, input: str | None = None):
    return CliRunner().invoke(acls, [*args, "--zookeeper", connect], input=input)


def listed(connect: str, *args: str) -> list[dict]:
    result = run(connect, "list", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_add_list_and_remove_as_kafka_acls_shows_them(zookeeper):
    connect = _connect(zookeeper)
    added = run(connect, "add", "--allow-principal", "User:alice", "--allow-principal", "User:bob",
                "--operation", "read", "--operation", "Describe", "--group", "ledger", "--topic", "orders")
    assert added.exit_code == 0, added.output
    assert ("Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=ledger, patternType=LITERAL)`:\n"
            "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
            "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
            "\t(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)\n"
            "\t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)\n") in added.output
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:" \
        in added.output

    text = run(connect, "list", "--group", "ledger").output
    assert text.startswith("Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=ledger, "
                           "patternType=LITERAL)`:\n\t(principal=User:alice, host=*, operation=DESCRIBE, ")
    assert "TOPIC" not in text  # only the resource asked for
    assert [(r["resource_type"], r["name"], r["pattern_type"], len(r["acls"])) for r in listed(connect)] == [
        ("GROUP", "ledger", "LITERAL", 4), ("TOPIC", "orders", "LITERAL", 4)]

    removed = run(connect, "remove", "--allow-principal", "User:bob", "--operation", "Read", "--group", "ledger",
                  "--force")
    assert removed.exit_code == 0, removed.output
    (group,) = listed(connect, "--group", "ledger")
    assert {(a["principal"], a["operation"]) for a in group["acls"]} == {
        ("User:alice", "DESCRIBE"), ("User:alice", "READ"), ("User:bob", "DESCRIBE")}

    assert run(connect, "remove", "--group", "ledger", "--force").exit_code == 0  # no principal: all of them
    assert [r["name"] for r in listed(connect)] == ["orders"]


def test_remove_asks_first_unless_forced(zookeeper):
    connect = _connect(zookeeper)
    run(connect, "add", "--allow-principal", "User:alice", "--topic", "t")
    declined = run(connect, "remove", "--topic", "t", input="n\n")
    assert declined.exit_code == 1 and "Are you sure you want to delete all ACLs for resource" in declined.output
    assert len(listed(connect, "--topic", "t")) == 1
    accepted = run(connect, "remove", "--topic", "t", input="y\n")
    assert accepted.exit_code == 0 and listed(connect, "--topic", "t") == []


def test_deny_hosts_cluster_and_prefixed(zookeeper):
    connect = _connect(zookeeper)
    assert run(connect, "add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.9",
               "--operation", "IdempotentWrite", "--cluster").exit_code == 0
    assert run(connect, "add", "--allow-principal", "User:*", "--allow-host", "10.0.0.1", "--allow-host", "10.0.0.2",
               "--topic", "events.", "--resource-pattern-type", "prefixed").exit_code == 0
    (cluster,) = listed(connect, "--cluster")
    assert cluster["name"] == "kafka-cluster" and cluster["acls"] == [
        {"principal": "User:mallory", "host": "10.0.0.9", "operation": "IDEMPOTENT_WRITE", "permission": "DENY"}]
    assert listed(connect, "--topic", "events.") == []  # literal by default: none of that name
    (prefixed,) = listed(connect, "--topic", "events.", "--resource-pattern-type", "prefixed")
    assert {(a["host"], a["operation"]) for a in prefixed["acls"]} == {("10.0.0.1", "ALL"), ("10.0.0.2", "ALL")}
    assert [r["name"] for r in listed(connect, "--topic", "events.", "--resource-pattern-type", "any")] == ["events."]
    # match: every resource whose ACLs apply to the name
    run(connect, "add", "--allow-principal", "User:alice", "--topic", "*")
    run(connect, "add", "--allow-principal", "User:alice", "--topic", "events.clicks")
    run(connect, "add", "--allow-principal", "User:alice", "--topic", "events.views")
    matched = listed(connect, "--topic", "events.clicks", "--resource-pattern-type", "match")
    assert sorted((r["name"], r["pattern_type"]) for r in matched) == [
        ("*", "LITERAL"), ("events.", "PREFIXED"), ("events.clicks", "LITERAL")]


def test_what_it_writes_is_kafkas_layout(zookeeper):
    connect = _connect(zookeeper)
    run(connect, "add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "g")
    client = KazooClient(hosts=connect)
    client.start(timeout=10)
    try:
        data, _ = client.get("/kafka-acl/Group/g")
        assert json.loads(data) == {"version": 1, "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
        (change,) = client.get_children("/kafka-acl-changes")
        assert client.get(f"/kafka-acl-changes/{change}")[0] == b"GROUP:g"
    finally:
        client.stop()
        client.close()


def test_a_digest_file_authenticates(zookeeper, tmp_path):
    connect = _connect(zookeeper)
    secret = tmp_path / "digest"
    secret.write_text("acl-admin:s3cret\n")
    assert run(connect, "add", "--allow-principal", "User:alice", "--topic", "t",
               "--zookeeper-digest-file", str(secret)).exit_code == 0
    refused = run(connect, "remove", "--topic", "t", "--force")
    assert refused.exit_code == 1
    assert refused.output.startswith("Error: ZooKeeper refused the change (NoAuthError)")
    assert run(connect, "remove", "--topic", "t", "--force", "--zookeeper-digest-file", str(secret)).exit_code == 0
    assert listed(connect) == []
    bad = tmp_path / "bad"
    bad.write_text("no-colon\n")
    for path, message in ((bad, "must hold user:password on its first line"), (tmp_path / "absent", "No such file")):
        result = run(connect, "list", "--zookeeper-digest-file", str(path))
        assert result.exit_code == 1 and message in result.output


def test_bad_requests_are_one_line_and_non_zero(zookeeper):
    connect = _connect(zookeeper)
    for args, message in [
        (("add", "--topic", "t"), "You must specify one of: --allow-principal, --deny-principal"),
        (("add", "--allow-principal", "User:alice"), "You must provide at least one resource"),
        (("remove", "--force"), "You must provide at least one resource"),
        (("add", "--allow-principal", "User:alice", "--operation", "Frobnicate", "--topic", "t"),
         "unknown operation 'Frobnicate'"),
        (("add", "--allow-principal", "alice", "--topic", "t"), "use User:NAME"),
        (("add", "--allow-principal", "Group:ops", "--topic", "t"), "use User:NAME"),
        (("add", "--allow-principal", "User:alice", "--operation", "Write", "--group", "g"),
         "ResourceType GROUP only supports operations Read, Delete, Describe, All"),
        (("add", "--allow-principal", "User:alice", "--cluster", "--resource-pattern-type", "prefixed"),
         "--cluster is a literal resource"),
        (("add", "--allow-principal", "User:alice", "--topic", "t", "--resource-pattern-type", "match"),
         "Invalid value for '--resource-pattern-type'"),
        (("add", "--allow-principal", "User:alice", "--topic", "a/b"), "invalid resource name 'a/b'"),
        (("remove", "--group", "\udcff", "--force"), "invalid resource name '\\udcff'"),
        (("add", "--allow-principal", "User:alice", "--allow-host", "", "--topic", "t"), "a host cannot be empty"),
    ]:
        result = run(connect, *args)
        assert result.exit_code != 0, args
        assert message in result.output, (args, result.output)
        assert isinstance(result.exception, SystemExit), (args, result.exception)  # not a crash
    assert listed(connect) == []


def test_unreachable_zookeeper_is_one_line():
    result = run("127.0.0.1:1", "list")
    assert result.exit_code == 1
    assert result.output.strip() == "Error: cannot reach ZooKeeper at 127.0.0.1:1 within 5s"


def test_transactional_ids_as_kafka_acls_names_them(zookeeper):
    connect = _connect(zookeeper)
    added = run(connect, "add", "--allow-principal", "User:alice", "--operation", "Write",
                "--transactional-id", "orders-tx")
    assert added.exit_code == 0, added.output
    assert ("Current ACLs for resource `ResourcePattern(resourceType=TRANSACTIONAL_ID, name=orders-tx, "
            "patternType=LITERAL)`:\n\t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)\n") \
        in added.output
    assert run(connect, "add", "--allow-principal", "User:bob", "--operation", "Describe", "--operation", "Write",
               "--transactional-id", "etl-", "--resource-pattern-type", "prefixed").exit_code == 0
    assert [(r["resource_type"], r["name"], r["pattern_type"]) for r in listed(connect)] == [
        ("TRANSACTIONAL_ID", "orders-tx", "LITERAL"), ("TRANSACTIONAL_ID", "etl-", "PREFIXED")]
    (literal,) = listed(connect, "--transactional-id", "orders-tx")
    assert literal["acls"] == [{"principal": "User:alice", "host": "*", "operation": "WRITE", "permission": "ALLOW"}]
    matched = listed(connect, "--transactional-id", "etl-1", "--resource-pattern-type", "match")
    assert [(r["name"], r["pattern_type"]) for r in matched] == [("etl-", "PREFIXED")]
    assert listed(connect, "--topic", "orders-tx") == []  # another resource type
    client = KazooClient(hosts=connect)
    client.start(timeout=10)
    try:
        data, _ = client.get("/kafka-acl/TransactionalId/orders-tx")
        assert json.loads(data) == {"version": 1, "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"}]}
        assert client.exists("/kafka-acl-extended/prefixed/TransactionalId/etl-") is not None
    finally:
        client.stop()
        client.close()
    refused = run(connect, "add", "--allow-principal", "User:alice", "--operation", "Read",
                  "--transactional-id", "orders-tx")
    assert refused.exit_code != 0
    assert "ResourceType TRANSACTIONAL_ID only supports operations Write, Describe, All" in refused.output
    assert run(connect, "remove", "--transactional-id", "orders-tx", "--force").exit_code == 0
    assert run(connect, "remove", "--transactional-id", "etl-", "--resource-pattern-type", "prefixed",
               "--force").exit_code == 0
    assert listed(connect) == []
