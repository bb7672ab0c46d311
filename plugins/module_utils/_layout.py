# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Every name and path of a deployment, from its cluster name and a few path settings.

One source for the systemd units, the containers, the config and state
directories and the files in them (launch script, env files, firewall scripts,
measured and deployed records), the model's manifest, model_sync's rsync
daemon and cluster_ssh's key. Roles read these through the
``sparkops.vllm.layout`` filter; no role, template or playbook builds one of
these names itself (tests/unit/roles/test_layout_drift.py fails if one does).

The settings that move a path are the documented role options:
``ray_cluster_state_dir`` (the state directory, shared by Ray and serve),
``model_sync_manifest_path`` (empty: beside the model), ``model_sync_rsyncd_config_dir``
and ``preflight_plan_measured_path`` (empty: in the state directory). Names are
derived from the cluster name alone.
"""

from __future__ import annotations

import hashlib
import posixpath
from typing import Any

from ansible_collections.sparkops.vllm.plugins.module_utils._ib_recheck import BUNDLE as IB_RECHECK_BUNDLE

PREFIX = "sparkops"
CONFIG_ROOT = "/etc/sparkops"
STATE_ROOT = "/var/lib/sparkops"
# model_sync_progress_dir's default: the head's progress logs of the copies.
LOG_ROOT = "/var/log/sparkops"
# The watchdog's program (plugins/module_utils/_watchdog_tick.py, first) and every file it
# imports, shipped beside it as plain files (tests/unit/plugins/module_utils/test_watchdog_tick.py
# runs the copy without Ansible).
WATCHDOG_BUNDLE = (
    "_watchdog_tick.py",
    "_watchdog.py",
    "_prometheus_text.py",
    "_meminfo.py",
    "_nvidia_smi.py",
    "_support_bundle.py",
    "_redact.py",
    "_safe_read.py",
)
UNIT_DIR = "/etc/systemd/system"
# Where the serve container sees the launch script (the unit mounts it read-only).
LAUNCH_SCRIPT_MOUNT = "/opt/sparkops/launch.sh"
# VLLM_CONFIG_ROOT inside the serve container (vllm/envs.py): vLLM reads
# ray_non_carry_over_env_vars.json there (vllm/ray/ray_env.py) and writes its usage stats.
VLLM_CONFIG_MOUNT = "/opt/sparkops/vllm-config"
MODEL_SYNC_CONFIG_DIR = f"{CONFIG_ROOT}/model-sync"
# Debian's prometheus-node-exporter 1.5.0 reads textfiles there by default (its
# --collector.textfile.directory default, `prometheus-node-exporter --help`); the monitoring
# stage also passes it explicitly. The watchdog writes its metrics there too.
NODE_EXPORTER_TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
# Debian's prometheus 2.42 package: its units read ARGS from these files
# (/lib/systemd/system/prometheus.service, prometheus-node-exporter.service).
PROMETHEUS_DIR = "/etc/prometheus"
PROMETHEUS_DEFAULTS = "/etc/default/prometheus"
NODE_EXPORTER_DEFAULTS = "/etc/default/prometheus-node-exporter"
# The project's own iptables chains (plugins/module_utils/_firewall_chain.py builds their rules),
# one per purpose and cluster. Chain names hold at most 28 characters (xtables
# XT_EXTENSION_MAXNAMELEN 29 with its NUL); each prefix is 13 characters and leaves 15 for the
# cluster's name.
_CHAIN_PREFIXES = {"ray": "SPARKOPS-RAY-", "monitoring": "SPARKOPS-MON-"}
_CHAIN_NAME_ROOM = 15
ROLES = ("head", "worker")


class LayoutError(ValueError):
    """A setting that cannot give a layout (the message names the setting and the fix)."""


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def firewall_chain(cluster: str, purpose: str = "ray") -> str:
    """The iptables chain of the cluster's Ray (or monitoring) firewall: a name longer than 15 is shortened with its hash."""
    prefix = _CHAIN_PREFIXES[purpose]
    if len(cluster) <= _CHAIN_NAME_ROOM:
        return prefix + cluster
    return f"{prefix}{cluster[:6]}-{hashlib.sha1(cluster.encode()).hexdigest()[:8]}"


def manifest_beside(model_path: str) -> str:
    """model_sync's manifest beside the model: ``<parent>/.<name>.sparkops-manifest.json``."""
    return f"{posixpath.dirname(model_path)}/.{posixpath.basename(model_path)}.{PREFIX}-manifest.json"


