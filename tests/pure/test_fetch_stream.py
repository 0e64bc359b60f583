"""`protocol.fetch_stream.FetchWalk`: a Fetch answer walked as it streams past, in every
version, cut into parts at every kind of place, against answers kafka-python encodes; and
`rewrite.node_endpoints_in_place`, which fixes a streamed answer's tagged fields without
changing its size."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.gateway.rewrite import node_endpoints_in_place, rewrite_frame
from protocol import DecodeError
from protocol.fetch_stream import FetchWalk, read_whole
from protocol.schemas import FETCH
from tests.pure.test_gateway_rewrite import (ENDPOINTS, EXPOSED, FETCH_ANSWER, at_gateway, kip951_leaders, kp_frame,
                                        kp_read, node, partition_tags, project, versions)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
ALL = versions(FETCH)
KIP951 = versions(FETCH, 16)


def answer(version: int, **changes) -> tuple[dict, bytes]:
    vals = project(FETCH.response.struct, version, {**FETCH_ANSWER, **changes})
    return vals, kp_frame(FETCH.response, vals, version, 4242,
                          tweak=kip951_leaders(FETCH) if version >= 12 else None)


def walk(version: int, data: bytes, cuts: list[int], fix=None) -> tuple[bytes, list, int]:
    """`data` fed to a walk in the parts `cuts` makes: (what went out, partitions seen, how
    many bytes went out before the held tail)."""
    seen = []
    w = FetchWalk(version, len(data) - 4, on_partition=lambda *p: seen.append(p), fix=fix)
    out = bytearray()
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(data))), len(data)]
    for a, b in zip(bounds, bounds[1:]):
        part = memoryview(data)[a:b]
        go = w.feed(part)
        assert w.done == (b == len(data))
        out += part[:go]
        if go < len(part):
            assert w.holding  # held bytes are the tagged fields' only
    passed = len(out)
    out += w.tail()
    return bytes(out), seen, passed


def expected_partitions(vals: dict, version: int) -> list:
    topic = vals["responses"][0]
    key = topic["topic_id"].bytes if version >= 13 else topic["topic"]
    return [(key, p["partition_index"], p["error_code"], p["high_watermark"]) for p in topic["partitions"]]


@pytest.mark.parametrize("version", ALL)
def test_every_version_walks_to_its_end_reading_each_partitions_high_watermark(version):
    vals, data = answer(version, node_endpoints=[])
    for cuts in ([], [1], [5, 9], list(range(len(data))), [len(data) - 1], [len(data) // 2]):
        out, seen, _ = walk(version, data, cuts)
        assert out == data  # nothing to fix: every byte as it came
        assert seen == expected_partitions(vals, version)
        assert seen[2][3] == 800


@pytest.mark.parametrize("version", ALL)
def test_the_records_are_skipped_not_held(version):
    """A long records field passes as it is fed: nothing held before the tagged fields."""
    big = b"\x00" * 200_000
    parts = FETCH_ANSWER["responses"][0]["partitions"]
    _, data2 = answer(version, node_endpoints=[], responses=[{**FETCH_ANSWER["responses"][0], "partitions": [
        *parts[:2], {**parts[2], "records": big}]}])
    w = FetchWalk(version, len(data2) - 4)
    half = len(data2) // 2
    assert w.feed(memoryview(data2)[:half]) == half
    assert w._buffer == bytearray()  # the records were skipped, not gathered
    went = w.feed(memoryview(data2)[half:])
    assert w.done and went + len(w.tail()) == len(data2) - half


@pytest.mark.parametrize("version", KIP951)
def test_node_endpoints_rewritten_in_place_when_they_fit(version):
    # the brokers' names are longer than the gateway's: the rewrite fits, padded
    vals, data = answer(version)
    out, _, passed = walk(version, data, [len(data) - 30, len(data) - 3],
                          fix=lambda tail: node_endpoints_in_place(tail, EXPOSED.get))
    assert len(out) == len(data) and out[:passed] == data[:passed] and passed > len(data) - 100
    correlation_id, got, back = kp_read(FETCH.response, out, version)
    _, _, original = kp_read(FETCH.response, data, version)
    assert correlation_id == 4242
    assert got == {**vals, "node_endpoints": [at_gateway(ENDPOINTS[0], 1)]}  # node 2 not exposed: dropped
    assert partition_tags(FETCH, back) == partition_tags(FETCH, original)
    # what a whole rewrite gives, but for the padding
    whole = rewrite_frame(FETCH.key, version, data[4:], EXPOSED.get)
    assert kp_read(FETCH.response, whole, version)[1] == got


@pytest.mark.parametrize("version", KIP951)
def test_node_endpoints_that_do_not_fit_are_left_out(version):
    short = [{"node_id": 1, **node(1), "host": "k1"}]
    vals, data = answer(version, node_endpoints=short)
    longer = {1: ("a-gateway-name-much-longer-than-k1.example", 19094)}.get
    out, seen, _ = walk(version, data, [17], fix=lambda tail: node_endpoints_in_place(tail, longer))
    assert len(out) == len(data)
    got = kp_read(FETCH.response, out, version)[1]
    assert got == {**vals, "node_endpoints": []}  # the client refreshes its metadata instead
    assert b"k1" not in out[-40:]


def test_in_place_keeps_other_tags_and_an_empty_list():
    section = b"\x02" + b"\x00\x01\x01" + b"\x05\x02ab"  # node_endpoints empty, then tag 5
    assert node_endpoints_in_place(section, EXPOSED.get) == section
    assert node_endpoints_in_place(b"\x00", EXPOSED.get) == b"\x00"
    with pytest.raises(DecodeError):
        node_endpoints_in_place(b"\x01\x00\x09ab", EXPOSED.get)  # a field beyond the end


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16, 18])
def test_an_answer_that_does_not_end_where_its_size_says_is_refused(version):
    _, data = answer(version, node_endpoints=[])
    with pytest.raises(DecodeError):  # a size that leaves bytes over
        w = FetchWalk(version, len(data) - 4 + 3)
        w.feed(data + b"\x00\x00\x00")
        w.tail() if version < 16 else node_endpoints_in_place(w.tail(), EXPOSED.get)
    with pytest.raises(DecodeError):  # a size that cuts the fields short
        FetchWalk(version, len(data) - 4 - 20).feed(data[:-20])
    with pytest.raises(DecodeError):  # more than its size
        FetchWalk(version, 10).feed(data)


@given(data=st.data())
@SETTINGS
def test_any_cutting_gives_the_same_bytes_and_partitions(data):
    version = data.draw(st.sampled_from(ALL))
    with_endpoints = version >= 16 and data.draw(st.booleans())
    vals, frame = answer(version, **({} if with_endpoints else {"node_endpoints": []}))
    cuts = data.draw(st.lists(st.integers(1, len(frame) - 1), max_size=12))
    fix = (lambda tail: node_endpoints_in_place(tail, EXPOSED.get)) if version >= 16 else None
    out, seen, _ = walk(version, frame, cuts, fix)
    reference, _, _ = walk(version, frame, [], fix)
    assert out == reference and len(out) == len(frame)
    assert seen == expected_partitions(vals, version)


def walk_around_records(version: int, data: bytes, fix=None) -> tuple[bytes, list]:
    """`data` walked as a splicing relay walks it: fed until the walk is skipping, those bytes
    passed around it (`skipped`), a few at a time, then fed again."""
    seen = []
    w = FetchWalk(version, len(data) - 4, on_partition=lambda *p: seen.append(p), fix=fix)
    out, pos = bytearray(), 0
    while pos < len(data):
        if w.skipping:
            n = min(w.skipping, 7)  # as the pipe takes them: in pieces
            w.skipped(n)
            out += data[pos:pos + n]
            pos += n
            continue
        part = memoryview(data)[pos:pos + 3]  # fed a little at a time: the skip found early
        out += part[:w.feed(part)]
        pos += len(part)
    assert w.done
    return bytes(out + w.tail()), seen


@pytest.mark.parametrize("version", ALL)
def test_records_passed_around_the_walk_give_what_feeding_them_gives(version):
    big = bytes(range(256)) * 300
    parts = FETCH_ANSWER["responses"][0]["partitions"]
    vals, data = answer(version, responses=[{**FETCH_ANSWER["responses"][0], "partitions": [
        {**parts[0], "records": big}, parts[1], {**parts[2], "records": big[:1000]}]}])
    fix = (lambda tail: node_endpoints_in_place(tail, EXPOSED.get)) if version >= 16 else None
    out, seen = walk_around_records(version, data, fix)
    reference, seen_fed, _ = walk(version, data, [], fix)
    assert out == reference and seen == seen_fed == expected_partitions(vals, version)


def test_skipped_is_only_for_what_the_walk_would_skip():
    _, data = answer(12, node_endpoints=[])
    w = FetchWalk(12, len(data) - 4)
    assert w.skipping == 8  # the size and correlation id are skipped unread
    with pytest.raises(ValueError):
        w.skipped(9)
    w.skipped(8)
    assert w.skipping == 0  # the response header's tagged fields are read
    with pytest.raises(ValueError):
        w.skipped(1)


def test_a_size_that_ends_inside_skipped_records_is_refused():
    big = b"\x01" * 5000
    parts = FETCH_ANSWER["responses"][0]["partitions"]
    _, data = answer(12, node_endpoints=[], responses=[{**FETCH_ANSWER["responses"][0], "partitions": [
        *parts[:2], {**parts[2], "records": big}]}])
    cut = data.index(big) + 100  # the answer says it ends there
    w = FetchWalk(12, cut - 4)
    w.feed(data[:data.index(big)])
    with pytest.raises(DecodeError):
        w.skipped(100)


@pytest.mark.parametrize("version", ALL)
def test_an_answer_read_whole_hands_the_partitions_the_walk_hands(version):
    vals, data = answer(version, node_endpoints=[])
    seen = []
    assert read_whole(version, data, lambda *p: seen.append(p))
    assert seen == walk(version, data, [])[1] == expected_partitions(vals, version)
    assert read_whole(version, data)  # with nothing to hand them to


@pytest.mark.parametrize("version", KIP951)
def test_an_answer_that_names_brokers_is_not_read_whole_but_walked(version):
    _, data = answer(version)  # node_endpoints: the relay rewrites them, walking the answer
    seen = []
    assert not read_whole(version, data, lambda *p: seen.append(p))
    assert seen == []


@pytest.mark.parametrize("version", [4, 12, 13, 18])
def test_an_answer_that_does_not_read_or_reads_past_its_schema_is_left_to_the_walk(version):
    _, data = answer(version, node_endpoints=[])
    seen = []
    for bad in (data[:-9], data + b"\x00\x01", data[:4] + b"\xff" * (len(data) - 4)):
        assert not read_whole(version, bad, lambda *p: seen.append(p))
    assert seen == []
