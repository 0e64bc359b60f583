"""`groupkeeper groups ... --command-config FILE` (issue 29): the groups CLI over SASL_SSL and
mutual TLS with Kafka's client properties, every flag driven against a real broker.

The broker is Tansu behind a groupkeeper gateway whose listeners are PLAINTEXT, SASL_SSL and
SSL with client certificates required: the CLI bootstraps from a secured listener, and the
partition leaders it asks for log offsets are the gateway's node ports of that listener,
secured alike, relayed to Tansu. Records are produced over PLAINTEXT, 10 to each partition.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer as CKProducer

from tools import client_config
from tools.cli import main
from coordinator.store.zkserver import free_port
from tests.support.certs import Authority
from tests.support.coordinator_process import CoordinatorProcess, pin_node_ports
from tests.support.tansu import Tansu
from tests.zookeeper.test_groups_cli import NO_ACTION_WARNING, table

TOPIC, PARTITIONS, RECORDS = "orders", 3, 10
PASSWORD = "operator-secret"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
DRY_RUN = "Dry run: nothing was committed (give --execute to commit these offsets)."


class Secured:
    def __init__(self, tmp, zookeeper):
        self.tmp = tmp
        self.authority = Authority(tmp)
        cert, key = self.authority.issue("CN=groupkeeper", "server", server=True)
        self.client_cert, self.client_key = self.authority.issue("CN=operator,O=Example", "operator")
        self.tansu = Tansu(tmp)
        self.ports = {"SASL_SSL": free_port(), "SSL": free_port()}
        self.process = CoordinatorProcess(
            zookeeper, tmp, listeners=tuple(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items()),
            gateway=self.tansu.bootstrap, ssl_certfile=cert, ssl_keyfile=key, ssl_cafile=self.authority.cafile,
            ssl_client_auth="required", sasl_enabled_mechanisms=["SCRAM-SHA-512", "PLAIN"],
            connection_failed_authentication_delay_ms=20, metadata_max_age_ms=500)

    def start(self) -> None:
        self.tansu.start()
        self.tansu.create_topic(TOPIC, PARTITIONS)
        pin_node_ports(self.process, [self.tansu.node_id], 1 + len(self.ports))
        secret = self.tmp / "operator.password"
        secret.write_text(PASSWORD + "\n")
        self.process.cli("users", "add", "operator", "--mechanism", "SCRAM-SHA-512", "--password-file", str(secret))
        self.process.start()
        self.process.wait_for_log("broker node reachable", node=self.tansu.node_id)
        producer = CKProducer({"bootstrap.servers": self.process.bootstrap})
        failed = []
        for i in range(RECORDS):
            for p in range(PARTITIONS):
                producer.produce(TOPIC, b"%d" % i, partition=p, on_delivery=lambda err, msg: err and failed.append(err))
            assert producer.flush(30) == 0 and not failed, failed  # a batch a record: offsets 0-9 in each

    def config(self, name: str, text: str) -> str:
        path = self.tmp / f"{name}.properties"
        path.write_text(text)
        return str(path)

    def stop(self) -> None:
        try:
            assert self.process.stop() == 0
        finally:
            self.tansu.stop()


@pytest.fixture(scope="module")
def secured(zookeeper, tmp_path_factory):
    setup = Secured(tmp_path_factory.mktemp("groups-cli-secured"), zookeeper)
    try:
        setup.start()
        yield setup
    finally:
        setup.stop()


@pytest.fixture(scope="module")
def sasl_ssl(secured) -> str:
    """Kafka's properties for SASL_SSL with SCRAM-SHA-512, the JAAS entry over two lines as
    operators write it, the CA as a PEM truststore file."""
    return secured.config("sasl-ssl", f"""# kafka-consumer-groups.sh --command-config
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config={SCRAM} required \\
    username="operator" password="{PASSWORD}";
