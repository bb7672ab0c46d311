"""After deploy.yml: the Ray cluster on the ib addresses and vLLM serving on the head."""

import json
import os
import sys
from pathlib import Path

import pytest
from testinfra.utils.ansible_runner import AnsibleRunner

testinfra_hosts = ["ansible://cluster"]

INVENTORY = AnsibleRunner(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]))
HEAD = INVENTORY.get_hosts("head")[0]
CLUSTER = INVENTORY.get_variables(HEAD)["sparkops_cluster_name"]
SERVED_MODEL = INVENTORY.get_variables(HEAD)["sparkops_served_model_name"]


@pytest.fixture(scope="module")
def hostvars(host):
    return host.ansible.get_variables()


def _is_head(hostvars):
    return hostvars["inventory_hostname"] == HEAD


def _unit(hostvars):
    return f"sparkops-{CLUSTER}-ray-{'head' if _is_head(hostvars) else 'worker'}"


def test_ray_unit_active_and_enabled(host, hostvars):
    unit = host.service(_unit(hostvars))
    assert unit.is_running
    assert unit.is_enabled


def test_ray_container_is_labelled_and_supervised_by_systemd(host, hostvars):
    name = _unit(hostvars)
    state = json.loads(host.check_output(f"docker inspect {name}"))[0]
    assert state["Config"]["Labels"]["io.sparkops.vllm.cluster"] == CLUSTER
    assert state["HostConfig"]["RestartPolicy"]["Name"] == "no"
    assert state["HostConfig"]["NetworkMode"] == "host"
    assert state["HostConfig"]["IpcMode"] == "host"


def test_ray_lists_every_node_by_its_ib_address(host, hostvars):
    if not _is_head(hostvars):
        pytest.skip("ray status is read on the head")
    script = (
        "import json, ray; ray.init(address='auto', log_to_driver=False); "
        "print(json.dumps([n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']]))"
    )
    out = host.check_output(f"docker exec sparkops-{CLUSTER}-ray-head python3 -c {json.dumps(script)}")
    addresses = sorted(json.loads(out.strip().splitlines()[-1]))
    expected = sorted(INVENTORY.get_variables(h)["ib_address"] for h in INVENTORY.get_hosts("cluster"))
    assert addresses == expected


def test_launch_script_holds_the_planned_flags_and_modes(host, hostvars):
    if not _is_head(hostvars):
        pytest.skip("serve runs on the head")
    script = host.file(f"/etc/sparkops/{CLUSTER}/launch.sh")
    assert script.mode == 0o750
    assert script.user == "root"
    assert "--gpu-memory-utilization" in script.content_string
    assert "--distributed-executor-backend ray" in script.content_string
    # vLLM reads VLLM_API_KEY from its environment: the key is on no command line.
    assert "--api-key" not in script.content_string
    secrets = host.file(f"/etc/sparkops/{CLUSTER}/serve-secrets.env")
    assert secrets.mode == 0o600
    api_key = INVENTORY.get_variables(HEAD).get("sparkops_api_key")
    assert "VLLM_API_KEY=" in host.check_output(f"cat /etc/sparkops/{CLUSTER}/serve-secrets.env")
    if api_key and "{{" not in str(api_key):
        assert str(api_key) not in script.content_string


def test_serve_unit_active_and_enabled(host, hostvars):
    if not _is_head(hostvars):
        pytest.skip("serve runs on the head")
    unit = host.service(f"sparkops-{CLUSTER}-vllm")
    assert unit.is_running
    assert unit.is_enabled


