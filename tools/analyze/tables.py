"""The analysis tables, each a pure function of the events DataFrame (read.events) and
settings; none collects anything to the driver. docs/analysis.md describes every column."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F


@dataclass(frozen=True)
class Settings:
    storm_rebalances: int = 5  # this many rebalances of one group ...
    storm_window_s: int = 600  # ... completed within this many seconds: a storm
    percentile_accuracy: int = 10_000  # percentile_approx's; its error is 1/accuracy of the rank


def rebalances(events: DataFrame) -> DataFrame:
    """One row per completed rebalance. Its start is its end less its duration (a restarted
    rebalance counts from its last start, as the coordinator measures it)."""
    done = events.where(F.col("type") == "rebalance_completed")
    return done.select(
        "group", "instance", "generation",
        (F.col("ts").cast("double") - F.col("duration_s")).cast("timestamp").alias("start"),
        F.col("ts").alias("end"),
        "duration_s", "reason", "members_before", "members_after", "partitions_moved", "strategy")


def groups(events: DataFrame, settings: Settings = Settings()) -> DataFrame:
    """Per group: how often it rebalances, how long rebalances take, storms, and the share of
    its observed time spent rebalancing. Observed time runs from the group's first event to
    its last, counted as at least one hour, so a group seen briefly is not rated per second."""
    table = rebalances(events)
    seconds = F.col("end").cast("double")
    within = (Window.partitionBy("group").orderBy(seconds)
              .rangeBetween(-settings.storm_window_s, 0))
    in_order = Window.partitionBy("group").orderBy(seconds)
    marked = (table.withColumn("recent", F.count("*").over(within))
              .withColumn("stormy", F.col("recent") >= settings.storm_rebalances)
              .withColumn("storm_starts", F.col("stormy") & ~F.coalesce(F.lag("stormy").over(in_order), F.lit(False))))
    stats = marked.groupBy("group").agg(
        F.count("*").alias("rebalances"),
        F.percentile_approx("duration_s", [0.5, 0.95, 0.99], settings.percentile_accuracy).alias("p"),
        F.sum("duration_s").alias("rebalancing_s"),
        F.sum(F.col("storm_starts").cast("int")).alias("storms"),
        F.sum(F.col("stormy").cast("int")).alias("storm_rebalances"))
    seen = (events.where(F.col("group").isNotNull()).groupBy("group")
            .agg(F.min("ts").alias("first_seen"), F.max("ts").alias("last_seen")))
    hours = F.greatest((F.col("last_seen").cast("double") - F.col("first_seen").cast("double")) / 3600, F.lit(1.0))
    return (seen.join(stats, "group", "left")
            .select("group", "first_seen", "last_seen",
                    F.coalesce("rebalances", F.lit(0)).alias("rebalances"),
                    (F.coalesce("rebalances", F.lit(0)) / hours).alias("rebalances_per_hour"),
                    F.col("p")[0].alias("duration_p50_s"), F.col("p")[1].alias("duration_p95_s"),
                    F.col("p")[2].alias("duration_p99_s"),
                    F.coalesce("storms", F.lit(0)).alias("storms"),
                    F.coalesce("storm_rebalances", F.lit(0)).alias("storm_rebalances"),
                    (F.coalesce("rebalancing_s", F.lit(0.0)) / (hours * 3600)).alias("rebalancing_share")))


def members(events: DataFrame) -> DataFrame:
    """Churn by client id and host: joins, clean leaves, session expiries and other removals
    (did not rejoin or sync in time), distinct member ids and groups."""
    kinds = events.where(F.col("type").isin("member_joined", "member_left", "member_expired"))

    def count_where(condition) -> F.Column:
        return F.sum(F.when(condition, 1).otherwise(0))
    return kinds.groupBy("client_id", "host").agg(
        count_where(F.col("type") == "member_joined").alias("joins"),
        count_where(F.col("type") == "member_left").alias("leaves"),
        count_where((F.col("type") == "member_expired") & (F.col("reason") == "session timeout"))
        .alias("session_expirations"),
        count_where((F.col("type") == "member_expired") & (F.col("reason") != "session timeout"))
        .alias("other_removals"),
        F.countDistinct("member").alias("members"),
        F.countDistinct("group").alias("groups"))


def _offsets(events: DataFrame) -> DataFrame:
    """One row per committed partition offset, with its commit's identity."""
    commits = events.where(F.col("type") == "offsets_committed")
    return commits.select("group", "ts", "instance", "member", "generation",
                          F.explode("offsets").alias("o")).select(
        "group", "ts", "instance", "member", "generation",
        F.col("o.topic").alias("topic"), F.col("o.partition").alias("partition"), F.col("o.offset").alias("offset"))


def commit_rate(events: DataFrame) -> DataFrame:
    """Per group, topic and minute: commits that named the topic, and partition offsets."""
    offsets = _offsets(events).withColumn("minute", F.date_trunc("minute", "ts"))
    commit = F.struct("ts", "instance", "member", "generation")  # one commit's identity
    return offsets.groupBy("group", "topic", "minute").agg(
        F.countDistinct(commit).alias("commits"), F.count("*").alias("partitions"))


def offsets_latest(events: DataFrame) -> DataFrame:
    """The latest committed offset per (group, topic, partition): the commit with the latest
    ts (for commits in the same millisecond, the higher offset)."""
    latest = _offsets(events).groupBy("group", "topic", "partition").agg(
        F.max(F.struct("ts", "offset")).alias("last"))
    return latest.select("group", "topic", "partition", F.col("last.offset").alias("offset"),
                         F.col("last.ts").alias("ts"))


def expirations_per_hour(events: DataFrame) -> DataFrame:
    """Session expirations per hour, for the report."""
    return (events.where((F.col("type") == "member_expired") & (F.col("reason") == "session timeout"))
            .groupBy(F.date_trunc("hour", "ts").alias("hour")).agg(F.count("*").alias("expirations")))


def durations_per_hour(rebalance_table: DataFrame, settings: Settings = Settings()) -> DataFrame:
    """Rebalance durations per hour (median, p99, max, count), for the report."""
    return (rebalance_table.groupBy(F.date_trunc("hour", "end").alias("hour"))
            .agg(F.percentile_approx("duration_s", [0.5, 0.99], settings.percentile_accuracy).alias("p"),
                 F.max("duration_s").alias("max_s"), F.count("*").alias("rebalances"))
            .select("hour", F.col("p")[0].alias("p50_s"), F.col("p")[1].alias("p99_s"), "max_s", "rebalances"))
