"""Event files in, one typed DataFrame out: `*.jsonl` and `*.jsonl.gz` under the given
directories (Spark picks the codec by the suffix), read with an explicit schema so that no
pass over the data is spent inferring one. A line that is not a JSON object (the unfinished
last line a crash can leave) or has another schema version is left out."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (ArrayType, DoubleType, IntegerType, LongType, StringType, StructField,
                               StructType)

SCHEMA_VERSION = 1
CORRUPT = "_corrupt_record"

OFFSET = StructType([StructField("topic", StringType()), StructField("partition", IntegerType()),
                     StructField("offset", LongType())])

SCHEMA = StructType([
    StructField("v", IntegerType()),
    StructField("ts", StringType()),
    StructField("instance", IntegerType()),
    StructField("type", StringType()),
    StructField("group", StringType()),
    StructField("generation", IntegerType()),
    StructField("member", StringType()),
    StructField("instance_id", StringType()),
    StructField("client_id", StringType()),
    StructField("host", StringType()),
    StructField("reason", StringType()),
    StructField("members_before", IntegerType()),
    StructField("members_after", IntegerType()),
    StructField("duration_s", DoubleType()),
    StructField("partitions_moved", IntegerType()),
    StructField("strategy", StringType()),
    StructField("offsets", ArrayType(OFFSET)),
    StructField("partition", IntegerType()),
    StructField("epoch", IntegerType()),
    StructField(CORRUPT, StringType()),
])


def read_events(spark: SparkSession, directories: list[str]) -> DataFrame:
    raw = (spark.read.schema(SCHEMA)
           .option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
           .option("recursiveFileLookup", "true").option("pathGlobFilter", "*.jsonl*")
           .json(directories))
    return events(raw)


def events(raw: DataFrame) -> DataFrame:
    """Typed events: `ts` as a UTC timestamp, unreadable lines and other versions left out."""
    return (raw.where(F.col(CORRUPT).isNull() & (F.col("v") == SCHEMA_VERSION))
            .drop(CORRUPT)
            .withColumn("ts", F.to_timestamp("ts", "yyyy-MM-dd'T'HH:mm:ss.SSSX")))
