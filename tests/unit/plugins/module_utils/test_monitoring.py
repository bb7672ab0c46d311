"""The monitoring stage's logic: scrape config, plan textfile, PromQL metric names, the scrape comparison."""

import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkops.vllm.plugins.filter.monitoring import (
    monitoring_hostport,
    monitoring_plan_textfile,
    monitoring_scrape_config,
)
from ansible_collections.sparkops.vllm.plugins.module_utils import _monitoring

NODES = {"spark-1": "192.168.200.12", "spark-2": "192.168.200.13"}
ARGS = dict(
    cluster="lab",
    head="spark-1",
    prometheus_host="spark-1",
    serve_host="0.0.0.0",
    serve_port=8000,
    ray_metrics_port=6385,
    node_exporter_port=9100,
    scrape_interval="15s",
    rule_files=["/etc/prometheus/sparkops-lab-rules.yml"],
)


def _targets(config, job):
    scrape = next(s for s in config["scrape_configs"] if s["job_name"] == job)
    return [(g["targets"], g["labels"]) for g in scrape["static_configs"]]


def test_every_source_on_every_node_labelled_node_and_cluster():
    config = _monitoring.scrape_config(nodes=NODES, **ARGS)
    assert [s["job_name"] for s in config["scrape_configs"]] == ["vllm", "ray", "node"]
    assert _targets(config, "vllm") == [(["192.168.200.12:8000"], {"node": "spark-1", "cluster": "lab"})]
    assert _targets(config, "ray") == [
        (["192.168.200.12:6385"], {"node": "spark-1", "cluster": "lab"}),
        (["192.168.200.13:6385"], {"node": "spark-2", "cluster": "lab"}),
    ]
    assert _targets(config, "node") == [
        (["192.168.200.12:9100"], {"node": "spark-1", "cluster": "lab"}),
        (["192.168.200.13:9100"], {"node": "spark-2", "cluster": "lab"}),
    ]
    assert config["rule_files"] == ["/etc/prometheus/sparkops-lab-rules.yml"]
    assert config["global"]["external_labels"] == {"cluster": "lab"}


@pytest.mark.parametrize(
    ("serve_host", "prometheus_host", "target"),
    [
        ("0.0.0.0", "spark-1", "192.168.200.12:8000"),
        ("::", "spark-2", "192.168.200.12:8000"),
        ("", "spark-1", "192.168.200.12:8000"),
        ("127.0.0.1", "spark-1", "127.0.0.1:8000"),
        ("10.0.0.5", "spark-2", "10.0.0.5:8000"),
        ("fd00::5", "spark-1", "[fd00::5]:8000"),
    ],
)
def test_the_serve_target(serve_host, prometheus_host, target):
    args = dict(ARGS, serve_host=serve_host, prometheus_host=prometheus_host)
    assert _targets(_monitoring.scrape_config(nodes=NODES, **args), "vllm")[0][0] == [target]


@pytest.mark.parametrize(
    ("nodes", "changes", "message"),
    [
        (NODES, {"serve_host": "127.0.0.1", "prometheus_host": "spark-2"}, "reachable only on the head"),
        (NODES, {"serve_host": "localhost", "prometheus_host": "spark-2"}, "reachable only on the head"),
        (NODES, {"prometheus_host": "grafana-box"}, "monitoring_prometheus_host is 'grafana-box'"),
        (NODES, {"head": "spark-9"}, "the head spark-9 is not in the cluster group"),
        ({"spark-1": "192.168.200.12", "spark-2": None}, {}, "spark-2 have no ib_address"),
        ({}, {}, "the cluster has no node"),
    ],
)
def test_bad_inputs_name_the_setting(nodes, changes, message):
    with pytest.raises(_monitoring.MonitoringError, match=message):
        _monitoring.scrape_config(nodes=nodes, **dict(ARGS, **changes))


def test_the_filter_raises_an_ansible_error():
    with pytest.raises(AnsibleFilterError, match="monitoring_scrape_config: monitoring_prometheus_host"):
        monitoring_scrape_config(NODES, **dict(ARGS, prometheus_host="nope"))


def test_the_plan_textfile_from_a_record():
    text = json.dumps({"schema": 1, "sections": {"plan": {"node": {"limit_gib": 113.5}}}})
    got = monitoring_plan_textfile(text, "lab")
    assert got.splitlines()[-1] == 'sparkops_memory_plan_limit_bytes{cluster="lab"} 121869697024'
    assert got.splitlines()[1] == "# TYPE sparkops_memory_plan_limit_bytes gauge"
    assert got.endswith("\n")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        json.dumps({"schema": 1, "sections": {}}),
        json.dumps({"schema": 1, "sections": {"plan": {"node": {}}}}),
        json.dumps({"schema": 1, "sections": {"plan": {"node": {"limit_gib": 0}}}}),
        # another schema is not read
        json.dumps({"schema": 2, "sections": {"plan": {"node": {"limit_gib": 100}}}}),
    ],
)
def test_no_plan_no_sample(text):
    got = monitoring_plan_textfile(text, "lab")
    assert [line for line in got.splitlines() if not line.startswith("#")] == []


