"""After deploy.yml: every node's RoCE link is as stage 2 (roce_network) left it."""

import ipaddress
import json
import os

import pytest
from testinfra.utils.ansible_runner import AnsibleRunner

testinfra_hosts = ["ansible://cluster"]


@pytest.fixture(scope="module")
def hostvars(host):
    return host.ansible.get_variables()


@pytest.fixture(scope="module")
def peers(hostvars):
    inventory = AnsibleRunner(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]))
    return {
        name: inventory.get_variables(name)["ib_address"]
        for name in inventory.get_hosts("cluster")
        if name != hostvars["inventory_hostname"]
    }


def test_ib_interface_holds_ib_address_with_the_subnet_prefix_and_mtu(host, hostvars):
    link = json.loads(host.check_output(f"ip -j addr show dev {hostvars['ib_interface']}"))[0]
    prefix = ipaddress.ip_network(hostvars["sparkops_ib_subnet"]).prefixlen
    held = {(a["local"], a["prefixlen"]) for a in link["addr_info"] if a["family"] == "inet"}
    assert (hostvars["ib_address"], prefix) in held, held
    assert link["mtu"] == int(hostvars["ib_mtu"])


def test_stage_check_passes_df_ping_at_mtu_to_every_peer(host, hostvars, peers):
    size = int(hostvars["ib_mtu"]) - 28
    assert peers
    for name, address in peers.items():
        ping = host.run(f"ping -n -M do -s {size} -c 1 -W 2 -I {hostvars['ib_interface']} {address}")
        assert ping.rc == 0, f"{name}: {ping.stdout}{ping.stderr}"


def test_no_firewall_drops_the_ib_subnet(host):
    rules = host.check_output("iptables -S INPUT")
    assert "-P INPUT ACCEPT" in rules
    assert " -j DROP" not in rules and " -j REJECT" not in rules


def test_lab_has_no_roce_device_so_nccl_uses_sockets_on_ib_interface(host, hostvars):
    result = host.ansible(
        "sparkops.vllm.roce_devices_info",
        f"interface={hostvars['ib_interface']} address={hostvars['ib_address']}",
        check=False,
    )
    assert result["nccl_ib_hca"] == ""
    assert result["nccl_socket_ifname"] == result["gloo_socket_ifname"] == hostvars["ib_interface"]
    assert result["roce_present"] is False
