"""Kafka clients' listeners as Kafka names them: `NAME://HOST:PORT`, each speaking one
security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).

A listener's name is its protocol unless `listener_security_protocol_map` says otherwise
(Kafka's `listener.security.protocol.map`), so that two listeners may share a protocol
(INTERNAL and EXTERNAL, say). Each instance registers the advertised address of every
listener; FindCoordinator and Metadata answer a client with the addresses of the listener
it came in on.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import parse_address

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_WILDCARDS = {"0.0.0.0", "::", ""}


@dataclass(frozen=True)
class Listener:
    name: str
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listener(text: str, protocols: dict[str, str]) -> Listener:
    """One `NAME://HOST:PORT`; ValueError says what is wrong."""
    name, sep, address = text.strip().partition("://")
    if not sep or not name:
        raise ValueError(f"{text!r} is not NAME://HOST:PORT")
    name = name.upper()
    protocol = protocols.get(name, name)
    if protocol not in PROTOCOLS:
        raise ValueError(f"{text!r}: listener {name} has no security protocol: name one of "
                         f"{', '.join(PROTOCOLS)}, or map it in listener_security_protocol_map")
    host, port = parse_address(address)
    if not 0 <= port < 65536:
        raise ValueError(f"{text!r}: port {port} out of range")
    return Listener(name, protocol, host, port)


def parse_listeners(listeners: list[str], advertised: list[str],
                    protocol_map: dict[str, str]) -> tuple[list[Listener], dict[str, Listener]]:
    """The listeners to bind and, by name, what each advertises (itself where not given).
    ValueError names the first problem: a duplicate name, an advertised listener nobody
    listens on, or an advertised wildcard address that no client could connect to."""
    protocols = {name.upper(): protocol.upper() for name, protocol in protocol_map.items()}
    for name, protocol in protocols.items():
        if protocol not in PROTOCOLS:
            raise ValueError(f"listener_security_protocol_map: {name} = {protocol!r} is not one of "
                             f"{', '.join(PROTOCOLS)}")
    if not listeners:
        raise ValueError("listeners is empty: name at least one NAME://HOST:PORT")
    bound = [parse_listener(text, protocols) for text in listeners]
    names = [listener.name for listener in bound]
    if len(set(names)) < len(names):
        raise ValueError(f"listeners: each name once ({', '.join(names)})")
    by_name = {listener.name: listener for listener in bound}
    told: dict[str, Listener] = {}
    for text in advertised:
        listener = parse_listener(text, protocols)
        if listener.name not in by_name:
            raise ValueError(f"advertised_listeners: {listener.name} is not among listeners")
        if listener.name in told:
            raise ValueError(f"advertised_listeners: {listener.name} twice")
        if listener.host in _WILDCARDS:
            raise ValueError(f"advertised_listeners: {text!r}: clients cannot connect to a wildcard address")
        told[listener.name] = listener
    return bound, told
