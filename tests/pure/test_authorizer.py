"""Kafka's AclAuthorizer semantics over an immutable set of ACLs, and Kafka's znode format."""

from __future__ import annotations

import json

from coordinator.security.acls.authorizer import (CLUSTER_NAME, Acl, Authorizer, Operation, PatternType, Permission,
                                                  Resource, ResourceType, change_notification, decode_acls,
                                                  encode_acls, resource_path)

O, T = Operation, ResourceType
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"


def topic(name: str, pattern: PatternType = PatternType.LITERAL) -> Resource:
    return Resource(T.TOPIC, name, pattern)


def authorizer(acls: dict[Resource, set[Acl]], super_users=frozenset(), allow_everyone: bool = False) -> Authorizer:
    return Authorizer({r: frozenset(a) for r, a in acls.items()}, frozenset(super_users), allow_everyone)


def test_a_matching_deny_wins_over_every_allow():
    auth = authorizer({topic("orders"): {Acl(ALICE, "*", O.READ, ALLOW), Acl(ALICE, "10.0.0.9", O.READ, DENY)},
                       topic("*"): {Acl("User:*", "*", O.ALL, ALLOW)}})
    assert not auth.allows(ALICE, "10.0.0.9", O.READ, T.TOPIC, "orders")
    assert auth.allows(ALICE, "10.0.0.1", O.READ, T.TOPIC, "orders")  # the deny is for one host only
    assert auth.allows(BOB, "10.0.0.9", O.WRITE, T.TOPIC, "orders")  # ... and one principal


def test_wildcard_principal_and_host():
    auth = authorizer({topic("orders"): {Acl("User:*", "*", O.WRITE, ALLOW)},
                       topic("audit"): {Acl(ALICE, "10.0.0.1", O.WRITE, ALLOW)}})
    assert auth.allows(BOB, "192.168.1.1", O.WRITE, T.TOPIC, "orders")
    assert auth.allows(ALICE, "10.0.0.1", O.WRITE, T.TOPIC, "audit")
    assert not auth.allows(ALICE, "10.0.0.2", O.WRITE, T.TOPIC, "audit")
    assert not auth.allows(BOB, "10.0.0.1", O.WRITE, T.TOPIC, "audit")
    assert not auth.allows(ALICE, "10.0.0.1", O.READ, T.TOPIC, "audit")  # another operation


def test_the_literal_wildcard_resource_applies_to_every_name_of_its_type():
    auth = authorizer({Resource(T.GROUP, "*"): {Acl(ALICE, "*", O.READ, ALLOW)}})
    assert auth.allows(ALICE, "h", O.READ, T.GROUP, "any-group")
    assert auth.allows(ALICE, "h", O.READ, T.GROUP, "*")
    assert not auth.allows(BOB, "h", O.READ, T.GROUP, "any-group")  # ACLs apply: bob has none


def test_prefixed_resources_apply_to_names_they_start():
    auth = authorizer({topic("pay", PatternType.PREFIXED): {Acl(ALICE, "*", O.READ, ALLOW)},
                       topic("payments.secret", PatternType.PREFIXED): {Acl(ALICE, "*", O.READ, DENY)}})
    assert auth.allows(ALICE, "h", O.READ, T.TOPIC, "pay")
    assert auth.allows(ALICE, "h", O.READ, T.TOPIC, "payments")
    assert not auth.allows(ALICE, "h", O.READ, T.TOPIC, "payments.secret.keys")  # the longer prefix denies
    assert not auth.allows(ALICE, "h", O.READ, T.TOPIC, "pa")  # shorter than the prefix
    assert not auth.allows(ALICE, "h", O.READ, T.TOPIC, "xpay")  # does not start with it
    assert topic("pay", PatternType.PREFIXED).applies_to(T.TOPIC, "payments")
    assert not topic("pay", PatternType.PREFIXED).applies_to(T.GROUP, "payments")


def test_an_allow_implies_describe_but_a_deny_denies_only_what_it_names():
    auth = authorizer({topic("t"): {Acl(ALICE, "*", O.READ, ALLOW)},
                       topic("w"): {Acl(ALICE, "*", O.WRITE, ALLOW)},
                       topic("d"): {Acl(ALICE, "*", O.DESCRIBE, ALLOW)},
                       topic("c"): {Acl(ALICE, "*", O.ALTER_CONFIGS, ALLOW)},
                       topic("x"): {Acl(ALICE, "*", O.READ, ALLOW), Acl(ALICE, "*", O.DESCRIBE, DENY)},
                       topic("y"): {Acl(ALICE, "*", O.READ, ALLOW), Acl(ALICE, "*", O.READ, DENY)}})
    assert auth.allows(ALICE, "h", O.DESCRIBE, T.TOPIC, "t")
    assert auth.allows(ALICE, "h", O.DESCRIBE, T.TOPIC, "w")
    assert not auth.allows(ALICE, "h", O.READ, T.TOPIC, "d")  # Describe implies nothing
    assert auth.allows(ALICE, "h", O.DESCRIBE_CONFIGS, T.TOPIC, "c")
    assert not auth.allows(ALICE, "h", O.ALTER_CONFIGS, T.TOPIC, "t")
    assert auth.allows(ALICE, "h", O.READ, T.TOPIC, "x")  # Deny Describe leaves Read
    assert not auth.allows(ALICE, "h", O.DESCRIBE, T.TOPIC, "x")
    assert auth.allows(ALICE, "h", O.DESCRIBE, T.TOPIC, "y")  # implied by the Read allow; Deny Read denies Read only
    assert not auth.allows(ALICE, "h", O.READ, T.TOPIC, "y")


