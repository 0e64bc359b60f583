"""`--command-config FILE`: how the `groups` commands connect, from a Java properties file
with Kafka's client property names, as kafka-consumer-groups.sh reads it (and, for what
Java's keystores cannot carry, the PEM names librdkafka gives the same settings).

What is read (anything else under `ssl.` or `sasl.` is refused, so that a setting never
silently goes unused; other Kafka client settings are ignored, with a warning):

| property | meaning |
| --- | --- |
| `security.protocol` | PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL |
| `sasl.mechanism` (librdkafka: `sasl.mechanisms`) | PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (not GSSAPI, Kafka's default: give it) |
| `sasl.jaas.config` | `...plain.PlainLoginModule required username="..." password="...";` or `...scram.ScramLoginModule ...` |
| `sasl.username`, `sasl.password` | librdkafka's instead of `sasl.jaas.config` |
| `ssl.truststore.type=PEM` with `ssl.truststore.location` (a PEM file) or `ssl.truststore.certificates` (PEM text) | the CAs trusted; Kafka's JKS and PKCS12 stores are Java's and refused |
| `ssl.ca.location` (a PEM file), `ssl.ca.pem` (PEM text) | librdkafka's names for the same |
| `ssl.keystore.type=PEM` with `ssl.keystore.location` (one PEM file: key and chain) or `ssl.keystore.certificate.chain` and `ssl.keystore.key` (PEM text) | the client certificate (mutual TLS) |
| `ssl.certificate.location`, `ssl.key.location` (files), `ssl.certificate.pem`, `ssl.key.pem` (text) | librdkafka's names for the same |
| `ssl.key.password` | the password of an encrypted key |
| `ssl.endpoint.identification.algorithm` | `https` (default): the server's certificate must name the host connected to; empty (or librdkafka's `none`): it need not |
| `ssl.protocol`, `ssl.enabled.protocols` | accepted and not needed: TLS 1.2 and later is always spoken |

Without a trusted CA given, the system's CAs are trusted. The connection itself is the
runtime's: `coordinator.security.tls.client_context` makes the TLS context and
`coordinator.security.upstream.UpstreamSecurity` the SASL login, as for the gateway's own
connections to the brokers.

Java's properties format is read here (`parse_properties`, a few lines) rather than with a
package for it: backslash continuations and escapes are all there is to it, and the CLI
does not grow a dependency for one file.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from dataclasses import dataclass, field

from coordinator.security.tls import TLSError, client_context
from coordinator.security.upstream import MECHANISMS, PROTOCOLS, UpstreamSecurity


class ConfigProblem(ValueError):
    """A command config that cannot be used, phrased as one line for the operator."""


# Kafka's login modules, by the mechanisms they serve
_MODULES = {"org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
            "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512")}
_READ = {
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config", "sasl.username", "sasl.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates", "ssl.ca.location", "ssl.ca.pem",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.certificate.location", "ssl.key.location", "ssl.certificate.pem", "ssl.key.pem", "ssl.key.password",
    "ssl.endpoint.identification.algorithm", "ssl.protocol", "ssl.enabled.protocols",
}


@dataclass
class CommandConfig:
    """The connections' security, and warnings for the operator (one line each)."""
    security: UpstreamSecurity
    warnings: list[str] = field(default_factory=list)


def plaintext() -> CommandConfig:
    return CommandConfig(UpstreamSecurity("PLAINTEXT"))


def load(path: str) -> CommandConfig:
    """The security `path` describes; ConfigProblem saying what is wrong."""
    try:
        with open(path, encoding="latin-1") as file:  # Java reads .properties as ISO 8859-1, with \\u escapes
            text = file.read()
    except OSError as exc:
        raise ConfigProblem(f"{path}: {exc.strerror or exc}") from None
    try:
        return configure(parse_properties(text))
    except ConfigProblem as exc:
        raise ConfigProblem(f"{path}: {exc}") from None


