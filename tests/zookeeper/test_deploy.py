"""The deployment files agree with the code: every metric the alerts and the dashboard query
is one a running coordinator exports, the PromQL parses (promtool) and the alerts fire when
they should (promtool's rule tests), the systemd unit verifies, and config/groupkeeper.toml
documents exactly the keys coordinator/config.py knows."""

from __future__ import annotations

import configparser
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from coordinator.config import KEYS, load_config
from tests.support.coordinator_process import CoordinatorProcess

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "groupkeeper.json"
UNIT = DEPLOY / "systemd" / "groupkeeper.service"
CONFIG = ROOT / "config" / "groupkeeper.toml"
JOB = "groupkeeper"

# --- PromQL: which metrics an expression selects ------------------------------------------

# Functions and aggregation operators: an identifier among these (or followed by "(") is no
# metric. Kept explicit so that a misspelt function fails here rather than in Grafana.
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "avg",
    "avg_over_time", "bottomk", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
    "count", "count_over_time", "count_values", "day_of_month", "day_of_week", "day_of_year",
    "days_in_month", "deg", "delta", "deriv", "exp", "floor", "group", "histogram_quantile",
    "holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace",
    "last_over_time", "ln", "log10", "log2", "max", "max_over_time", "min", "min_over_time",
    "minute", "month", "pi", "predict_linear", "present_over_time", "quantile",
    "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn", "sin", "sinh", "sort",
    "sort_desc", "sqrt", "stddev", "stddev_over_time", "stdvar", "stdvar_over_time", "sum",
    "sum_over_time", "tan", "tanh", "time", "timestamp", "topk", "vector", "year",
}
# Followed by a parenthesised list of label names, which are no metrics either.
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = LABEL_LIST_KEYWORDS | {"and", "or", "unless", "atan2", "bool", "offset", "inf", "nan"}
# Series Prometheus itself writes for every target, which no registry exports.
SCRAPE_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                 "scrape_samples_post_metric_relabeling", "scrape_series_added"}

_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<variable>\$\{[^}]*\}|\$\w+)                  # Grafana's $var, ${var}, $__rate_interval
  | (?P<number>0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[a-zA-Z]*)  # also 5m, 1h30m
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)


def _tokens(expr: str) -> list[tuple[str, str]]:
    """(kind, text) tokens, with a label-matcher block `{...}` and a range/subquery `[...]`
    each folded into one token (strings inside them may hold any character)."""
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(expr):
        if expr[pos] in "{[":
            close = "}" if expr[pos] == "{" else "]"
            end = pos + 1
            while end < len(expr) and expr[end] != close:
                match = _TOKEN.match(expr, end)
                end = match.end()
            if end >= len(expr):
                raise ValueError(f"unclosed {expr[pos]!r} in {expr!r}")
            out.append(("matchers" if close == "}" else "range", expr[pos:end + 1]))
            pos = end + 1
            continue
        match = _TOKEN.match(expr, pos)
        if match.lastgroup != "space":
            out.append((match.lastgroup, match.group()))
        pos = match.end()
    return out


def selectors(expr: str) -> list[tuple[str, str]]:
    """(metric name, its matcher block or "") for every metric an expression selects.

    A metric is an identifier that is no function (those are followed by "("), no keyword,
    and not inside a string, a matcher block, a range, or the label list of by/without/on/
    ignoring/group_left/group_right."""
    tokens = _tokens(expr)
    found = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else ("", "")
        if kind != "ident":
            i += 1
        elif text in LABEL_LIST_KEYWORDS and following == ("other", "("):
            depth, i = 0, i + 1
            while True:  # skip the label list
                depth += {"(": 1, ")": -1}.get(tokens[i][1], 0) if tokens[i][0] == "other" else 0
                i += 1
                if depth == 0:
                    break
        elif text in KEYWORDS:
            i += 1
        elif following == ("other", "("):
            if text not in FUNCTIONS:
                raise ValueError(f"unknown PromQL function {text!r} in {expr!r}")
            i += 1
        elif text in FUNCTIONS:  # an aggregation before its `by (...)` clause: sum by (x) (...)
            i += 1
        else:
            found.append((text, following[1] if following[0] == "matchers" else ""))
            i += 1
    return found


