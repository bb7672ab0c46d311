"""The deployment's layout: every name and path from the cluster name and the path settings."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkops.vllm.plugins.filter.layout import layout as layout_filter
from ansible_collections.sparkops.vllm.plugins.module_utils import _layout


def test_the_default_layout_of_a_cluster():
    got = _layout.layout("lab", model_path="/models/tiny")
    assert got["config_dir"] == "/etc/sparkops/lab"
    assert got["state_dir"] == "/var/lib/sparkops/lab"
    assert got["units"] == {
        "ray_head": "sparkops-lab-ray-head",
        "ray_worker": "sparkops-lab-ray-worker",
        "serve": "sparkops-lab-vllm",
        "ray_firewall": "sparkops-lab-ray-firewall",
        "monitoring_firewall": "sparkops-lab-monitoring-firewall",
        "model_sync_rsyncd": "sparkops-model-sync-rsyncd",
        "watchdog": "sparkops-lab-watchdog",
        "watchdog_timer": "sparkops-lab-watchdog.timer",
    }
    assert got["unit_names"]["serve"] == "sparkops-lab-vllm.service"
    assert got["unit_names"]["watchdog_timer"] == "sparkops-lab-watchdog.timer"
    assert got["unit_files"]["ray_head"] == "/etc/systemd/system/sparkops-lab-ray-head.service"
    assert got["containers"] == {
        "ray_head": "sparkops-lab-ray-head",
        "ray_worker": "sparkops-lab-ray-worker",
        "serve": "sparkops-lab-vllm",
        "fabric_check": "sparkops-lab-fabric-check",
    }
    assert got["launch_script"] == "/etc/sparkops/lab/launch.sh"
    assert got["launch_script_mount"] == "/opt/sparkops/launch.sh"
    assert got["ray_env_file"] == "/etc/sparkops/lab/ray.env"
    assert got["serve_secrets_file"] == "/etc/sparkops/lab/serve-secrets.env"
    assert got["ray_firewall_script"] == "/etc/sparkops/lab/ray-firewall"
    assert got["ray_firewall_chain"] == "SPARKOPS-RAY-lab"
    assert got["ray_firewall_comment"] == "sparkops lab ray ports"
    assert got["monitoring_firewall_script"] == "/etc/sparkops/lab/monitoring-firewall"
    assert got["monitoring_firewall_chain"] == "SPARKOPS-MON-lab"
    assert got["monitoring_firewall_comment"] == "sparkops lab monitoring ports"
    assert got["firewall_comments"] == ["sparkops lab ray ports", "sparkops lab monitoring ports"]
    assert "sparkops-lab-monitoring-firewall.service" in got["cluster_unit_names"]
    assert got["ray_temp_dir"] == "/var/lib/sparkops/lab/ray"
    assert got["ray_logs_dir"] == "/var/lib/sparkops/lab/ray/session_latest/logs"
    assert got["ray_session_latest"] == "/var/lib/sparkops/lab/ray/session_latest"
    assert got["log_dir"] == "/var/log/sparkops"
    assert got["cache_dir"] == "/var/lib/sparkops/lab/cache"
    assert got["measured_record"] == "/var/lib/sparkops/lab/measured.json"
    assert got["deployed_record"] == "/var/lib/sparkops/lab/deployed.json"
    assert got["model_manifest"] == "/models/.tiny.sparkops-manifest.json"
    assert got["rsyncd_conf"] == "/etc/sparkops/model-sync/rsyncd.conf"
    assert got["rsyncd_secrets"] == "/etc/sparkops/model-sync/rsyncd.secrets"
    assert got["ssh_key"] == "/root/.ssh/sparkops_lab_ed25519"
    assert got["ssh_known_hosts"] == "/root/.ssh/sparkops_lab_known_hosts"
    assert got["ssh_key_comment"] == "sparkops-lab"
    assert got["unit_glob"] == "sparkops-lab-*"
    assert got["watchdog_dir"] == "/etc/sparkops/lab/watchdog"
    assert got["watchdog_program"] == "/etc/sparkops/lab/watchdog/_watchdog_tick.py"
    assert got["watchdog_config"] == "/etc/sparkops/lab/watchdog.json"
    assert got["watchdog_state_file"] == "/var/lib/sparkops/lab/watchdog/state.json"
    assert got["watchdog_bundle_dir"] == "/var/lib/sparkops/lab/watchdog/bundles"
    assert got["node_exporter_textfile_dir"] == "/var/lib/prometheus/node-exporter"
    assert got["watchdog_textfile"] == "/var/lib/prometheus/node-exporter/sparkops-lab-watchdog.prom"
    assert "ray_unit" not in got


def test_moving_the_state_dir_moves_every_state_path_and_nothing_else():
    default = _layout.layout("lab")
    moved = _layout.layout("lab", state_dir="/srv/state/lab")
    changed = {key for key in default if default[key] != moved[key]}
    assert changed == {
        "state_dir",
        "ray_temp_dir",
        "ray_session_latest",
        "ray_logs_dir",
        "cache_dir",
        "measured_record",
        "deployed_record",
        "watchdog_state_dir",
        "watchdog_state_file",
        "watchdog_bundle_dir",
    }
    assert all(str(moved[key]).startswith("/srv/state/lab") for key in changed)


@pytest.mark.parametrize(
    ("settings", "key", "expected"),
    [
        ({"manifest_path": "/data/m.json", "model_path": "/models/tiny"}, "model_manifest", "/data/m.json"),
        (
            {"manifest_path": "", "model_path": "/models/hf/snapshots/abc"},
            "model_manifest",
            "/models/hf/snapshots/.abc.sparkops-manifest.json",
        ),
        ({}, "model_manifest", None),
        ({"measured_path": "/data/measured.json"}, "measured_record", "/data/measured.json"),
        ({"measured_path": ""}, "measured_record", "/var/lib/sparkops/lab/measured.json"),
        ({"model_sync_config_dir": "/etc/ms"}, "rsyncd_conf", "/etc/ms/rsyncd.conf"),
        ({"state_dir": None}, "state_dir", "/var/lib/sparkops/lab"),
        ({"state_dir": "  "}, "state_dir", "/var/lib/sparkops/lab"),
    ],
)
def test_path_settings(settings, key, expected):
    assert _layout.layout("lab", **settings)[key] == expected


@pytest.mark.parametrize(
    ("role", "ray_unit", "node_units"),
    [
        ("head", "sparkops-c1-ray-head", ["sparkops-c1-vllm", "sparkops-c1-ray-head"]),
        ("worker", "sparkops-c1-ray-worker", ["sparkops-c1-ray-worker"]),
    ],
)
def test_the_node_role_adds_its_own_units(role, ray_unit, node_units):
    got = _layout.layout("c1", role=role)
    assert got["ray_unit"] == ray_unit
    assert got["ray_unit_name"] == ray_unit + ".service"
    assert got["ray_unit_file"] == f"/etc/systemd/system/{ray_unit}.service"
    assert got["ray_container"] == ray_unit
    assert got["node_units"] == node_units


@pytest.mark.parametrize(
    ("cluster", "chain"),
    [
        ("lab", "SPARKOPS-RAY-lab"),
        ("fifteen-chars-x", "SPARKOPS-RAY-fifteen-chars-x"),
        # The first 6 characters and sha1's first 8 hex digits, as the role's
        # Jinja `hash('sha1')` named it before (hashlib under both).
        ("a-much-longer-cluster-name", "SPARKOPS-RAY-a-much-d2d1a4d5"),
    ],
)
def test_the_firewall_chain_fits_iptables(cluster, chain):
    assert _layout.firewall_chain(cluster) == chain
    assert len(chain) <= 28


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cluster": ""}, "sparkops_cluster_name"),
        ({"cluster": "lab", "state_dir": "relative/dir"}, "ray_cluster_state_dir is 'relative/dir'"),
        ({"cluster": "lab", "model_sync_config_dir": "etc"}, "model_sync_rsyncd_config_dir"),
        ({"cluster": "lab", "role": "leader"}, "head, worker"),
    ],
)
def test_bad_settings_name_the_setting(kwargs, message):
    with pytest.raises(_layout.LayoutError, match=message):
        _layout.layout(**kwargs)


def test_the_filter_raises_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="layout: ray_cluster_state_dir"):
        layout_filter("lab", state_dir="x")
    assert layout_filter("lab", role="head")["ray_unit"] == "sparkops-lab-ray-head"


def test_monitoring_paths():
    got = _layout.layout("lab")
    assert got["node_exporter_textfile_dir"] == "/var/lib/prometheus/node-exporter"
    assert got["plan_textfile"] == "/var/lib/prometheus/node-exporter/sparkops-lab-plan.prom"
    assert got["node_exporter_defaults"] == "/etc/default/prometheus-node-exporter"
    assert got["prometheus_defaults"] == "/etc/default/prometheus"
    assert got["prometheus_config"] == "/etc/prometheus/sparkops-lab.yml"
    assert got["prometheus_rules"] == "/etc/prometheus/sparkops-lab-rules.yml"