def configure(props: dict[str, str]) -> CommandConfig:
    warnings = []
    ignored = sorted(k for k in props if k not in _READ and not k.startswith(("ssl.", "sasl.")))
    if ignored:
        warnings.append(f"not used by groupkeeper's CLI, ignored: {', '.join(ignored)}")
    unsupported = sorted(k for k in props if k not in _READ and k.startswith(("ssl.", "sasl.")))
    if unsupported:
        raise ConfigProblem(f"{unsupported[0]} is not supported (the ssl.* and sasl.* properties read are "
                            "listed in docs/operations.md)")
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise ConfigProblem(f"security.protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
    uses_tls, uses_sasl = protocol.endswith("SSL"), protocol.startswith("SASL_")
    unused = sorted(k for k in props if (k.startswith("ssl.") and not uses_tls) or (k.startswith("sasl.") and not uses_sasl))
    if unused:
        warnings.append(f"security.protocol is {protocol}: {', '.join(unused)} not used")
    tls = _tls(props) if uses_tls else None
    if not uses_sasl:
        return CommandConfig(UpstreamSecurity(protocol, tls), warnings)
    mechanism, user, password = _sasl(props)
    return CommandConfig(UpstreamSecurity(protocol, tls, mechanism, user, password), warnings)


def _sasl(props: dict[str, str]) -> tuple[str, str, str]:
    mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "").strip().upper()
    if not mechanism:
        raise ConfigProblem(f"give sasl.mechanism ({', '.join(MECHANISMS)}); Kafka's default, GSSAPI, is not supported")
    if mechanism not in MECHANISMS:
        raise ConfigProblem(f"sasl.mechanism must be one of {', '.join(MECHANISMS)}, not {mechanism!r}")
    if "sasl.jaas.config" in props:
        if "sasl.username" in props or "sasl.password" in props:
            raise ConfigProblem("give sasl.jaas.config or sasl.username and sasl.password, not both")
        module, options = parse_jaas(props["sasl.jaas.config"])
        if module not in _MODULES:
            raise ConfigProblem(f"sasl.jaas.config: login module {module} is not supported "
                                f"(supported: {', '.join(_MODULES)})")
        if mechanism not in _MODULES[module]:
            raise ConfigProblem(f"sasl.jaas.config: {module.rsplit('.', 1)[1]} does not log in with {mechanism}")
        user, password = options.get("username", ""), options.get("password", "")
        where = "sasl.jaas.config's username and password"
    else:
        user, password = props.get("sasl.username", ""), props.get("sasl.password", "")
        where = "sasl.jaas.config, or sasl.username and sasl.password"
    if not user or not password:
        raise ConfigProblem(f"security.protocol {props.get('security.protocol', '').strip().upper()} needs {where}")
    if "\0" in user:
        raise ConfigProblem("the SASL username may not hold a NUL character")
    return mechanism, user, password


def _tls(props: dict[str, str]) -> ssl.SSLContext:
    """The client TLS context: the runtime's `client_context` for the trusted CAs and the
    host name check; the client certificate loaded here, where a key's password can be given.
    Certificates and keys given as text are written to a private temporary directory for
    OpenSSL, which reads them from files only, and removed once loaded."""
    for kind in ("truststore", "keystore"):
        # a store given as text can only be PEM; a file is Java's JKS unless the type says PEM
        store_type = props.get(f"ssl.{kind}.type", "").strip().upper()
        if (store_type or props.get(f"ssl.{kind}.location", "").strip()) and store_type != "PEM":
            raise ConfigProblem(f"ssl.{kind}.type {store_type or 'JKS (the default)'} is a Java keystore: give "
                                f"ssl.{kind}.type=PEM with a PEM file")
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", "", "none"):
        raise ConfigProblem(f"ssl.endpoint.identification.algorithm must be https or empty, not {algorithm!r}")
    with tempfile.TemporaryDirectory(prefix="groupkeeper-tls-") as private:  # mode 0700
        def file_of(location_keys: tuple[str, ...], text_keys: tuple[str, ...], what: str) -> str:
            locations = [k for k in location_keys if props.get(k, "").strip()]
            texts = [k for k in text_keys if props.get(k, "").strip()]
            if len(locations) + len(texts) > 1:
                raise ConfigProblem(f"{' and '.join(locations + texts)} both give the {what}: give one")
            if locations:
                path = props[locations[0]].strip()
                if not os.path.isfile(path):
                    raise ConfigProblem(f"{locations[0]}: {path}: no such file")
                return path
            if texts:
                path = os.path.join(private, texts[0])
                with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
                    out.write(_pem(props[texts[0]]))
                return path
            return ""

        cafile = file_of(("ssl.truststore.location", "ssl.ca.location"), ("ssl.truststore.certificates", "ssl.ca.pem"),
                         "trusted CAs")
        chain = file_of(("ssl.keystore.location", "ssl.certificate.location"),
                        ("ssl.keystore.certificate.chain", "ssl.certificate.pem"), "client certificate")
        key = file_of(("ssl.key.location",), ("ssl.keystore.key", "ssl.key.pem"), "client key")
        combined = bool(props.get("ssl.keystore.location", "").strip())  # Kafka's PEM keystore file: key and chain
        if key and not chain or chain and not key and not combined:
            raise ConfigProblem("a client certificate needs both its certificate chain and its key")
        try:
            context = client_context(cafile, check_hostname=algorithm == "https")
        except TLSError as exc:
            raise ConfigProblem(str(exc)) from None
        if chain:
            try:
                context.load_cert_chain(chain, key or None, props.get("ssl.key.password") or None)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigProblem(f"cannot use the client certificate and key: {getattr(exc, 'reason', None) or exc}"
                                    ) from None
    return context


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)


