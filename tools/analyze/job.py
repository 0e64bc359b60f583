"""The analysis job: event logs in, Parquet tables and the report out.

`groupkeeper analyze --events DIR [DIR...] --out DIR [--master URL]` runs it in-process;
on a cluster, `spark-submit tools/analyze/job.py --events DIR... --out DIR` does the
same with the master spark-submit was given.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

if __package__ in (None, ""):  # spark-submit runs this file as a script (PEP 366)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "tools.analyze"
    __import__(__package__)

from . import report, tables  # noqa: E402
from .read import read_events  # noqa: E402

TABLES = ("rebalances", "groups", "members", "commit_rate", "offsets_latest")


def session(master: str | None, app: str = "groupkeeper-analyze") -> SparkSession:
    builder = (SparkSession.builder.appName(app)
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.showConsoleProgress", "false"))
    if master:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def build(events: DataFrame, settings: tables.Settings = tables.Settings()) -> dict[str, DataFrame]:
    """Every output table from the events, as DataFrames (nothing computed yet)."""
    return {"rebalances": tables.rebalances(events), "groups": tables.groups(events, settings),
            "members": tables.members(events), "commit_rate": tables.commit_rate(events),
            "offsets_latest": tables.offsets_latest(events)}


def run(spark: SparkSession, directories: list[str], out: str,
        settings: tables.Settings = tables.Settings()) -> dict[str, int]:
    """Write the tables under `out` as Parquet and `out/report.html`; rows per table."""
    events = read_events(spark, directories).persist()
    try:
        built = build(events, settings)
        for name in TABLES:
            built[name].write.mode("overwrite").parquet(f"{out}/{name}")
        written = {name: spark.read.parquet(f"{out}/{name}") for name in TABLES}
        counts = {name: table.count() for name, table in written.items()}
        counts["events"] = events.count()
        report.write(Path(out), **_report_inputs(events, written, settings), totals=counts)
        return counts
    finally:
        events.unpersist()


def _report_inputs(events: DataFrame, written: dict[str, DataFrame], settings: tables.Settings) -> dict:
    """The report's small aggregates, the only rows that reach the driver."""
    durations = tables.durations_per_hour(written["rebalances"], settings).orderBy("hour")
    top = (written["groups"].orderBy(F.desc("rebalances"), "group").limit(report.TOP_GROUPS)
           .select("group", "rebalances"))
    expirations = tables.expirations_per_hour(events).orderBy("hour")
    return {"durations": [r.asDict() for r in durations.collect()],
            "top_groups": [r.asDict() for r in top.collect()],
            "expirations": [r.asDict() for r in expirations.collect()]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="job.py", description=__doc__.splitlines()[0])
    parser.add_argument("--events", nargs="+", required=True, metavar="DIR")
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--master", help="default: what spark-submit was given")
    args = parser.parse_args(argv)
    spark = session(args.master)
    try:
        counts = run(spark, args.events, args.out)
    finally:
        spark.stop()
    print(" ".join(f"{name}={count}" for name, count in counts.items()))


if __name__ == "__main__":
    main()
