"""Which topics a consumer-protocol member's expression matches for its topic ACL check
(`api.groups.RegexMatches`), without I/O: as the group resolves it, and remembered only
while the topics stay the same."""

from __future__ import annotations

from coordinator.api.groups import RegexMatches
from coordinator.topics.view import TopicView


def test_matches_whole_names_leave_internal_topics_out_and_follow_the_topics():
    topics = TopicView()
    topics.partitions.update({"orders": 2, "orders-secret": 1, "reorders": 1, "__consumer_offsets": 50})
    matches = RegexMatches(topics)
    first = matches("orders.*")
    assert first == {"orders", "orders-secret"} and matches("orders.*") is first  # remembered
    assert matches(".*") == {"orders", "orders-secret", "reorders"}
    topics.partitions["orders-new"] = 1  # a topic made: matched afresh
    assert matches("orders.*") == {"orders", "orders-secret", "orders-new"}
    del topics.partitions["orders-secret"]
    topics.partitions["orders-other"] = 1  # as many topics as before, not the same ones
    assert matches("orders.*") == {"orders", "orders-new", "orders-other"}


def test_an_expression_re2_refuses_matches_nothing_and_says_so():
    topics = TopicView()
    topics.partitions["orders"] = 1
    assert RegexMatches(topics)("(") is None