def _pem(text: str) -> str:
    """PEM as a property holds it, often on one line (a value continued over several lines
    with backslashes loses its line ends, as Kafka's docs write it): each block re-wrapped
    as OpenSSL reads PEM, in 64-character lines. Kafka's own PEM reader ignores the blanks
    in the same way."""
    blocks = []
    for kind, body in _PEM_BLOCK.findall(text):
        data = "".join(body.split())
        blocks.append(f"-----BEGIN {kind}-----\n"
                      + "".join(data[i:i + 64] + "\n" for i in range(0, len(data), 64))
                      + f"-----END {kind}-----\n")
    return "".join(blocks) or text


# -- Java's formats ---------------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.S)


def parse_properties(text: str) -> dict[str, str]:
    """java.util.Properties.load: `key=value`, `key: value` or `key value`; # and ! comments;
    a line ending in an odd number of backslashes goes on in the next (its leading blanks
    dropped); \\t \\n \\r \\f \\uXXXX escapes, and a backslash before any other character
    stands for that character. A later key wins."""
    props: dict[str, str] = {}
    logical = ""
    for natural in text.splitlines():
        line = natural.lstrip(" \t\f")
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            logical += line[:-1]
            continue
        logical += line
        key, value = _split(logical)
        props[_unescape(key)] = _unescape(value)
        logical = ""
    if logical:
        key, value = _split(logical)
        props[_unescape(key)] = _unescape(value)
    return props


def _split(line: str) -> tuple[str, str]:
    """The key ends at the first unescaped =, : or blank; blanks, one = or :, and blanks follow."""
    i = 0
    while i < len(line) and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(text: str) -> str:
    def one(match: re.Match) -> str:
        c = match.group(1)
        return chr(int(c[1:], 16)) if len(c) == 5 else _ESCAPES.get(c, c)
    return _ESCAPE.sub(one, text)


_JAAS = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)\b(?P<options>.*?);\s*\Z", re.S)
_OPTION = re.compile(r'\s*(?P<key>[\w.-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s";=]+))', re.S)


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """A JAAS entry as Kafka's `sasl.jaas.config` holds it, one login module:
    `Module required key="value" other=value;` -> (Module, options)."""
    entry = _JAAS.match(text)
    if entry is None:
        raise ConfigProblem("sasl.jaas.config is not `LoginModule required key=\"value\" ...;` (one login module)")
    options, rest = {}, entry.group("options")
    while rest.strip():
        option = _OPTION.match(rest)
        if option is None:
            raise ConfigProblem(f"sasl.jaas.config: cannot read the options from {rest.strip()[:40]!r}")
        value = option.group("quoted")
        options[option.group("key")] = (re.sub(r"\\(.)", r"\1", value, flags=re.S) if value is not None
                                        else option.group("bare"))
        rest = rest[option.end():]
    return entry.group("module"), options