def test_a_cluster_name_is_escaped_as_a_label_value():
    doc = {"schema": 1, "sections": {"plan": {"node": {"limit_gib": 1}}}}
    assert 'cluster="a\\"b"} 1073741824' in _monitoring.plan_textfile('a"b', doc)


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ('up{job="ray"} == 0', {"up"}),
        ("sum(rate(vllm:generation_tokens_total[5m]))", {"vllm:generation_tokens_total"}),
        (
            "histogram_quantile(0.95, sum by (le, node) (rate(vllm:time_to_first_token_seconds_bucket[$__rate_interval])))",
            {"vllm:time_to_first_token_seconds_bucket"},
        ),
        (
            "node_memory_MemAvailable_bytes < on (node, cluster) group_left () "
            "(node_memory_MemTotal_bytes - on (node, cluster) sparkops_memory_plan_limit_bytes)",
            {
                "node_memory_MemAvailable_bytes",
                "node_memory_MemTotal_bytes",
                "sparkops_memory_plan_limit_bytes",
            },
        ),
        ("max_over_time(vllm:kv_cache_usage_perc[10m:1m] offset 5m) > 0.9", {"vllm:kv_cache_usage_perc"}),
        ('{__name__="DCGM_FI_DEV_POWER_USAGE", node=~"$node"}', {"DCGM_FI_DEV_POWER_USAGE"}),
        ('absent(up{job="vllm"}) or vector(1)', {"up"}),
        ("sum without (instance) (x) / ignoring (engine) y unless z and bool w", {"x", "y", "z", "w"}),
        ("count(foo{a=\"by (x)\", b='{}'}) by (job)", {"foo"}),
        ("1e3 * 0x1F + .5 - Inf + NaN", set()),
        ("# a comment naming fake_metric\nreal_metric", {"real_metric"}),
        ("sum(rate(a[5m])) by (node) > 2 * scalar(b)", {"a", "b"}),
    ],
)
def test_metric_names(expr, names):
    assert _monitoring.metric_names(expr) == names


@pytest.mark.parametrize("expr", ["sum(rate(a[5m)", 'a{b="c}', "a{b='c'"])
def test_unbalanced_expressions_fail(expr):
    with pytest.raises(_monitoring.MonitoringError):
        _monitoring.metric_names(expr)


def test_dashboard_and_rules_names():
    dashboard = {
        "panels": [
            {"targets": [{"expr": "rate(a_total[5m])"}, {"expr": ""}]},
            {"type": "row", "panels": [{"targets": [{"expr": "b"}]}]},
            {"type": "text"},
        ]
    }
    assert _monitoring.dashboard_metric_names(dashboard) == {"a_total", "b"}
    rules = {
        "groups": [
            {
                "rules": [
                    {"record": "job:a:rate5m", "expr": "rate(a_total[5m])"},
                    {"alert": "X", "expr": "job:a:rate5m > 1"},
                ]
            }
        ]
    }
    assert _monitoring.rules_metric_names(rules) == {"a_total"}


def test_missing_metrics():
    got = _monitoring.missing_metrics(
        {"a", "b", "up", "DCGM_FI_DEV_POWER_USAGE"}, ["a"], {"DCGM_FI_DEV_POWER_USAGE": "no DCGM in the lab"}
    )
    assert got == {
        "ok": False,
        "missing": ["b"],
        "excepted": {"DCGM_FI_DEV_POWER_USAGE": "no DCGM in the lab"},
        "stale_exceptions": [],
    }
    assert _monitoring.missing_metrics({"a"}, ["a"])["ok"] is True


def test_an_exception_the_scrape_holds_is_stale():
    got = _monitoring.missing_metrics({"a"}, ["a", "g"], {"g": "not in the lab"})
    assert got["ok"] is False
    assert got["stale_exceptions"] == ["g"]


@pytest.mark.parametrize(
    ("address", "port", "want"),
    [
        ("192.168.200.12", 9100, "192.168.200.12:9100"),
        ("fd00::1", "9090", "[fd00::1]:9090"),
        ("spark-1", 1, "spark-1:1"),
    ],
)
def test_hostport(address, port, want):
    assert monitoring_hostport(address, port) == want


@pytest.mark.parametrize("port", [None, ""])
def test_no_ray_job_without_ray_metrics(port):
    # monitoring_scrape_ray off: the image's Ray serves no metrics without ray[default].
    config = monitoring_scrape_config(NODES, **{**ARGS, "ray_metrics_port": port})
    assert [s["job_name"] for s in config["scrape_configs"]] == ["vllm", "node"]
