"""Our error-code table against kafka-python's `kafka.errors`, an independent table."""

from __future__ import annotations

import inspect

import kafka.errors
import pytest

from protocol import ErrorCode, error_name

# kafka-python error classes with an integer errno, several per code for some codes.
KAFKA_PYTHON = sorted(
    ((cls.errno, name, cls) for name, cls in vars(kafka.errors).items()
     if inspect.isclass(cls) and issubclass(cls, Exception)
     and isinstance(getattr(cls, "errno", None), int) and not isinstance(cls.errno, bool)),
    key=lambda row: (row[0], row[1]),
)
OURS = {int(code) for code in ErrorCode}

# Codes where kafka-python, not our table, differs from Kafka's own Errors.java:
DISAGREES_WITH_KAFKA = {
    # CORRUPT_MESSAGE: Kafka's CorruptRecordException extends RetriableException, so the
    # code is retriable (as in our table); kafka-python's CorruptRecordError says False.
    2,
}

SHARED = [(errno, name, cls) for errno, name, cls in KAFKA_PYTHON
          if errno in OURS and errno not in DISAGREES_WITH_KAFKA]


def test_the_tables_overlap_substantially():
    assert len({errno for errno, _, _ in SHARED}) >= 100


@pytest.mark.parametrize("errno,name,cls", SHARED, ids=[f"{e}-{n}" for e, n, _ in SHARED])
def test_retriable_matches_kafka_python(errno, name, cls):
    assert ErrorCode(errno).retriable is bool(cls.retriable), (
        f"{ErrorCode(errno).name} ({errno}): ours {ErrorCode(errno).retriable}, "
        f"kafka-python's {name} {cls.retriable}")


def test_corrupt_message_is_retriable_as_in_kafka():
    assert ErrorCode.CORRUPT_MESSAGE == 2
    assert ErrorCode.CORRUPT_MESSAGE.retriable is True


COORDINATOR_CODES = {
    14: "COORDINATOR_LOAD_IN_PROGRESS", 15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR",
    22: "ILLEGAL_GENERATION", 23: "INCONSISTENT_GROUP_PROTOCOL", 25: "UNKNOWN_MEMBER_ID",
    26: "INVALID_SESSION_TIMEOUT", 27: "REBALANCE_IN_PROGRESS", 35: "UNSUPPORTED_VERSION",
    68: "NON_EMPTY_GROUP", 69: "GROUP_ID_NOT_FOUND", 79: "MEMBER_ID_REQUIRED",
    81: "GROUP_MAX_SIZE_REACHED", 82: "FENCED_INSTANCE_ID",
}


@pytest.mark.parametrize("code,name", sorted(COORDINATOR_CODES.items()))
def test_names_of_the_codes_the_coordinator_uses(code, name):
    assert ErrorCode(code).name == name
    assert ErrorCode[name] == code
    assert error_name(code) == name


@pytest.mark.parametrize("code,retriable", [(14, True), (15, True), (16, True), (22, False),
                                            (25, False), (27, False), (79, False), (82, False)])
def test_retriable_flags_the_coordinator_relies_on(code, retriable):
    assert ErrorCode(code).retriable is retriable


def test_names_mostly_agree_with_kafka_python():
    """kafka-python spells a few names its own way; every other shared code agrees."""
    own_spelling = {-1, 0, 6, 10, 17, 39}
    differ = {errno for errno, _, cls in KAFKA_PYTHON if errno in OURS
              and getattr(cls, "message", None) != ErrorCode(errno).name}
    assert differ <= own_spelling, sorted(differ - own_spelling)


def test_unknown_codes_have_a_readable_name():
    assert error_name(999) == "UNKNOWN(999)"
    assert error_name(-2) == "UNKNOWN(-2)"
    assert error_name(0) == "NONE"
    assert error_name(-1) == "UNKNOWN_SERVER_ERROR"


def test_codes_are_ints_and_unique():
    assert ErrorCode.NOT_COORDINATOR == 16 and isinstance(ErrorCode.NOT_COORDINATOR, int)
    codes = [int(c) for c in ErrorCode]
    assert len(codes) == len(set(codes))
    assert codes == sorted(codes)
    assert set(codes) == set(range(-1, max(codes) + 1))