def layout(
    cluster: str,
    *,
    state_dir: str | None = None,
    model_path: str | None = None,
    manifest_path: str | None = None,
    model_sync_config_dir: str | None = None,
    measured_path: str | None = None,
    role: str | None = None,
) -> dict[str, Any]:
    """The deployment's names and paths; blank settings take their defaults.

    ``role`` (head or worker) adds the node's own Ray unit and container
    (``ray_unit``, ``ray_container``) and the units it runs (``node_units``,
    in stop order: serve before Ray on the head).
    """
    if _blank(cluster) or not isinstance(cluster, str):
        raise LayoutError(f"the cluster name is {cluster!r}; set sparkops_cluster_name")
    for name, value in (
        ("ray_cluster_state_dir", state_dir),
        ("model_sync_rsyncd_config_dir", model_sync_config_dir),
    ):
        if not _blank(value) and not str(value).startswith("/"):
            raise LayoutError(f"{name} is {value!r}; it must be an absolute path")
    if role is not None and role not in ROLES:
        raise LayoutError(f"the node role is {role!r}; it is one of {', '.join(ROLES)}")

    base = f"{PREFIX}-{cluster}"
    config_dir = f"{CONFIG_ROOT}/{cluster}"
    state = str(state_dir) if not _blank(state_dir) else f"{STATE_ROOT}/{cluster}"
    sync_dir = str(model_sync_config_dir) if not _blank(model_sync_config_dir) else MODEL_SYNC_CONFIG_DIR
    containers = {
        "ray_head": f"{base}-ray-head",
        "ray_worker": f"{base}-ray-worker",
        "serve": f"{base}-vllm",
        # The fabric check's one-shot all-reduce rank (playbooks/fabric_check.yml).
        "fabric_check": f"{base}-fabric-check",
    }
    # systemd's names: a name without a suffix is a .service to systemctl and
    # journalctl -u, which is how the tasks and messages show them.
    units = {
        "ray_head": f"{base}-ray-head",
        "ray_worker": f"{base}-ray-worker",
        "serve": f"{base}-vllm",
        "ray_firewall": f"{base}-ray-firewall",
        # The monitoring stage's firewall of Prometheus's and the node exporter's ports.
        "monitoring_firewall": f"{base}-monitoring-firewall",
        "model_sync_rsyncd": f"{PREFIX}-model-sync-rsyncd",
        "watchdog": f"{base}-watchdog",
        "watchdog_timer": f"{base}-watchdog.timer",
    }
    firewall_comments = [f"{PREFIX} {cluster} ray ports", f"{PREFIX} {cluster} monitoring ports"]
    unit_names = {key: name if "." in name else f"{name}.service" for key, name in units.items()}
    if not _blank(manifest_path):
        manifest = str(manifest_path)
    elif not _blank(model_path):
        manifest = manifest_beside(str(model_path))
    else:
        manifest = None
    result: dict[str, Any] = {
        "cluster": cluster,
        "config_dir": config_dir,
        "state_dir": state,
        "unit_dir": UNIT_DIR,
        "units": units,
        "unit_names": unit_names,
        "unit_files": {key: f"{UNIT_DIR}/{name}" for key, name in unit_names.items()},
        # The unit files of this cluster that teardown stops and removes, serve
        # first (model_sync's rsync daemon is shared by clusters: not here).
        "cluster_unit_names": [
            unit_names[key]
            for key in (
                "serve",
                "ray_worker",
                "ray_head",
                "ray_firewall",
                "monitoring_firewall",
                "watchdog_timer",
                "watchdog",
            )
        ],
        # journalctl -u takes a glob: every unit of this cluster.
        "unit_glob": f"{base}-*",
        "containers": containers,
        "launch_script": f"{config_dir}/launch.sh",
        "launch_script_mount": LAUNCH_SCRIPT_MOUNT,
        "ray_env_file": f"{config_dir}/ray.env",
        "serve_secrets_file": f"{config_dir}/serve-secrets.env",
        # Serve's VLLM_CONFIG_ROOT on the head, and the names vLLM must not copy from the
        # driver to its Ray workers (docs/ray-binding.md, "Per-node variables").
        "vllm_config_dir": f"{config_dir}/vllm-config",
        "vllm_config_mount": VLLM_CONFIG_MOUNT,
        "ray_non_carry_over_file": f"{config_dir}/vllm-config/ray_non_carry_over_env_vars.json",
        # The Hugging Face token for model_sync's download (0600, removed after it):
        # huggingface_hub reads the file named by HF_TOKEN_PATH.
        "hf_token_file": f"{config_dir}/hf-token",
        "ray_firewall_script": f"{config_dir}/ray-firewall",
        # The link re-check every Ray unit start runs (and status): module_utils/_ib_recheck.py
        # and the files it imports, copied as a plain script.
        "ib_recheck_dir": f"{config_dir}/ib-recheck",
        "ib_recheck_bundle": list(IB_RECHECK_BUNDLE),
        "ib_recheck_script": f"{config_dir}/ib-recheck/{IB_RECHECK_BUNDLE[0]}",
        "ray_firewall_chain": firewall_chain(cluster),
        # The comment on INPUT's jump to the chain (teardown finds a left-behind chain by it).
        "ray_firewall_comment": firewall_comments[0],
        # The monitoring stage's chain of Prometheus's and the node exporter's ports (roles/monitoring).
        "monitoring_firewall_script": f"{config_dir}/monitoring-firewall",
        "monitoring_firewall_chain": firewall_chain(cluster, "monitoring"),
        "monitoring_firewall_comment": firewall_comments[1],
        # The comments on INPUT's jumps to every chain of the cluster (teardown removes a chain
        # left behind by its unit by them).
        "firewall_comments": firewall_comments,
        "ray_temp_dir": f"{state}/ray",
        # Ray's link to its latest session (it points inside the container: follow it by name).
        "ray_session_latest": f"{state}/ray/session_latest",
        "ray_logs_dir": f"{state}/ray/session_latest/logs",
        "cache_dir": f"{state}/cache",
        "measured_record": str(measured_path) if not _blank(measured_path) else f"{state}/measured.json",
        "deployed_record": f"{state}/deployed.json",
        "model_manifest": manifest,
        "model_sync_config_dir": sync_dir,
        "log_dir": LOG_ROOT,
        "rsyncd_conf": f"{sync_dir}/rsyncd.conf",
        "rsyncd_secrets": f"{sync_dir}/rsyncd.secrets",
        "rsyncd_module": f"{PREFIX}-model",
        "ssh_key": f"/root/.ssh/{PREFIX}_{cluster}_ed25519",
        "ssh_known_hosts": f"/root/.ssh/{PREFIX}_{cluster}_known_hosts",
        "ssh_key_comment": base,
        "support_bundle_prefix": f"{base}-",
        # The monitoring stage (roles/monitoring): node exporter's textfile directory, the node's
        # plan textfile in it, and Prometheus's own config and rules of this cluster.
        "node_exporter_textfile_dir": NODE_EXPORTER_TEXTFILE_DIR,
        "plan_textfile": f"{NODE_EXPORTER_TEXTFILE_DIR}/{base}-plan.prom",
        "node_exporter_defaults": NODE_EXPORTER_DEFAULTS,
        "prometheus_defaults": PROMETHEUS_DEFAULTS,
        "prometheus_config": f"{PROMETHEUS_DIR}/{base}.yml",
        "prometheus_rules": f"{PROMETHEUS_DIR}/{base}-rules.yml",
        # The watchdog on the head (roles/watchdog): its program and the files it imports,
        # its config (rendered by the role), its state, and its support bundles (0700).
        "watchdog_dir": f"{config_dir}/watchdog",
        "watchdog_bundle": list(WATCHDOG_BUNDLE),
        "watchdog_program": f"{config_dir}/watchdog/{WATCHDOG_BUNDLE[0]}",
        "watchdog_config": f"{config_dir}/watchdog.json",
        "watchdog_state_dir": f"{state}/watchdog",
        "watchdog_state_file": f"{state}/watchdog/state.json",
        "watchdog_bundle_dir": f"{state}/watchdog/bundles",
        "watchdog_textfile": f"{NODE_EXPORTER_TEXTFILE_DIR}/{base}-watchdog.prom",
    }
    if role is not None:
        result["role"] = role
        result["ray_unit"] = units[f"ray_{role}"]
        result["ray_container"] = containers[f"ray_{role}"]
        result["ray_unit_name"] = unit_names[f"ray_{role}"]
        result["ray_unit_file"] = f"{UNIT_DIR}/{unit_names[f'ray_{role}']}"
        result["node_units"] = ([units["serve"]] if role == "head" else []) + [units[f"ray_{role}"]]
    return result
