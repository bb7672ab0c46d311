"""What the serve lifecycle (converge) left on the lab: one serve, whole Ray, the restart on record."""

import json
import os

import pytest
from testinfra.utils.ansible_runner import AnsibleRunner

testinfra_hosts = ["ansible://cluster"]

INVENTORY = AnsibleRunner(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]))
HEAD = INVENTORY.get_hosts("head")[0]
CLUSTER = "lab"
LABEL = f"io.sparkops.vllm.cluster={CLUSTER}"


@pytest.fixture(scope="module")
def name(host):
    return host.ansible.get_variables()["inventory_hostname"]


def _containers(host):
    out = host.check_output(
        f"docker ps --all --filter label={LABEL} --format '{{{{.Names}}}} {{{{.State}}}}'"
    )
    return sorted(line.split() for line in out.splitlines() if line.strip())


def test_exactly_the_cluster_containers_run(host, name):
    """No second serve or Ray container left by the stops, kills and reruns."""
    if name == HEAD:
        expected = [[f"sparkops-{CLUSTER}-ray-head", "running"], [f"sparkops-{CLUSTER}-vllm", "running"]]
    else:
        expected = [[f"sparkops-{CLUSTER}-ray-worker", "running"]]
    assert _containers(host) == expected


def test_one_vllm_main_process_on_the_head(host, name):
    if name != HEAD:
        pytest.skip("serve runs on the head")
    pids = host.check_output("pgrep -f '[v]llm serve' || true").split()
    assert len(pids) == 1, pids
    container_pid = host.check_output(f"docker inspect --format '{{{{.State.Pid}}}}' sparkops-{CLUSTER}-vllm")
    assert pids == [container_pid.strip()]


def test_the_sigkill_restart_is_on_record(host, name):
    """systemd, not Docker, brought serve back after SIGKILL (Restart=on-failure)."""
    if name != HEAD:
        pytest.skip("serve runs on the head")
    journal = host.check_output(f"journalctl --no-pager -o cat -u sparkops-{CLUSTER}-vllm --since=-2h")
    assert "code=exited, status=137" in journal
    assert "Scheduled restart job" in journal


def test_ray_lists_every_node_by_its_ib_address(host, name):
    if name != HEAD:
        pytest.skip("read on the head")
    script = (
        "import json, ray; ray.init(address='auto', log_to_driver=False); "
        "print(json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])))"
    )
    out = host.check_output(f"docker exec sparkops-{CLUSTER}-ray-head python3 -c {json.dumps(script)}")
    expected = sorted(INVENTORY.get_variables(h)["ib_address"] for h in INVENTORY.get_hosts("cluster"))
    assert json.loads(out.strip().splitlines()[-1]) == expected
