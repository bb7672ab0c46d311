"""The Grafana dashboard: importable, and every metric it and the rules read is one the lab exports.

The lab scenario compares the same names with Prometheus's real scrape
(molecule/shared/filter_plugins/monitoring_scrape.py); here they are pinned, and the vLLM
ones checked against the stand-in's catalogue of vLLM 0.17.1's families
(lab/vllm/vllm ``metric_catalogue``, lab/vllm/README.md "Metrics").
"""

import importlib.machinery
import importlib.util
import json
from pathlib import Path

import yaml
from ansible_collections.sparkops.vllm.plugins.module_utils import _monitoring

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "roles/monitoring/files/grafana-dashboard.json"
RULES = ROOT / "roles/monitoring/files/sparkops-rules.yml"
EXCEPTIONS = ROOT / "molecule/shared/vars/monitoring.yml"

_spec = importlib.util.spec_from_file_location(
    "monitoring_scrape", ROOT / "molecule" / "shared" / "filter_plugins" / "monitoring_scrape.py"
)
monitoring_scrape = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(monitoring_scrape)

# Every name the dashboard and the rules read, by the exporter that gives it.
NEEDED = {
    # vLLM 0.17.1's /metrics (vllm/v1/metrics/loggers.py)
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:generation_tokens_total",
    "vllm:inter_token_latency_seconds_bucket",
    "vllm:kv_cache_usage_perc",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:prompt_tokens_total",
    "vllm:time_to_first_token_seconds_bucket",
    # prometheus-node-exporter 1.5 (meminfo collector), and its textfiles
    "node_memory_MemAvailable_bytes",
    "node_memory_MemTotal_bytes",
    "sparkops_memory_plan_limit_bytes",
    "sparkops_watchdog_gave_up",
    "sparkops_watchdog_last_tick_timestamp_seconds",
    "sparkops_watchdog_ray_node_up",
    "sparkops_watchdog_tick_cpu_budget_seconds",
    "sparkops_watchdog_tick_cpu_seconds",
    # Prometheus itself, per target
    "up",
    # dcgm-exporter (an exception in the lab)
    "DCGM_FI_DEV_POWER_USAGE",
}


def _dashboard():
    return json.loads(DASHBOARD.read_text())


def test_the_dashboard_is_importable():
    dashboard = _dashboard()
    assert dashboard["schemaVersion"] >= 36
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_dashboard_has_the_issue_s_panels():
    titles = {panel["title"] for panel in _dashboard()["panels"]}
    assert {
        "Throughput (tokens/s)",
        "Time to first token",
        "Inter-token latency",
        "Queue",
        "KV-cache usage",
        "Unified memory per node",
        "GPU power",
    } <= titles


def test_every_query_is_filtered_by_the_cluster():
    for expr in _monitoring.dashboard_exprs(_dashboard()):
        for name in _monitoring.metric_names(expr):
            assert f'{name}{{cluster="$cluster"}}' in expr, expr


def test_the_names_the_dashboard_and_rules_read():
    got = monitoring_scrape.monitoring_scrape_check([], DASHBOARD.read_text(), RULES.read_text())
    assert set(got["needed"]) == NEEDED


def _standin_names():
    loader = importlib.machinery.SourceFileLoader("vllm_standin_names", str(ROOT / "lab/vllm/vllm"))
    spec = importlib.util.spec_from_loader("vllm_standin_names", loader)
    standin = importlib.util.module_from_spec(spec)
    loader.exec_module(standin)
    names = set()
    for family in standin.metric_catalogue("0.17.1", 4096):
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(
            family["kind"], [""]
        )
        names |= {family["name"] + suffix for suffix in suffixes}
    return names


def test_the_lab_s_vllm_exports_every_vllm_name():
    needed = {name for name in NEEDED if name.startswith("vllm:")}
    assert needed - _standin_names() == set()


def test_the_lab_s_exceptions_are_documented_and_needed():
    exceptions = yaml.safe_load(EXCEPTIONS.read_text())["monitoring_scrape_exceptions"]
    assert set(exceptions) == {"DCGM_FI_DEV_POWER_USAGE"}
    assert all(len(reason.split()) > 10 for reason in exceptions.values())
    assert set(exceptions) <= NEEDED


def test_a_scrape_without_a_needed_name_fails_the_check():
    exceptions = yaml.safe_load(EXCEPTIONS.read_text())["monitoring_scrape_exceptions"]
    full = sorted(NEEDED - set(exceptions))
    assert monitoring_scrape.monitoring_scrape_check(
        full, DASHBOARD.read_text(), RULES.read_text(), exceptions
    )["ok"]
    short = [name for name in full if name != "vllm:kv_cache_usage_perc"]
    got = monitoring_scrape.monitoring_scrape_check(
        short, DASHBOARD.read_text(), RULES.read_text(), exceptions
    )
    assert got["ok"] is False
    assert got["missing"] == ["vllm:kv_cache_usage_perc"]