def test_all_allows_and_denies_every_operation():
    auth = authorizer({Resource(T.CLUSTER, CLUSTER_NAME): {Acl(ALICE, "*", O.ALL, ALLOW), Acl(BOB, "*", O.ALL, DENY),
                                                           Acl(BOB, "*", O.DESCRIBE, ALLOW)}})
    assert auth.allows(ALICE, "h", O.IDEMPOTENT_WRITE, T.CLUSTER, CLUSTER_NAME)
    assert not auth.allows(BOB, "h", O.DESCRIBE, T.CLUSTER, CLUSTER_NAME)


def test_super_users_may_do_anything_even_when_denied():
    auth = authorizer({topic("t"): {Acl("User:*", "*", O.ALL, DENY)}}, super_users={"User:admin"})
    assert auth.allows("User:admin", "h", O.DELETE, T.TOPIC, "t")
    assert auth.allows("User:admin", "h", O.READ, T.GROUP, "no-acls-here")
    assert not auth.allows(ALICE, "h", O.DELETE, T.TOPIC, "t")


def test_without_any_acl_on_a_resource_allow_everyone_decides():
    acls = {topic("guarded"): {Acl(ALICE, "*", O.READ, ALLOW)}}
    open_, closed = authorizer(acls, allow_everyone=True), authorizer(acls, allow_everyone=False)
    assert open_.allows(BOB, "h", O.WRITE, T.TOPIC, "free")
    assert not closed.allows(BOB, "h", O.WRITE, T.TOPIC, "free")
    assert not open_.allows(BOB, "h", O.READ, T.TOPIC, "guarded")  # ACLs apply, for someone else
    assert open_.allows(ALICE, "h", O.READ, T.TOPIC, "guarded")


def test_acls_of_another_resource_type_do_not_apply():
    auth = authorizer({Resource(T.GROUP, "orders"): {Acl(ALICE, "*", O.ALL, ALLOW)},
                       Resource(T.GROUP, "or", PatternType.PREFIXED): {Acl(ALICE, "*", O.ALL, ALLOW)},
                       Resource(T.GROUP, "*"): {Acl(ALICE, "*", O.ALL, ALLOW)}}, allow_everyone=False)
    assert not auth.allows(ALICE, "h", O.READ, T.TOPIC, "orders")
    assert authorizer({Resource(T.GROUP, "orders"): {Acl(ALICE, "*", O.READ, DENY)}},
                      allow_everyone=True).allows(ALICE, "h", O.READ, T.TOPIC, "orders")


def test_a_resource_known_only_as_unreadable_denies_all_but_super_users():
    auth = authorizer({topic("t"): set()}, super_users={"User:admin"}, allow_everyone=True)
    assert not auth.allows(ALICE, "h", O.READ, T.TOPIC, "t")
    assert auth.allows("User:admin", "h", O.READ, T.TOPIC, "t")


def test_decisions_are_cached_within_a_bound():
    auth = authorizer({topic("t"): {Acl(ALICE, "*", O.READ, ALLOW)}})
    for i in range(Authorizer.CACHED + 10):
        assert not auth.allows(ALICE, "h", O.READ, T.TOPIC, f"other-{i}")
    assert len(auth._decided) == Authorizer.CACHED  # the oldest made room
    assert auth.allows(ALICE, "h", O.READ, T.TOPIC, "t") and auth.allows(ALICE, "h", O.READ, T.TOPIC, "t")


# -- Kafka's format -------------------------------------------------------------------------

def test_encoding_is_kafkas_and_round_trips():
    acls = {Acl(ALICE, "*", O.READ, ALLOW), Acl("User:*", "10.0.0.1", O.DESCRIBE_CONFIGS, DENY),
            Acl(BOB, "*", O.IDEMPOTENT_WRITE, ALLOW)}
    data = encode_acls(acls)
    assert decode_acls(data) == acls
    record = json.loads(data)
    assert record["version"] == 1
    assert {"principal": ALICE, "permissionType": "Allow", "operation": "Read", "host": "*"} in record["acls"]
    assert {"principal": "User:*", "permissionType": "Deny", "operation": "DescribeConfigs",
            "host": "10.0.0.1"} in record["acls"]


