"""deploy/kafka/kraft.py (a local Apache Kafka in KRaft mode from the jars `make install`
caches), loaded as a module: that file is a script with the standard library only, run
without groupkeeper's virtualenv, so it is not a package of ours. The benchmarks and the
tests take `KraftCluster`, `KafkaError` and `run_tool` from here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "deploy" / "kafka" / "kraft.py"


def _load():
    spec = importlib.util.spec_from_file_location("groupkeeper_kraft", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kraft = _load()
KraftCluster = kraft.KraftCluster
KafkaError = kraft.KafkaError
run_tool = kraft.run_tool