@pytest.mark.parametrize("expr, metrics", [
    ('sum by (reason) (rate(a_total{job="gk", x=~"b{c}]"}[5m])) * 60 > 10', ["a_total"]),
    ("histogram_quantile(0.99, sum without (instance, le) (rate(h_bucket[$__rate_interval])))"
     " and on (job) b offset 1h", ["h_bucket", "b"]),
    ("a / ignoring(code) group_left(name) b > bool 1e3", ["a", "b"]),
    ('topk(10, max by (group) (m{group!=""}))', ["m"]),
    ("sum(z) by (le) unless absent(up{job='x'} == 1)", ["z", "up"]),
    ('label_replace(v, "by", "$1", "sum", "(.*)") - w[1h:5m] # a comment: not_a_metric', ["v", "w"]),
    ("-inf < x", ["x"]),
])
def test_the_metric_extractor(expr, metrics):
    assert [name for name, _ in selectors(expr)] == metrics


def test_the_metric_extractor_refuses_unknown_functions():
    with pytest.raises(ValueError, match="rated"):
        selectors("rated(a[5m])")


# --- What the deploy files query ---------------------------------------------------------

def alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def dashboard_expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable; Grafana's
    label_values(expr, label) contributes its expr."""
    board = json.loads(DASHBOARD.read_text())
    found = []

    def visit(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                found.append((f"panel {panel['title']!r}", target["expr"]))
            visit(panel.get("panels", []))
    visit(board["panels"])
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            values = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query, re.DOTALL)
            found.append((f"variable {variable['name']!r}", values.group(1) if values else query))
    return found


def all_expressions() -> list[tuple[str, str]]:
    return [(f"alert {r['alert']}", r["expr"]) for r in alert_rules()] + dashboard_expressions()


def test_alert_rules_are_complete():
    rules = alert_rules()
    names = {rule["alert"] for rule in rules}
    # the four the operations issue asks for
    assert {"GroupkeeperRebalanceStorm", "GroupkeeperSessionExpirySpike",
            "GroupkeeperGroupPartitionWithoutOwner", "GroupkeeperZooKeeperDisconnected"} <= names
    # issue 29's: lag growing, group STALL/STOP, commits stalled, rebalance stuck, events
    # dropped, ZooKeeper data near heap, metadata age
    assert {"GroupkeeperConsumerLagGrowing", "GroupkeeperConsumerGroupError", "GroupkeeperCommitsStalled",
            "GroupkeeperRebalanceStuck", "GroupkeeperEventsDropped", "GroupkeeperZooKeeperDataNearHeap",
            "GroupkeeperTopicMetadataStale"} <= names
    for rule in rules:
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "")), rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_the_dashboard_covers_the_operations_views():
    board = json.loads(DASHBOARD.read_text())
    queried = {name for _, expr in dashboard_expressions() for name, _ in selectors(expr)}
    assert {"groupkeeper_rebalances_total", "groupkeeper_rebalance_duration_seconds_bucket",
            "groupkeeper_groups", "groupkeeper_group_members", "groupkeeper_requests_total",
            "groupkeeper_request_duration_seconds_bucket", "groupkeeper_offset_commits_total",
            "groupkeeper_offset_commit_duration_seconds_bucket",
            "groupkeeper_zookeeper_request_duration_seconds_bucket", "groupkeeper_zookeeper_connected",
            "groupkeeper_owned_group_partitions", "groupkeeper_consumergroup_lag",
            "groupkeeper_consumergroup_partition_lag", "groupkeeper_consumergroup_status",
            "groupkeeper_consumergroups_by_status"} <= queried
    assert "group" in {variable["name"] for variable in board["templating"]["list"]}
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    taken: dict[tuple[int, int], str] = {}  # no two panels on one cell of the 24-column grid
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for cell in ((x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                     for y in range(grid["y"], grid["y"] + grid["h"])):
            assert taken.setdefault(cell, panel["title"]) == panel["title"], (panel["title"], taken[cell])
    assert any("histogram_quantile(0.99" in expr for _, expr in dashboard_expressions())


def test_every_selector_is_of_the_groupkeeper_job():
    """The scrape job's name is what the alerts and the dashboard select on."""
    jobs = [job["job_name"] for job in yaml.safe_load(
        (DEPLOY / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]]
    assert jobs == [JOB]
    for where, expr in all_expressions():
        for name, matchers in selectors(expr):
            assert re.search(rf"""\bjob\s*=\s*["']{JOB}["']""", matchers), (where, name, expr)


@pytest.fixture(scope="module")
def exported(zookeeper, tmp_path_factory) -> set[str]:
    """The series names a live coordinator's /metrics can carry: its families with the
    suffixes their types give samples (a labelled family with no series yet still counts)."""
    process = CoordinatorProcess(zookeeper, tmp_path_factory.mktemp("deploy"))
    process.start()
    try:
        status, text = process.scrape()
    finally:
        assert process.stop() == 0
    assert status == 200
    names = set()
    for family in text_string_to_metric_families(text):
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"],
                    "summary": ["", "_sum", "_count"]}.get(family.type, [""])
        names |= {family.name + suffix for suffix in suffixes}
    return names


