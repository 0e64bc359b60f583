"""The fleet analysis: a PySpark job over the event logs of many coordinators (docs/events.md)
writing Parquet tables and an HTML report (docs/analysis.md).

`read.py` turns event files into one typed DataFrame; `tables.py` holds the transforms, each
a pure DataFrame -> DataFrame function; `report.py` draws the charts from small aggregates;
`job.py` runs it all (`groupkeeper analyze`, or `spark-submit tools/analyze/job.py`).
PySpark is the `analytics` extra: nothing else in the coordinator imports this package.
"""
