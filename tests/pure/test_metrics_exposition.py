"""The /metrics text made a step at a time (`metrics_http.exposition`): byte for byte what
prometheus-client's `generate_latest` makes of the same registry (ours, which lists its
collectors, or any other), and the serving loop's tasks run between its collectors, its
families and the steps of a collector that steps, rather than waiting for all of it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

import pytest

from coordinator.metrics import STEP, Registry, SteppedCollector
from coordinator.serving.metrics_http import exposition
from tests.support.turns import turns_during


class Lags:
    def collect(self):
        family = GaugeMetricFamily("t_lag", "lag", labels=["group"])
        for n in range(3):
            family.add_metric([f"g{n}"], n * 10)
        yield family


class Statuses(SteppedCollector):
    """A collector whose work steps (as `metrics.LagCollector`'s over thousands of groups)."""
    steps = 5

    def collect_in_steps(self):
        family = GaugeMetricFamily("t_status", "status", labels=["group"])
        for n in range(self.steps):
            family.add_metric([f"g{n}"], 1)
            yield STEP
        yield family


def registry(kind=Registry) -> CollectorRegistry:
    made = kind()
    Counter("t_requests", "requests", ["api"], registry=made).labels("Fetch").inc(3)
    Gauge("t_groups", "groups", registry=made).set(7)
    seconds = Histogram("t_seconds", "seconds", ["api"], registry=made)
    for api in ("Fetch", "Produce", "Heartbeat"):
        seconds.labels(api).observe(0.002)
    made.register(Lags())
    made.register(Statuses())
    return made


@pytest.mark.parametrize("kind", [Registry, CollectorRegistry])
async def test_the_text_is_generate_latests_to_the_byte(kind):
    made = registry(kind)
    assert await exposition(made) == generate_latest(made)


def test_our_registry_lists_what_is_registered_in_order():
    made = registry()
    lags = made.collectors[-2]
    assert len(made.collectors) == 5 and isinstance(lags, Lags)
    made.unregister(lags)
    assert len(made.collectors) == 4 and b"t_lag" not in generate_latest(made)


async def test_other_tasks_run_between_its_families():
    made = registry()
    families = len(list(made.collect()))
    _, during = await turns_during(lambda: exposition(made))
    # a step after each collector, before each family but the first, and at each of the
    # stepped collector's own
    assert families == 5 and during >= len(made.collectors) + families - 1 + Statuses.steps