ssl.truststore.type=PEM
ssl.truststore.location={secured.authority.cafile}
client.id=ops
""")


def cli(secured: Secured, config: str, *args: str, listener: str = "SASL_SSL", bootstrap: str | None = None):
    return CliRunner().invoke(main, ["groups", *args, "--command-config", config, "--bootstrap-server",
                                     bootstrap or f"127.0.0.1:{secured.ports[listener]}"])


def ok(secured: Secured, config: str, *args: str, **kwargs) -> str:
    result = cli(secured, config, *args, **kwargs)
    assert result.exit_code == 0, result.output
    return result.stdout


def new_offsets(text: str) -> dict[tuple[str, int], int]:
    return {(r[0], int(r[2])): int(r[3]) for r in table(text)[1:]}


def test_every_flag_over_sasl_ssl(secured, sasl_ssl):
    run = lambda *args: cli(secured, sasl_ssl, *args)  # noqa: E731
    good = lambda *args: ok(secured, sasl_ssl, *args)  # noqa: E731
    ignored = "WARN: --command-config {}: not used by groupkeeper's CLI, ignored: client.id".format(sasl_ssl)

    # --execute: committed; the table says what; the ignored property is said once
    result = run("reset-offsets", "ops-a", "--topic", TOPIC, "--to-earliest", "--execute")
    assert result.exit_code == 0 and result.stderr.splitlines() == [ignored], result.output
    assert new_offsets(result.stdout) == {("ops-a", p): 0 for p in range(PARTITIONS)}

    # --offsets (the default) and --verbose: log ends and lag from the leader, through the listener's node port
    described = table(good("describe", "ops-a", "--offsets", "--verbose"))
    assert described[0][3] == "LEADER-EPOCH"
    assert [(r[2], r[4], r[5], r[6]) for r in described[1:]] == [(str(p), "0", "10", "10") for p in range(PARTITIONS)]
    assert [(r["log_end_offset"], r["lag"]) for r in json.loads(good("describe", "ops-a", "--json"))["offsets"]] \
        == [(10, 10)] * PARTITIONS

    # every reset target, as dry runs (--dry-run, or neither with Kafka's warning)
    def dry(*args: str) -> dict[int, int]:
        result = run("reset-offsets", "ops-a", *args)
        assert result.exit_code == 0, result.output
        assert result.stderr.splitlines()[-1] == DRY_RUN
        return {p: o for (_, p), o in new_offsets(result.stdout).items()}
    assert dry("--topic", TOPIC, "--to-latest", "--dry-run") == {0: 10, 1: 10, 2: 10}
    assert dry("--topic", f"{TOPIC}:1", "--to-offset", "99", "--dry-run") == {1: 10}  # within the log
    assert dry("--topic", TOPIC, "--shift-by", "4", "--dry-run") == {0: 4, 1: 4, 2: 4}
    assert dry("--all-topics", "--to-current", "--dry-run") == {0: 0, 1: 0, 2: 0}
    assert dry("--topic", TOPIC, "--to-datetime", "2000-01-01T00:00:00Z", "--dry-run") == {0: 0, 1: 0, 2: 0}
    assert dry("--topic", TOPIC, "--to-datetime", "2999-01-01T00:00:00Z", "--dry-run") == {0: 10, 1: 10, 2: 10}
    assert dry("--topic", TOPIC, "--by-duration", "PT1H", "--dry-run") == {0: 0, 1: 0, 2: 0}  # produced just now
    assert dry("--topic", TOPIC, "--by-duration", "-PT1H") == {0: 10, 1: 10, 2: 10}  # an hour ahead: the log end
    assert run("reset-offsets", "ops-a", "--topic", TOPIC, "--to-latest").stderr.splitlines()[1] == NO_ACTION_WARNING
    assert [r["current_offset"] for r in json.loads(good("describe", "ops-a", "--json"))["offsets"]] == [0, 0, 0]

    # --export and --from-file, round trip, for one group and for several
    exported = good("reset-offsets", "ops-a", "--topic", TOPIC, "--shift-by", "3", "--export", "--dry-run")
    assert exported == "".join(f"{TOPIC},{p},3\n" for p in range(PARTITIONS))
    plan = secured.tmp / "plan.csv"
    plan.write_text(exported)
    good("reset-offsets", "ops-a", "--from-file", str(plan), "--execute")
    assert [r["current_offset"] for r in json.loads(good("describe", "ops-a", "--json"))["offsets"]] == [3, 3, 3]
    exported = good("reset-offsets", "--group", "ops-a", "--group", "ops-b", "--topic", f"{TOPIC}:0", "--to-latest",
                    "--export", "--dry-run")
    assert exported == f"ops-a,{TOPIC},0,10\nops-b,{TOPIC},0,10\n"
    plan.write_text(exported)
    good("reset-offsets", "--group", "ops-a", "--group", "ops-b", "--from-file", str(plan), "--execute")
    assert [r["current_offset"] for r in json.loads(good("describe", "ops-b", "--json"))["offsets"]] == [10]

    # several groups, --all-groups, the other views, list
    assert [d["group"] for d in json.loads(good("describe", "--all-groups", "--json"))] == ["ops-a", "ops-b"]
    state = table(good("describe", "--group", "ops-a", "--group", "ops-b", "--state"))
    assert [r[0] for r in state if r and r[0].startswith("ops-")] == ["ops-a", "ops-b"]
    assert table(good("describe", "ops-b", "--members")) == [  # an empty group: the header alone, as Kafka's
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]]
    assert table(good("list", "--state", "--type")) == [["GROUP", "TYPE", "STATE"], ["ops-a", "Classic", "Empty"],
                                                        ["ops-b", "Classic", "Empty"]]
    # a bootstrap list whose first server is down
    closed = f"127.0.0.1:{free_port()}"
    assert ok(secured, sasl_ssl, "list", bootstrap=f"{closed},127.0.0.1:{secured.ports['SASL_SSL']}") \
        == "ops-a\nops-b\n"

    # without --bootstrap-server: --config's listener of the security.protocol
    config = secured.tmp / "groupkeeper.toml"
    config.write_text(f'listeners = ["PLAINTEXT://127.0.0.1:1", "SASL_SSL://127.0.0.1:{secured.ports["SASL_SSL"]}"]\n')
    defaulted = CliRunner().invoke(main, ["groups", "list", "--command-config", sasl_ssl, "--config", str(config)])
    assert defaulted.exit_code == 0 and defaulted.stdout == "ops-a\nops-b\n", defaulted.output

    assert good("delete", "--group", "ops-b") == "Deletion of requested consumer groups ('ops-b') was successful.\n"
    assert good("delete", "--all-groups") == "Deletion of requested consumer groups ('ops-a') was successful.\n"
    assert good("list") == ""


@pytest.mark.parametrize("names", ["kafka", "librdkafka"])
def test_mutual_tls_with_kafkas_pem_names_and_librdkafkas(secured, names):
    """The SSL listener requires a client certificate: Kafka's PEM properties carry it as
    text, librdkafka's as files."""
    if names == "kafka":
        def pem(path: str) -> str:  # a property's value over several lines, as Kafka's docs write PEM
            return " \\\n".join(open(path).read().strip().splitlines())
        config = secured.config("mtls-kafka", f"""security.protocol=SSL
ssl.truststore.type=PEM
ssl.truststore.certificates={pem(secured.authority.cafile)}
ssl.keystore.type=PEM
ssl.keystore.certificate.chain={pem(secured.client_cert)}
ssl.keystore.key={pem(secured.client_key)}
""")
    else:
        config = secured.config("mtls-librdkafka", f"""security.protocol=ssl
ssl.ca.location={secured.authority.cafile}
ssl.certificate.location={secured.client_cert}
ssl.key.location={secured.client_key}
""")
    ok(secured, config, "reset-offsets", f"mtls-{names}", "--topic", f"{TOPIC}:2", "--to-latest", "--execute",
       listener="SSL")
    rows = table(ok(secured, config, "describe", f"mtls-{names}", listener="SSL"))
    assert [(r[2], r[3], r[4], r[5]) for r in rows[1:]] == [("2", "10", "10", "0")]
    assert ok(secured, config, "delete", f"mtls-{names}", listener="SSL").startswith("Deletion of")


