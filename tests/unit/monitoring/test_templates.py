"""The monitoring role's templates, rendered as the stage does against the lab's inventory.

The rendered scrape config is checked with ``promtool check config`` (its rule file pointed
at the role's), the ``ARGS`` files with the flags Debian's units pass on, and the plan
textfile with what the node exporter reads.
"""

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import run_local_playbook

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "monitoring"

PLAYBOOK = """
- name: Render as the stage does
  hosts: cluster
  gather_facts: false
  connection: local
  vars_files: ["{role}/defaults/main.yml", "{role}/vars/main.yml"]
  tasks:
    - name: Render the templates
      ansible.builtin.template:
        src: "{role}/templates/{{{{ item }}}}.j2"
        dest: "{{{{ out_dir }}}}/{{{{ inventory_hostname }}}}-{{{{ item }}}}"
        mode: "0600"
      loop: [prometheus.yml, prometheus.default, prometheus-node-exporter.default, plan.prom]
"""
RECORD = {"schema": 1, "sections": {"plan": {"node": {"limit_gib": 100}}}}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("monitoring")
    playbook = out / "render.yml"
    playbook.write_text(PLAYBOOK.format(role=ROLE))
    extra = {
        "out_dir": str(out),
        "ib_interface": "eth1",
        "sparkops_serve_endpoint": {"host": "0.0.0.0", "port": 8000},
        "sparkops_ray_ports": {"metrics_export": 6385},
        "__monitoring_record": {"content": base64.b64encode(json.dumps(RECORD).encode()).decode()},
    }
    run_local_playbook(playbook, extra)
    return out


def test_the_scrape_config_passes_promtool(rendered, tmp_path):
    config = yaml.safe_load((rendered / "spark-1-prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/sparkops-lab-rules.yml"]
    config["rule_files"] = [str(ROLE / "files" / "sparkops-rules.yml")]
    checked = tmp_path / "prometheus.yml"
    checked.write_text(yaml.safe_dump(config))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: run scripts/setup"
    result = subprocess.run(
        [promtool, "check", "config", str(checked)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    targets = {
        job["job_name"]: [t for group in job["static_configs"] for t in group["targets"]]
        for job in config["scrape_configs"]
    }
    assert targets == {
        # The lab's image has plain ray (no ray[default]): monitoring_scrape_ray stays off.
        "vllm": ["192.168.200.12:8000"],
        "node": ["192.168.200.12:9100", "192.168.200.13:9100"],
    }


def test_the_args_files(rendered):
    prometheus = (rendered / "spark-1-prometheus.default").read_text()
    assert prometheus.startswith("#")
    assert (
        'ARGS="--config.file=/etc/prometheus/sparkops-lab.yml --web.listen-address=192.168.200.12:9090'
        ' --storage.tsdb.retention.time=15d"'
    ) in prometheus
    exporter = (rendered / "spark-2-prometheus-node-exporter.default").read_text()
    assert (
        'ARGS="--web.listen-address=192.168.200.13:9100'
        ' --collector.textfile.directory=/var/lib/prometheus/node-exporter"'
    ) in exporter


def test_the_plan_textfile(rendered):
    text = (rendered / "spark-2-plan.prom").read_text()
    # the text format's last line ends with a newline
    assert text.endswith("\n")
    lines = text.splitlines()
    assert lines[-1] == 'sparkops_memory_plan_limit_bytes{cluster="lab"} 107374182400'
    assert all(line.startswith("#") for line in lines[:-1])