def test_endpoint_answers_a_completion(host, hostvars):
    if not _is_head(hostvars):
        pytest.skip("serve runs on the head")
    key = host.check_output(f"sed -n 's/^VLLM_API_KEY=//p' /etc/sparkops/{CLUSTER}/serve-secrets.env")
    body = json.dumps(
        {"model": SERVED_MODEL, "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 16}
    )
    out = host.check_output(
        "curl -sf -H 'Content-Type: application/json' -H 'Authorization: Bearer %s' "
        "-d %s http://127.0.0.1:8000/v1/chat/completions",
        key,
        body,
    )
    answer = json.loads(out)
    assert answer["choices"][0]["message"]["content"].strip()
    unauthorized = host.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/v1/models")
    assert unauthorized.stdout.strip() == "401"


def test_serve_joins_ray_at_the_heads_gcs_on_the_ib_address(host, hostvars):
    # vLLM's ray.init(address=None) takes RAY_ADDRESS first (docs/ray-binding.md): it must
    # name the GCS the head's Ray unit started on (its --port), on the head's ib address.
    if not _is_head(hostvars):
        pytest.skip("serve runs on the head")
    env = json.loads(host.check_output(f"docker inspect sparkops-{CLUSTER}-vllm"))[0]["Config"]["Env"]
    address = [e.split("=", 1)[1] for e in env if e.startswith("RAY_ADDRESS=")]
    unit = host.check_output(f"systemctl cat {_unit(hostvars)}")
    gcs_port = unit.split("--port=", 1)[1].split()[0]
    assert address == [f"{hostvars['ib_address']}:{gcs_port}"]
    assert host.run(f"timeout 3 bash -c 'exec 3<>/dev/tcp/{hostvars['ib_address']}/{gcs_port}'").rc == 0


def test_vllm_keeps_each_nodes_network_variables_on_its_workers(host, hostvars):
    # vLLM 0.17.1 copies the driver's VLLM_/NCCL_/HF_ variables to its Ray workers unless
    # ray_non_carry_over_env_vars.json in VLLM_CONFIG_ROOT names them (docs/ray-binding.md):
    # the file the serve stage wrote, as the (simulated) vLLM read it at its last start.
    if not _is_head(hostvars):
        pytest.skip("serve runs on the head")
    names = json.loads(
        host.file(f"/etc/sparkops/{CLUSTER}/vllm-config/ray_non_carry_over_env_vars.json").content_string
    )
    assert {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "VLLM_HOST_IP", "VLLM_API_KEY", "HF_TOKEN"} <= set(
        names
    )
    journal = host.check_output(f"journalctl -u sparkops-{CLUSTER}-vllm --no-pager -o cat")
    copied = [
        line
        for line in journal.splitlines()
        if "Copying the following environment variables to workers" in line
    ]
    excluded = [line for line in journal.splitlines() if "RAY_NON_CARRY_OVER_ENV_VARS from config" in line]
    assert copied and excluded
    assert "NCCL_SOCKET_IFNAME" in excluded[-1] and "NCCL_SOCKET_IFNAME" not in copied[-1]
    assert "VLLM_API_KEY" not in copied[-1] and "HF_TOKEN" not in copied[-1]


def test_deploy_ended_with_the_correctness_probe_and_recorded_its_reference(host, hostvars):
    # deploy.yml's probe after serve (roles/correctness_probe): the first run of this
    # deployment recorded the reference, keyed by what decides the answers.
    if not _is_head(hostvars):
        pytest.skip("the reference is the head's")
    # The path from the collection's one layout (plugins/module_utils/_layout.py).
    sys.path.insert(0, str(Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]) / ".collections"))
    from ansible_collections.sparkops.vllm.plugins.module_utils._layout import layout  # noqa: PLC0415

    path = layout(CLUSTER, role="head")["deployed_record"]
    record = json.loads(host.file(path).content_string)
    reference = record["sections"]["correctness"]
    serve = record["sections"]["serve"]
    assert reference["deployment_key"].startswith("sha256:")
    assert reference["inputs"]["image"] == serve["image"]
    assert reference["inputs"]["model"] == serve["model"]
    assert len(reference["answers"]) == 3
    # The record keeps each prompt's one answer (_correctness.reference_section): a reference
    # is written only from answers that were identical across the concurrent requests.
    assert all(answer["prompt"] and answer["text"] for answer in reference["answers"])
    assert all(isinstance(answer["completion_tokens"], int) for answer in reference["answers"])
    assert reference["digest"].startswith("sha256:")
