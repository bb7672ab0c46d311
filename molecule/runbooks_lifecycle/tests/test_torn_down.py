"""After teardown.yml (twice): nothing of the cluster is left on the nodes but the model and the image."""

import fnmatch
import json
import os

import pytest
from testinfra.utils.ansible_runner import AnsibleRunner

testinfra_hosts = ["ansible://cluster"]

INVENTORY = AnsibleRunner(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]))
HEAD = INVENTORY.get_hosts("head")[0]
CLUSTER = INVENTORY.get_variables(HEAD)["sparkops_cluster_name"]
MODEL = INVENTORY.get_variables(HEAD)["sparkops_model_path"]
UNITS = [
    f"sparkops-{CLUSTER}-{name}.service"
    for name in ("ray-head", "ray-worker", "vllm", "ray-firewall", "monitoring-firewall")
]
SHM_PATTERNS = ["plasma*", "ray_*", "nccl-*", "torch_*", "vllm*", "psm_*", "sem.mp-*", "sem.loky-*"]


def test_no_unit_of_the_cluster_is_left(host):
    for unit in UNITS:
        assert not host.file(f"/etc/systemd/system/{unit}").exists, unit
        load_state = host.check_output(f"systemctl show --property=LoadState --value {unit}")
        assert load_state == "not-found", unit


def test_the_labs_own_units_are_untouched(host):
    # The lab's boot units share the sparkops-<cluster>- prefix; teardown must not take them.
    assert host.service(f"sparkops-{CLUSTER}-ifnames").is_running


def test_no_container_of_the_cluster_is_left(host):
    out = host.check_output(f"docker ps --all --quiet --filter label=io.sparkops.vllm.cluster={CLUSTER}")
    assert out == ""


def test_bystander_container_untouched(host):
    if host.backend.get_hostname() == HEAD:
        pytest.skip("the bystander was planted on the worker")
    state = json.loads(host.check_output("docker inspect metrics-exporter"))[0]
    assert state["State"]["Running"] is True


def test_config_state_and_ray_session_directories_are_gone(host):
    for path in (f"/etc/sparkops/{CLUSTER}", f"/var/lib/sparkops/{CLUSTER}", "/etc/sparkops/model-sync"):
        assert not host.file(path).exists, path


def test_no_shm_leftovers_and_other_segments_kept(host):
    names = host.check_output("ls -A /dev/shm").split()
    assert [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in SHM_PATTERNS)] == []
    assert "other-app-molecule" in names


def test_no_firewall_chain_of_the_cluster_is_left(host):
    rules = host.check_output("iptables -w 10 -S")
    assert f"sparkops {CLUSTER} ray ports" not in rules
    assert f"SPARKOPS-RAY-{CLUSTER}" not in rules
    assert f"sparkops {CLUSTER} monitoring ports" not in rules
    assert f"SPARKOPS-MON-{CLUSTER}" not in rules


def test_the_cluster_ssh_key_is_gone(host):
    if host.backend.get_hostname() == HEAD:
        assert not host.file(f"/root/.ssh/sparkops_{CLUSTER}_ed25519").exists
    else:
        keys = host.file("/root/.ssh/authorized_keys2")
        assert not keys.exists or f"sparkops-{CLUSTER}" not in keys.content_string


def test_model_kept(host):
    assert host.file(MODEL).exists
    assert host.check_output(f"find -L {MODEL} -name '*.safetensors' | wc -l") != "0"


def test_image_kept(host):
    images = host.check_output("docker images --format '{{.Repository}}:{{.Tag}}'").split()
    assert any(image.startswith("sparkops/vllm-lab:") for image in images), images
