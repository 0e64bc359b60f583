"""The report: one static HTML page with PNG charts beside it, for a person to open in a
browser. Charts are drawn from small aggregates (per hour, the top groups): only those
reach the driver, never a whole table."""

from __future__ import annotations

import html
from datetime import datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files, no screen
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

TOP_GROUPS = 20
LABELS = {"events": "events read", "rebalances": "rebalances completed", "groups": "groups",
          "members": "client id and host pairs", "commit_rate": "group, topic and minute rows of commits",
          "offsets_latest": "partitions with a committed offset"}


def write(out: Path, durations: list[dict], top_groups: list[dict], expirations: list[dict],
          totals: dict[str, int]) -> Path:
    """Draw the three charts into `out` and write `out/report.html` naming them."""
    out.mkdir(parents=True, exist_ok=True)
    charts = [
        ("rebalance-durations.png", "Rebalance durations per hour", _durations(durations)),
        ("rebalances-per-group.png", f"Rebalances per group (top {TOP_GROUPS})", _per_group(top_groups)),
        ("expirations.png", "Session expirations per hour", _expirations(expirations)),
    ]
    for name, _, figure in charts:
        figure.savefig(out / name, dpi=100)
        plt.close(figure)
    rows = "".join(f"<tr><th>{html.escape(LABELS.get(k, k))}</th><td>{v:,}</td></tr>" for k, v in totals.items())
    sections = "".join(f'<section><h2>{html.escape(title)}</h2><img src="{name}" alt="{html.escape(title)}">'
                       "</section>" for name, title, _ in charts)
    page = out / "report.html"
    page.write_text(f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>groupkeeper: rebalance report</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1100px}} img{{max-width:100%}}
table{{border-collapse:collapse}} th,td{{padding:.2em .8em;text-align:left;border-bottom:1px solid #ddd}}</style>
</head><body><h1>Rebalance report</h1>
<p>Generated {datetime.now().astimezone():%Y-%m-%d %H:%M %Z} from the event logs; tables in Parquet beside this page.</p>
<table>{rows}</table>{sections}</body></html>
""")
    return page


def _durations(rows: list[dict]):
    figure, axes = plt.subplots(figsize=(11, 4))
    if rows:
        hours = [r["hour"] for r in rows]
        axes.plot(hours, [r["p50_s"] for r in rows], "o-", label="median")
        axes.plot(hours, [r["p99_s"] for r in rows], "s-", label="p99")
        axes.plot(hours, [r["max_s"] for r in rows], "^:", label="max")
        axes.legend()
    _finish(figure, axes, "seconds", bool(rows))
    return figure


def _per_group(rows: list[dict]):
    figure, axes = plt.subplots(figsize=(11, 5))
    if rows:
        axes.barh([r["group"] for r in reversed(rows)], [r["rebalances"] for r in reversed(rows)])
    _finish(figure, axes, "rebalances", bool(rows), over_time=False)
    return figure


def _expirations(rows: list[dict]):
    figure, axes = plt.subplots(figsize=(11, 4))
    if rows:
        axes.bar([r["hour"] for r in rows], [r["expirations"] for r in rows], width=1 / 24 * 0.8)
    _finish(figure, axes, "expirations", bool(rows))
    return figure


def _finish(figure, axes, label: str, any_data: bool, over_time: bool = True) -> None:
    if not any_data:
        axes.text(0.5, 0.5, "no events of this kind", ha="center", va="center", transform=axes.transAxes)
    if over_time:
        axes.set_ylabel(label)
        figure.autofmt_xdate()
    else:
        axes.set_xlabel(label)
    figure.tight_layout()
