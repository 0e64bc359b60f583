"""What a storage failure tells a Kafka client."""

from __future__ import annotations

from protocol import ErrorCode

from .fence import NotOwner, StoreError, StoreUnavailable
from .partition import CommitTooLarge


def store_error_code(exc: Exception) -> ErrorCode:
    """NotOwner: find the new coordinator. Unavailable: retry here. Too large: give up."""
    if isinstance(exc, NotOwner):
        return ErrorCode.NOT_COORDINATOR
    if isinstance(exc, StoreUnavailable):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if isinstance(exc, CommitTooLarge):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    if isinstance(exc, StoreError):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    raise TypeError(f"not a store error: {exc!r}")