def test_bad_data_is_skipped_never_raised_unless_strict():
    good = {"principal": ALICE, "permissionType": "Allow", "operation": "Write", "host": "*"}
    mixed = json.dumps({"version": 1, "acls": [
        good, {"principal": ALICE, "permissionType": "Allow", "operation": "CreateTokens", "host": "*"},
        {"principal": "no-colon", "permissionType": "Allow", "operation": "Read", "host": "*"},
        {"principal": ALICE, "permissionType": "Maybe", "operation": "Read", "host": "*"},
        {"principal": ALICE, "permissionType": "Allow", "operation": ["Read"], "host": "*"},
        {"principal": ALICE}, "a string", None, 7]}).encode()
    assert decode_acls(mixed) == {Acl(ALICE, "*", O.WRITE, ALLOW)}
    for data in (b"", b"not json", b"\xff\xfe", b"[1,2]", b'"x"', b"null", b'{"version":2,"acls":[]}',
                 b'{"version":1}', b'{"version":1,"acls":{}}', b"[" * 100_000):
        assert decode_acls(data) == set(), data[:20]
    for data in (mixed, b"not json", b'{"version":2,"acls":[]}'):
        try:
            decode_acls(data, strict=True)
        except ValueError:
            continue
        raise AssertionError(f"strict decode accepted {data[:40]!r}")
    assert decode_acls(encode_acls({Acl(ALICE, "*", O.WRITE, ALLOW)}), strict=True) == {Acl(ALICE, "*", O.WRITE, ALLOW)}


def test_paths_and_change_notifications_are_kafkas():
    assert resource_path(Resource(T.TOPIC, "orders")) == "/kafka-acl/Topic/orders"
    assert resource_path(Resource(T.CLUSTER, CLUSTER_NAME)) == "/kafka-acl/Cluster/kafka-cluster"
    assert resource_path(Resource(T.GROUP, "app-", PatternType.PREFIXED)) == "/kafka-acl-extended/prefixed/Group/app-"
    assert change_notification(Resource(T.GROUP, "g")) == ("/kafka-acl-changes/acl_changes_", b"GROUP:g")
    path, data = change_notification(Resource(T.GROUP, "app-", PatternType.PREFIXED))
    assert path == "/kafka-acl-extended-changes/acl_changes_"
    assert json.loads(data) == {"version": 1, "resourceType": "GROUP", "name": "app-", "patternType": "PREFIXED"}


def test_printed_as_kafka_acls_prints_them():
    assert str(Resource(T.GROUP, "g")) == "ResourcePattern(resourceType=GROUP, name=g, patternType=LITERAL)"
    assert str(Acl(ALICE, "*", O.DESCRIBE_CONFIGS, ALLOW)) == \
        "(principal=User:alice, host=*, operation=DESCRIBE_CONFIGS, permissionType=ALLOW)"


def test_transactional_ids_literal_prefixed_and_wildcard():
    tx = T.TRANSACTIONAL_ID
    auth = authorizer({Resource(tx, "orders-tx"): {Acl(ALICE, "*", O.WRITE, ALLOW)},
                       Resource(tx, "etl-", PatternType.PREFIXED): {Acl(BOB, "*", O.WRITE, ALLOW)},
                       Resource(tx, "etl-secret", PatternType.PREFIXED): {Acl(BOB, "*", O.WRITE, DENY)},
                       Resource(tx, "*"): {Acl("User:carol", "*", O.DESCRIBE, ALLOW)},
                       topic("orders-tx"): {Acl(BOB, "*", O.WRITE, ALLOW)}})
    assert auth.allows(ALICE, "h", O.WRITE, tx, "orders-tx")
    assert auth.allows(ALICE, "h", O.DESCRIBE, tx, "orders-tx")  # Write implies Describe
    assert not auth.allows(ALICE, "h", O.WRITE, tx, "orders-tx2")  # literal: that name only
    assert auth.allows(BOB, "h", O.WRITE, tx, "etl-1")
    assert auth.allows(BOB, "h", O.DESCRIBE, tx, "etl-1")
    assert not auth.allows(BOB, "h", O.WRITE, tx, "etl-secret-1")  # the longer prefix denies
    assert not auth.allows(BOB, "h", O.WRITE, tx, "orders-tx")  # a topic's ACLs are not a transactional id's
    assert auth.allows("User:carol", "h", O.DESCRIBE, tx, "anything")  # the wildcard
    assert not auth.allows("User:carol", "h", O.WRITE, tx, "anything")  # Describe implies nothing
    assert not auth.allows(ALICE, "h", O.WRITE, T.TOPIC, "orders-tx")


def test_transactional_id_paths_and_names_are_kafkas():
    tx = T.TRANSACTIONAL_ID
    assert tx.value == "TransactionalId"
    assert resource_path(Resource(tx, "app-tx")) == "/kafka-acl/TransactionalId/app-tx"
    assert resource_path(Resource(tx, "app-", PatternType.PREFIXED)) == \
        "/kafka-acl-extended/prefixed/TransactionalId/app-"
    assert change_notification(Resource(tx, "app-tx")) == ("/kafka-acl-changes/acl_changes_",
                                                           b"TRANSACTIONAL_ID:app-tx")
    _, data = change_notification(Resource(tx, "app-", PatternType.PREFIXED))
    assert json.loads(data)["resourceType"] == "TRANSACTIONAL_ID"
    assert str(Resource(tx, "app-tx")) == \
        "ResourcePattern(resourceType=TRANSACTIONAL_ID, name=app-tx, patternType=LITERAL)"
