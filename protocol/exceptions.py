"""The protocol's own exceptions: everything that goes wrong with bytes raises one of these."""


class ProtocolError(Exception):
    """Bytes that are not a valid Kafka message, or a message that cannot be encoded."""


class FrameError(ProtocolError):
    """A size prefix that is negative or over the configured limit."""


class DecodeError(ProtocolError):
    """A frame whose contents do not decode as the message it claims to be."""


class EncodeError(ProtocolError):
    """A message whose values do not fit the schema of the version asked for."""


class UnsupportedVersion(ProtocolError):
    """A request for an API or version that is not declared here.

    Carries the fixed part of the header (api key, version, correlation id), which every
    request version shares, so the peer can still be answered (ApiVersions) or the
    connection closed with a precise reason.
    """

    def __init__(self, message: str, header):
        super().__init__(message)
        self.header = header
