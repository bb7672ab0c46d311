"""plugins/module_utils/_watchdog_config.py: the head's config from the layout and the inventory."""

import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkops.vllm.plugins.filter.watchdog import watchdog_config, watchdog_summary
from ansible_collections.sparkops.vllm.plugins.module_utils import _layout, _watchdog_config, _watchdog_tick

GIB = 1 << 30
SETTINGS = {
    "frozen_ticks": "3",
    "budget_restarts": 3,
    "budget_window_s": 21600,
    "backoff_initial_s": 300,
    "gpu_power_floor_w": 30,
    "gpu_utilization_floor_pct": 10.0,
    "tick_cpu_budget_s": "1.0",
    "serve_host": "0.0.0.0",
    "serve_port": "8000",
    "served_model_name": "lab-tiny-moe",
    "canary_prompt": "Say OK.",
    "canary_timeout_s": 20,
    "probe_timeout_s": 5,
    "ready_timeout_s": 1800,
    "wait_nodes_timeout_s": 300,
    "unit_timeout_s": 600,
    "ray_node_manager_port": 6380,
    "ssh_key": "/root/.ssh/sparkops_lab_ed25519",
    "ssh_known_hosts": "/root/.ssh/sparkops_lab_known_hosts",
}


def record(limit_gib):
    return json.dumps({"schema": 1, "sections": {"plan": {"node": {"limit_gib": limit_gib}}}})


def nodes():
    return [
        {"name": "spark-1", "ib": "192.168.200.12", "record": record(100), "mem_total_bytes": str(120 * GIB)},
        {"name": "spark-2", "ib": "192.168.200.13", "record": "", "mem_total_bytes": 120 * GIB},
    ]


def build(**kw):
    args = {
        "head": "spark-1",
        "nodes": nodes(),
        "layout": _layout.layout("lab"),
        "head_units": _layout.layout("lab", role="head")["node_units"],
        "worker_units": _layout.layout("lab", role="worker")["node_units"],
        "settings": SETTINGS,
    }
    args.update(kw)
    return _watchdog_config.build("lab", **args)


def test_the_config_takes_names_from_the_layout_and_floors_from_the_plan():
    got = build()
    assert got["head"] == {
        "name": "spark-1",
        "ib": "192.168.200.12",
        "units": ["sparkops-lab-vllm", "sparkops-lab-ray-head"],
    }
    assert got["workers"] == [
        {"name": "spark-2", "ib": "192.168.200.13", "units": ["sparkops-lab-ray-worker"]}
    ]
    assert got["memavailable_floor_bytes"] == {"spark-1": 20 * GIB, "spark-2": None}
    assert got["state_file"] == "/var/lib/sparkops/lab/watchdog/state.json"
    assert got["textfile"] == "/var/lib/prometheus/node-exporter/sparkops-lab-watchdog.prom"
    assert got["secrets_file"] == "/etc/sparkops/lab/serve-secrets.env"
    assert got["endpoint"] == "http://127.0.0.1:8000"
    assert got["thresholds"]["frozen_ticks"] == 3
    assert got["thresholds"]["tick_cpu_budget_s"] == 1.0
    assert _watchdog_tick.check_config(got) == []


def test_no_secret_goes_into_the_config():
    text = json.dumps(build())
    assert "api_key" not in text.lower() and "VLLM_API_KEY" not in text


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"head": "spark-9"}, "not among the nodes"),
        ({"nodes": [{"name": "spark-1", "ib": ""}]}, "no name or ib address"),
        ({"settings": dict(SETTINGS, frozen_ticks=0)}, "frozen_ticks"),
        ({"settings": dict(SETTINGS, tick_cpu_budget_s=0)}, "tick_cpu_budget_s"),
        ({"settings": {k: v for k, v in SETTINGS.items() if k != "tick_cpu_budget_s"}}, "tick_cpu_budget_s"),
        ({"settings": dict(SETTINGS, serve_port="eighty")}, "not a number"),
    ],
)
def test_bad_inputs_are_refused(change, message):
    with pytest.raises(_watchdog_config.WatchdogConfigError, match=message):
        build(**change)


def test_the_filters():
    layout = _layout.layout("lab")
    with pytest.raises(AnsibleFilterError, match="watchdog_config"):
        watchdog_config(
            "lab", head="x", nodes=nodes(), layout=layout, head_units=[], worker_units=[], settings=SETTINGS
        )
    assert watchdog_summary("", timer="inactive", now=0)["line"] == (
        "Watchdog: not installed; 0 restart(s) in the window"
    )


@pytest.mark.parametrize(
    ("host", "endpoint"),
    [
        ("0.0.0.0", "http://127.0.0.1:8000"),
        ("::", "http://127.0.0.1:8000"),
        ("", "http://127.0.0.1:8000"),
        ("192.168.200.12", "http://192.168.200.12:8000"),
        ("127.0.0.1", "http://127.0.0.1:8000"),
        ("fd00::12", "http://[fd00::12]:8000"),
    ],
)
def test_the_canary_reaches_serve_where_it_listens(host, endpoint):
    config = build(settings=dict(SETTINGS, serve_host=host))
    assert config["endpoint"] == endpoint
