"""The CLIs' one table printer: left-aligned columns as wide as their widest cell, one space
apart, as kafka-consumer-groups.sh prints its tables.

Not `tabulate`: its plain format puts two spaces between columns and right-aligns numbers,
unlike Kafka's tool whose columns operators' scripts already read, and these few lines are
all the CLIs need; a dependency for them would buy nothing.
"""

from __future__ import annotations

from collections.abc import Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    """`headers` over `rows`; a cell that is None or empty shows as "-"."""
    cells = [list(headers)] + [["-" if v is None or v == "" else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(" ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)
