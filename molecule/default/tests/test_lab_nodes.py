"""The lab nodes are real machines in every respect but the GPU."""

import csv
import io
import json
import os

import pytest
from testinfra.utils.ansible_runner import AnsibleRunner

testinfra_hosts = ["ansible://cluster"]


@pytest.fixture(scope="module")
def hostvars(host):
    return host.ansible.get_variables()


def test_systemd_is_running(host):
    state = host.run("systemctl is-system-running")
    assert state.stdout.strip() == "running", host.run("systemctl --failed --no-legend").stdout


def test_inner_docker_engine_is_active(host):
    assert host.service("docker").is_running
    assert host.service("docker").is_enabled
    info = host.run("docker info --format '{{json .}}'")
    assert info.rc == 0, info.stderr
    assert json.loads(info.stdout)["ServerVersion"]


def test_sshd_listens(host):
    assert host.service("ssh").is_running
    assert host.socket("tcp://0.0.0.0:22").is_listening


def test_node_has_its_address_on_both_networks(host, hostvars):
    addresses = json.loads(host.check_output("ip -j -4 addr show"))
    by_name = {link["ifname"]: [a["local"] for a in link["addr_info"]] for link in addresses}
    assert hostvars["ib_address"] in by_name.get(hostvars["ib_interface"], []), by_name
    assert any(hostvars["ansible_host"] in addrs for addrs in by_name.values()), by_name
    mtu = host.check_output(f"cat /sys/class/net/{hostvars['ib_interface']}/mtu")
    assert int(mtu) == int(hostvars["ib_mtu"])


def test_ib_peers_reachable_without_fragmenting(host, hostvars):
    """Every other node answers a don't-fragment ping sized to the MTU."""
    payload = int(hostvars["ib_mtu"]) - 28
    inventory = AnsibleRunner(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]))
    peers = [
        inventory.get_variables(name)["ib_address"]
        for name in inventory.get_hosts("cluster")
        if name != hostvars["inventory_hostname"]
    ]
    assert peers
    for peer in peers:
        ping = host.run(f"ping -c1 -W2 -M do -s {payload} {peer}")
        assert ping.rc == 0, ping.stdout + ping.stderr


def test_simulated_nvidia_smi_prints_gb10_formats(host):
    table = host.check_output("nvidia-smi")
    assert "NVIDIA GB10" in table
    assert "Not Supported" in table
    gpus = host.check_output(
        "nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv,noheader,nounits"
    )
    row = next(csv.reader(io.StringIO(gpus), skipinitialspace=True))
    assert row[1] == "NVIDIA GB10"
    assert row[2] == "[N/A]" and row[3] == "[N/A]"
    apps = host.run("nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv")
    assert apps.rc == 0
    assert apps.stdout.splitlines()[0].replace(" ", "") == "pid,process_name,used_gpu_memory[MiB]"
