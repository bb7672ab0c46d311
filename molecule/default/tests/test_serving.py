"""After deploy.yml: the Ray cluster on the ib addresses and vLLM serving on the head."""

import json
import os

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