def test_alerts_and_dashboard_query_only_exported_metrics(exported):
    missing = sorted({(name, where) for where, expr in all_expressions()
                      for name, _ in selectors(expr) if name not in exported | SCRAPE_SERIES})
    assert not missing, f"metrics queried but not exported by groupkeeper: {missing}"


# --- promtool -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool is installed by `make install` (Debian's prometheus package)"
    return path


def run(*command: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd)


def test_promtool_accepts_the_scrape_config_and_rules(promtool):
    checked = run(promtool, "check", "config", "prometheus.yml", cwd=DEPLOY / "prometheus")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    checked = run(promtool, "check", "rules", "alerts.yml", cwd=DEPLOY / "prometheus")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_alerts_fire_when_they_should(promtool):
    """deploy/prometheus/alerts_test.yml: series in, alerts (labels and rendered text) out."""
    tested = run(promtool, "test", "rules", "alerts_test.yml", cwd=DEPLOY / "prometheus")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_dashboard_queries_parse(promtool, tmp_path):
    """promtool parses PromQL in rule files: each dashboard query becomes a recording rule,
    with Grafana's variables given values first."""
    grafana = {"$__rate_interval": "5m", "$__interval": "1m", "$instance": ".*", "$group": ".*"}
    rules = []
    for n, (where, expr) in enumerate(dashboard_expressions()):
        for variable, value in grafana.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, (where, expr)
        rules.append({"record": f"dashboard:query_{n}", "expr": expr})
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = run(promtool, "check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


# --- systemd ------------------------------------------------------------------------------

def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def _seconds(value: str) -> float:
    return float(value[:-1]) * {"s": 1, "m": 60}[value[-1]] if value[-1] in "sm" else float(value)


def test_the_unit_runs_the_daemon_as_issue_6_asks():
    service = unit()["Service"]
    assert service["Type"] == "notify"
    assert service["Restart"] == "on-failure"
    assert service["ExecStart"].endswith("/groupkeeper run --config /etc/groupkeeper/groupkeeper.toml")
    assert service["User"] == "groupkeeper"
    # stopping takes shutdown_grace + 1 s before the partitions are released: room for both
    assert _seconds(service["TimeoutStopSec"]) >= 3 * (KEYS["shutdown_grace"][1] + 1)
    assert int(service["LimitNOFILE"]) > KEYS["max_connections"][1]


def test_systemd_verifies_the_unit(tmp_path):
    """`systemd-analyze verify`: unknown keys, bad values, an ExecStart that is not
    executable. ExecStart points at this checkout's groupkeeper instead of /opt's."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package)")
    executable = Path(sys.executable).parent / "groupkeeper"
    text = UNIT.read_text()
    assert "/opt/groupkeeper/venv/bin/groupkeeper" in text
    copy = tmp_path / "groupkeeper.service"
    copy.write_text(text.replace("/opt/groupkeeper/venv/bin/groupkeeper", str(executable)))
    verified = run(analyze, "verify", str(copy))
    assert verified.returncode == 0 and not verified.stderr.strip(), verified.stdout + verified.stderr


def test_the_service_user(tmp_path):
    """systemd-sysusers creates the unit's user from the sysusers.d line (in a scratch root)."""
    sysusers = shutil.which("systemd-sysusers")
    if sysusers is None:
        pytest.skip("systemd-sysusers is not installed (Debian's systemd package)")
    lines = [line for line in (DEPLOY / "systemd" / "groupkeeper.sysusers").read_text().splitlines()
             if line and not line.startswith("#")]
    (tmp_path / "etc").mkdir()
    created = run(sysusers, f"--root={tmp_path}", "--inline", *lines)
    assert created.returncode == 0, created.stderr
    passwd = (tmp_path / "etc" / "passwd").read_text()
    assert re.search(r"^groupkeeper:x:\d+:\d+:[^:]*:/var/lib/groupkeeper:/usr/sbin/nologin$", passwd, re.M)
    assert unit()["Service"]["User"] == "groupkeeper"


# --- ZooKeeper ----------------------------------------------------------------------------

def test_the_sample_zookeeper_ensemble():
    lines = [line.strip() for line in (DEPLOY / "zookeeper" / "zoo.cfg").read_text().splitlines()]
    settings = dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))
    servers = {key: value for key, value in settings.items() if key.startswith("server.")}
    assert sorted(servers) == ["server.1", "server.2", "server.3"]
    assert all(re.fullmatch(r"[\w.-]+:\d+:\d+", value) for value in servers.values())
    assert len({value.split(":")[0] for value in servers.values()}) == 3
    # ZooKeeper grants sessions of 2 to 20 ticks: the default session timeout must fit
    tick = int(settings["tickTime"]) / 1000
    assert 2 * tick <= KEYS["zk_session_timeout"][1] <= 20 * tick
    assert settings["forceSync"] == "yes" and int(settings["autopurge.purgeInterval"]) > 0


# --- config/groupkeeper.toml --------------------------------------------------------------

def test_the_config_file_names_every_key_and_only_known_keys():
    written = tomllib.loads(CONFIG.read_text())
    assert sorted(written) == sorted(KEYS)
    load_config(str(CONFIG))  # types as the code expects


def test_the_config_file_holds_the_defaults_it_documents():
    """Its comments say "Default X"; its values are the code's defaults, except log_format,
    which says why it differs."""
    written = tomllib.loads(CONFIG.read_text())
    differs = {key for key, value in written.items() if value != KEYS[key][1]}
    assert differs == {"log_format"}


def test_every_config_key_is_documented():
    """Each key has a comment block above it (keys listed together share one) that gives its
    default."""
    lines = CONFIG.read_text().splitlines()
    for n, line in enumerate(lines):
        key = re.match(r"(\w+)\s*=|\[(\w+)\]", line)
        if not key:
            continue
        above = n - 1
        while above >= 0 and re.match(r"\w+\s*=", lines[above]):  # a key of the same block
            above -= 1
        block = []
        while above >= 0 and lines[above].startswith("#"):
            block.append(lines[above])
            above -= 1
        assert block and "Default" in "\n".join(block), f"{key.group(1) or key.group(2)} is not documented"
