"""Kafka's ACLs, all of them here: `authorizer.py` (resources, operations, AclAuthorizer's
rules, and Kafka's ZooKeeper layout of ACLs) and `store.py` (`AclStore`, the coordinator's
view kept up to date by watches; `AclAdmin`, the changes `groupkeeper acls` makes).

May import: `coordinator.store`, `coordinator.logs`.
"""
