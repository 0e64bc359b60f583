"""What can go wrong storing, and what each failure tells a Kafka client: the store's
boundary. Every storage failure is one of these exceptions, raised by the store's modules;
the layers above map them with `error_code` and never look inside the store for them."""

from __future__ import annotations

from protocol import ErrorCode


class NotOwner(Exception):
    """This instance does not, or no longer, own the group-partition: NOT_COORDINATOR."""


class StoreUnavailable(Exception):
    """ZooKeeper did not confirm the write (connection lost, suspended, timed out): the
    outcome is unknown, so nothing is acknowledged and the client retries."""


class StoreError(Exception):
    """A write that ZooKeeper refused for a reason other than fencing."""


class RolledBack(StoreError):
    """A multi() carrying the writes of several group-partitions failed for another one's
    part: nothing of this part landed, and it is written again."""


class CommitTooLarge(StoreError):
    """A commit that would take its group's offset metadata over its bound: INVALID_COMMIT_OFFSET_SIZE."""


class OverBudget(CommitTooLarge):
    """A commit whose every partition would take ZooKeeper's data past the data budget (this
    instance's share, or its client's): INVALID_COMMIT_OFFSET_SIZE, nothing written."""


class RecordOverBudget(StoreError):
    """A group record that would take ZooKeeper's data past the data budget, not written:
    GROUP_MAX_SIZE_REACHED, as for a group past group_max_record_bytes."""


FAILURES = (NotOwner, StoreUnavailable, StoreError)  # what a store's operation may raise


def error_code(exc: Exception) -> ErrorCode:
    """NotOwner: find the new coordinator. Unavailable: retry here. Too large: give up."""
    if isinstance(exc, NotOwner):
        return ErrorCode.NOT_COORDINATOR
    if isinstance(exc, StoreUnavailable):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if isinstance(exc, CommitTooLarge):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    if isinstance(exc, RecordOverBudget):
        return ErrorCode.GROUP_MAX_SIZE_REACHED
    if isinstance(exc, StoreError):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    raise TypeError(f"not a store error: {exc!r}")