def test_plain_with_librdkafkas_username_and_password(secured):
    config = secured.config("plain", f"""security.protocol=SASL_SSL
sasl.mechanisms=PLAIN
sasl.username=operator
sasl.password={PASSWORD}
ssl.ca.location={secured.authority.cafile}
""")
    assert ok(secured, config, "list", "--state") .splitlines()[0].split() == ["GROUP", "STATE"]


def test_what_cannot_connect_is_one_line(secured, sasl_ssl, tmp_path):
    sasl_port, ssl_port = secured.ports["SASL_SSL"], secured.ports["SSL"]
    wrong = secured.config("wrong", open(sasl_ssl).read().replace(PASSWORD, "not-it").replace("client.id=ops\n", ""))
    result = cli(secured, wrong, "list")
    assert result.exit_code == 1 and result.stdout == "" and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"Error: SASL login to 127.0.0.1:{sasl_port} failed: SCRAM-SHA-512 as "
                                    "'operator' refused (SASL_AUTHENTICATION_FAILED)")
    # a CA that did not sign the server's certificate
    other = Authority(tmp_path, "CN=another CA")
    strange = secured.config("strange", f"security.protocol=SSL\nssl.ca.location={other.cafile}\n"
                                        f"ssl.certificate.location={secured.client_cert}\n"
                                        f"ssl.key.location={secured.client_key}\n")
    result = cli(secured, strange, "list", listener="SSL")
    assert result.exit_code == 1 and result.stdout == "" and len(result.stderr.splitlines()) == 1, result.output
    assert result.stderr.startswith(f"Error: TLS with 127.0.0.1:{ssl_port} failed: certificate verify failed: ")
    # no client certificate where one is required: the server says so when the handshake ends
    anonymous = secured.config("anonymous", f"security.protocol=SSL\nssl.ca.location={secured.authority.cafile}\n")
    result = cli(secured, anonymous, "list", listener="SSL")
    assert result.exit_code == 1 and result.stdout == "" and len(result.stderr.splitlines()) == 1, result.output
    assert result.stderr == f"Error: lost the connection to 127.0.0.1:{ssl_port}: tlsv13 alert certificate required\n"


