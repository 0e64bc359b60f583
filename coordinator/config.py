"""Configuration: a TOML file whose keys are the `run` flags (`flag_name`); flags win.

An unknown key, or a value of the wrong type, names itself at start-up.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


class ConfigError(Exception):
    pass


# key -> (type, default)
KEYS: dict[str, tuple[type, Any]] = {
    "listeners": (list, ["PLAINTEXT://127.0.0.1:9094"]),  # NAME://HOST:PORT, Kafka's listeners
    "advertised_listeners": (list, []),  # what clients are told, by listener name; default: listeners
    "listener_security_protocol_map": (dict, {}),  # [listener_security_protocol_map] NAME = "SASL_SSL"
    "ssl_certfile": (str, ""),  # PEM chain and key of the SSL and SASL_SSL listeners
    "ssl_keyfile": (str, ""),
    "ssl_cafile": (str, ""),  # PEM: the CA of client certificates
    "ssl_client_auth": (str, "none"),  # none, requested, required: Kafka's ssl.client.auth
    "sasl_enabled_mechanisms": (list, ["SCRAM-SHA-256", "SCRAM-SHA-512"]),  # and PLAIN
    "sasl_plain_without_tls": (bool, False),  # offer PLAIN on SASL_PLAINTEXT listeners too
    "connection_failed_authentication_delay_ms": (int, 100),
    "acls": (bool, False),  # authorize every request with Kafka's ACLs in ZooKeeper
    "super_users": (list, []),  # principals the ACLs never refuse, e.g. "User:admin"
    "allow_everyone_if_no_acl_found": (bool, False),
    "metrics_listen": (str, "127.0.0.1:9095"),
    "metrics_group_series": (int, 100),  # groups with their own groupkeeper_group_members series
    "metrics_lag_partition_series": (int, 0),  # the largest partition lags with their own series; 0: none
    "lag_refresh_interval_ms": (int, 30_000),  # log ends older than this are asked of the leaders
    "lag_list_offsets_per_second": (int, 10),  # ListOffsets requests for lag, at most, a second
    "metrics_tls_cert": (str, ""),  # PEM; with metrics_tls_key, /metrics is served over HTTPS
    "metrics_tls_key": (str, ""),
    "metrics_users": (dict, {}),  # [metrics_users] name = "<hash from groupkeeper hash-password>": basic auth
    "zookeeper": (str, ""),
    "brokers": (str, ""),  # HOST:PORT,...: learn topics from the brokers' Metadata; "": Kafka's ZooKeeper layout
    "metadata_max_age_ms": (int, 5000),  # with brokers: how often topics and leaders are asked for again
    "metadata_cache_bytes": (int, 32 * 1024 * 1024),  # encoded Metadata answers kept; 0: none
    "serving_wait": (str, "epoll"),  # trio, epoll: how the serving loop waits for its sockets (docs/architecture.md)
    "gateway": (str, ""),  # HOST:PORT,...: the cluster this instance fronts (implies brokers); "": coordinator only
    "gateway_node_port_offset": (int, 1),  # node N on listener i of n: first listener's port + offset + N*n + i
    "gateway_max_node_id": (int, 1000),  # a broker node with a higher id gets no port (one log line)
    "gateway_max_connections_per_broker": (int, 10_000),  # the gateway's connections to one broker, at most
    # groupkeeper's own connections to the brokers (the gateway's links, the brokers topic source)
    "gateway_security_protocol": (str, "PLAINTEXT"),  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    "gateway_ssl_cafile": (str, ""),  # PEM: the CA that signs the brokers' certificates; "": the system's
    "gateway_ssl_certfile": (str, ""),  # PEM: a client certificate for brokers that ask for one (mutual TLS)
    "gateway_ssl_keyfile": (str, ""),
    "gateway_ssl_check_hostname": (bool, True),  # the broker's certificate names the host connected to
    "gateway_sasl_mechanism": (str, "SCRAM-SHA-512"),  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    "gateway_sasl_username": (str, ""),
    "gateway_sasl_password_file": (str, ""),  # the password on its first line: never in the configuration
    "embedded_broker": (str, ""),  # HOST:PORT: run Tansu there (in memory, for development) and front it
    "embedded_zookeeper_port": (int, 2181),
    "zk_session_timeout": (float, 10.0),
    "zookeeper_digest_file": (str, ""),  # "user:password": authenticate, and protect /groupkeeper
    "data_dir": (str, "var/groupkeeper"),
    "instance_id": (int, 0),
    "log_format": (str, "auto"),
    "group_min_session_timeout_ms": (int, 6000),
    "group_max_session_timeout_ms": (int, 1_800_000),
    "group_initial_rebalance_delay_ms": (int, 3000),
    "group_max_size": (int, 0),
    # consumer-protocol (KIP-848) groups: the coordinator sets their members' timing; Kafka's defaults
    "group_consumer_session_timeout_ms": (int, 45_000),
    "group_consumer_heartbeat_interval_ms": (int, 5_000),
    "group_consumer_max_size": (int, 0),  # members; 0: no limit
    "group_consumer_assignors": (list, ["uniform", "range"]),  # server-side assignors; the first is the default
    "group_consumer_migration_policy": (str, "bidirectional"),  # disabled, upgrade, downgrade, bidirectional
    "group_consumer_store_linger_ms": (int, 100),  # a group's changes of this long share one ZooKeeper write
    "group_id_max_length": (int, 1024),  # characters; longer group ids: INVALID_GROUP_ID
    "group_max_record_bytes": (int, 8 * 1024 * 1024),  # a generation's stored members; more: GROUP_MAX_SIZE_REACHED
    "offset_commit_max_partitions": (int, 10_000),  # in one OffsetCommit; more: INVALID_COMMIT_OFFSET_SIZE
    "group_max_offset_metadata_bytes": (int, 1024 * 1024),  # a group's offset metadata in all
    # Kafka's offsets.retention.minutes (fractions allowed) and offsets.retention.check.interval.ms
    "offsets_retention_minutes": (float, 10080.0),  # 7 days, from when the group became empty
    "offsets_retention_check_interval_ms": (int, 600_000),
    # a transactional id's record of its latest state, kept this long unchanged (transactional.id.expiration.ms)
    "transactions_outcome_retention_ms": (int, 7 * 24 * 3600 * 1000),
    # how often pending transactions with no recorded end are looked for in the brokers' markers
    "transactions_check_interval_ms": (int, 5_000),
    "embedded_zookeeper_heap_mb": (int, 512),  # -Xmx of the embedded ZooKeeper
    # ZooKeeper heap all groups may hold (store/budget.py); 0: derived from embedded_zookeeper_heap_mb
    "zookeeper_data_budget_bytes": (int, 0),
    "zookeeper_data_budget_per_client_bytes": (int, 0),  # of it, one principal's or address's; 0: half
    "strict_assignment": (bool, False),
    "shutdown_grace": (float, 5.0),
    "max_request_bytes": (int, 100 * 1024 * 1024),
    "max_connections": (int, 10_000),
    "max_connections_per_ip": (int, 1_000),
    "connections_max_idle_ms": (int, 600_000),
    "request_read_timeout_ms": (int, 30_000),
    "max_queued_reply_bytes": (int, 16 * 1024 * 1024),
    "events": (bool, True),  # the event log under data_dir/events (docs/events.md)
    "events_max_bytes": (int, 64 * 1024 * 1024),
    "events_max_age": (float, 3600.0),
    "events_compress": (bool, True),
    "events_queue_limit": (int, 100_000),
    "assignors": (dict, {}),  # [assignors] name = "module:Class"
}


# the tables: what their values are
DICT_VALUES = {"assignors": "\"module:Class\" strings", "metrics_users": "password hashes (strings)",
               "listener_security_protocol_map": "security protocols (strings)"}

# key -> (least, most) for the keys whose values outside a range would break the coordinator
RANGES: dict[str, tuple[int, int]] = {
    "group_max_record_bytes": (64 * 1024, 64 * 1024 * 1024),
    "offset_commit_max_partitions": (1, 1_000_000),
    "group_max_offset_metadata_bytes": (4096, 64 * 1024 * 1024),
    "embedded_zookeeper_heap_mb": (64, 65536),
    "zookeeper_data_budget_bytes": (0, 1 << 50),
    "zookeeper_data_budget_per_client_bytes": (0, 1 << 50),
    "metadata_max_age_ms": (100, 3_600_000),
    "metadata_cache_bytes": (0, 1024 * 1024 * 1024),
    "metrics_lag_partition_series": (0, 100_000),
    "lag_refresh_interval_ms": (1_000, 86_400_000),
    "lag_list_offsets_per_second": (1, 10_000),
    "gateway_node_port_offset": (1, 65535),
    "gateway_max_node_id": (0, 65535),
    "gateway_max_connections_per_broker": (1, 1_000_000),
    "connection_failed_authentication_delay_ms": (0, 60_000),
    "group_consumer_session_timeout_ms": (1_000, 1_800_000),
    "group_consumer_heartbeat_interval_ms": (100, 600_000),
    "group_consumer_max_size": (0, 1_000_000),
    "group_consumer_store_linger_ms": (0, 1_000),
    "offsets_retention_minutes": (0.001, 2**31 - 1),  # Kafka's ceiling (an int of minutes); 60 ms for tests
    "offsets_retention_check_interval_ms": (100, 86_400_000),
    "transactions_outcome_retention_ms": (1_000, 2**31 - 1),  # Kafka's ceiling (an int)
    "transactions_check_interval_ms": (100, 3_600_000),
}


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 hosts in brackets) as (host, port); ValueError says what is wrong."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def parse_server_address(text: str) -> tuple[str, int]:
    """A server to connect to: HOST:PORT with a port that can be connected to."""
    host, port = parse_address(text)
    if not 0 < port < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host, port


def parse_addresses(text: str) -> list[tuple[str, int]]:
    """HOST:PORT,HOST:PORT,... of servers to connect to; ValueError names the first that is not one."""
    return [parse_server_address(item.strip()) for item in text.split(",")]


def load_config(path: str | None) -> dict[str, Any]:
    config = {key: default for key, (_, default) in KEYS.items()}
    if path is None:
        return config
    try:
        raw = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    for key, value in raw.items():
        if key not in KEYS:
            raise ConfigError(f"{path}: unknown key {key!r} (known: {', '.join(sorted(KEYS))})")
        config[key] = checked(key, value, f"{path}: key {key!r}")
    return config


def checked(key: str, value: Any, name: str) -> Any:
    """`value` for `key` as the configuration keeps it; ConfigError naming it (`name`: "file:
    key 'x'", or the flag) when it is of the wrong type or out of its range. The one check of
    every value, from the file or a flag."""
    kind = KEYS[key][0]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ConfigError(f"{name} must be a {_kind(kind)}, not {value!r}")
    if kind is dict and not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{name} maps names to {DICT_VALUES[key]}")
    if kind is list and not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{name} must be a list of strings, not {value!r}")
    if key in RANGES and not RANGES[key][0] <= value <= RANGES[key][1]:
        raise ConfigError(f"{name} must be between {RANGES[key][0]} and {RANGES[key][1]}, not {value!r}")
    return value


def flag_name(key: str) -> str:
    """The `run` flag of a key: --key-with-dashes."""
    return "--" + key.replace("_", "-")


def from_flag(key: str, text: str) -> Any:
    """A flag's text as `key`'s value: numbers and booleans as TOML writes them, lists as
    A,B,C, tables as NAME=VALUE,NAME=VALUE; ConfigError naming the flag when it does not read."""
    kind, name = KEYS[key][0], flag_name(key)
    if kind is str:
        value: Any = text
    elif kind is list:
        value = [item.strip() for item in text.split(",") if item.strip()]
    elif kind is dict:
        value = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            k, sep, v = item.partition("=")
            if not sep or not k.strip():
                raise ConfigError(f"{name}: {item!r} is not NAME=VALUE")
            value[k.strip()] = v.strip()
    elif kind is bool:
        if text.lower() not in ("true", "false"):
            raise ConfigError(f"{name} must be true or false, not {text!r}")
        value = text.lower() == "true"
    else:
        try:
            value = kind(text)
        except ValueError:
            raise ConfigError(f"{name} must be a {_kind(kind)}, not {text!r}") from None
    return checked(key, value, name)


def _kind(kind: type) -> str:
    return {dict: "table", list: "list of strings", int: "whole number", float: "number", bool: "boolean",
            str: "string"}.get(kind, kind.__name__)