@pytest.mark.parametrize("text, message", [
    ("security.protocol=SASL_SSL\n", "give sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512); Kafka's default, "
                                     "GSSAPI, is not supported"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n", "sasl.mechanism must be one of PLAIN, SCRAM-SHA-256, "
                                                           "SCRAM-SHA-512, not 'GSSAPI'"),
    ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n", "security.protocol SASL_PLAINTEXT needs "
                                                                "sasl.jaas.config, or sasl.username and sasl.password"),
    (f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config={PLAIN} required "
     'username="a" password="b";\n', "sasl.jaas.config: PlainLoginModule does not log in with SCRAM-SHA-256"),
    ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=Krb5LoginModule required;\n",
     "sasl.jaas.config: login module Krb5LoginModule is not supported"),
    ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=username=a\n",
     "sasl.jaas.config is not `LoginModule required key=\"value\" ...;` (one login module)"),
    ("security.protocol=TLS\n", "security.protocol must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, "
                                "not 'TLS'"),
    ("security.protocol=SSL\nssl.truststore.location=/etc/truststore.jks\n",
     "ssl.truststore.type JKS (the default) is a Java keystore: give ssl.truststore.type=PEM with a PEM file"),
    ("security.protocol=SSL\nssl.keystore.type=PKCS12\n", "ssl.keystore.type PKCS12 is a Java keystore"),
    ("security.protocol=SSL\nssl.truststore.password=changeit\n", "ssl.truststore.password is not supported"),
    ("security.protocol=SSL\nssl.ca.location=/nowhere.pem\n", "ssl.ca.location: /nowhere.pem: no such file"),
    ("security.protocol=SSL\nssl.ca.pem=not a certificate\n", "cannot use CA file"),
    ("security.protocol=SSL\nssl.key.pem=x\n", "a client certificate needs both its certificate chain and its key"),
    ("security.protocol=SSL\nssl.endpoint.identification.algorithm=ldap\n",
     "ssl.endpoint.identification.algorithm must be https or empty, not 'ldap'"),
])
def test_a_command_config_that_cannot_be_used_is_one_line(tmp_path, text, message):
    """Refused before anything is asked of a server (the one named here is closed)."""
    path = tmp_path / "client.properties"
    path.write_text(text)
    result = CliRunner().invoke(main, ["groups", "list", "--command-config", str(path),
                                       "--bootstrap-server", f"127.0.0.1:{free_port()}"])
    assert result.exit_code == 1 and result.stdout == "", result.output
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(
        f"Error: --command-config {path}: {message}"), result.output
    missing = CliRunner().invoke(main, ["groups", "list", "--command-config", str(tmp_path / "none")])
    assert missing.exit_code == 1 and missing.stderr == f"Error: --command-config {tmp_path / 'none'}: " \
                                                        "No such file or directory\n"


def test_java_properties_and_jaas_entries_are_read_as_java_reads_them():
    props = client_config.parse_properties(
        "# a comment\n! another\n  key.one = spaced value  \nkey.two:colon\nkey.three plain\n"
        "multi=first \\\n    second \\\\\nescaped\\ key=\\u0041\\tb\\=c\nempty=\ncontinued=a\\\n")
    assert props == {"key.one": "spaced value  ", "key.two": "colon", "key.three": "plain",
                     "multi": "first second \\", "escaped key": "A\tb=c", "empty": "", "continued": "a"}
    assert client_config.parse_jaas(f'{SCRAM} required username="alice"\n password="p\\"w;d=1";') == (
        SCRAM, {"username": "alice", "password": 'p"w;d=1'})
    assert client_config.parse_jaas(f"{PLAIN} required username=bob password=secret;") == (
        PLAIN, {"username": "bob", "password": "secret"})
    # a setting for another protocol is said, not silently dropped
    warned = client_config.configure({"security.protocol": "PLAINTEXT", "sasl.mechanism": "PLAIN"})
    assert warned.warnings == ["security.protocol is PLAINTEXT: sasl.mechanism not used"]
    assert warned.security.protocol == "PLAINTEXT" and not warned.security.secured
