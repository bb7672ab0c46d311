#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
module: roce_firewall_info
short_description: Find what the node's firewall drops of a cluster's traffic from the RoCE subnet
version_added: 0.1.0
description:
  - Reads the firewall (C(nft -j list ruleset), or C(iptables-save -t filter) where nft is not installed, and
    C(ufw status verbose)) and evaluates, for each port the cluster needs, a new TCP connection (and an ICMP
    echo) from O(subnet) arriving on O(interface).
  - nftables runs every base chain hooked at input, and an accept ends only the chain it is in while a drop
    ends the packet; so the traffic is blocked when any base input chain drops it.
  - A block is C(policy) (the chain's default policy drops it) or C(rule) (an explicit drop or reject rule
    matches the cluster's traffic). Rules with matches this module cannot read are not trusted to accept;
    drops among them are reported with C(certain=false).
  - An active firewall that drops these ports hangs Ray, NCCL and Gloo silently.
author:
  - sparkops.vllm contributors
options:
  subnet:
    description: The RoCE subnet the peers' traffic comes from (C(sparkops_ib_subnet)).
    type: str
    required: true
  interface:
    description: The interface it arrives on (C(ib_interface)).
    type: str
    required: true
  ray_ports:
    description: Ray's ports by name, each a port or a range C(lo-hi) (C(roce_network_ray_ports)).
    type: dict
    required: true
  ssh_port:
    description: The SSH port (rsync of the model runs over SSH on the ib address).
    type: int
    default: 22
  port_range_path:
    description: Where the kernel's ephemeral port range is read; NCCL, Gloo and torch listen in it.
    type: path
    default: /proc/sys/net/ipv4/ip_local_port_range
extends_documentation_fragment:
  - sparkops.vllm.attributes.info
"""

EXAMPLES = r"""
- name: Find what the firewall drops of the cluster's traffic
  sparkops.vllm.roce_firewall_info:
    subnet: "{{ sparkops_ib_subnet }}"
    interface: "{{ ib_interface }}"
    ray_ports: "{{ roce_network_ray_ports }}"
  register: firewall

- name: Fail on a block
  ansible.builtin.fail:
    msg: "{{ firewall.blocks | map(attribute='rule') | join('; ') }}"
  when: firewall.blocked
"""

RETURN = r"""
source:
  description: Where the rules were read from, C(nftables) or C(iptables); V(null) without either tool.
  returned: always
  type: str
  sample: nftables
ufw_active:
  description: True when ufw manages the firewall (it is then the way to open ports).
  returned: always
  type: bool
  sample: false
blocked:
  description: True when anything the cluster needs is dropped.
  returned: always
  type: bool
  sample: true
blocks:
  description: Each service dropped, and by what.
  returned: always
  type: list
  elements: dict
  sample:
    - {service: Ray gcs, proto: tcp, ports: "6379", family: ip, table: filter, chain: INPUT, kind: rule,
       rule: "-A INPUT -s 192.168.200.0/24 -j DROP", certain: true}
explicit:
  description: The C(blocks) made by explicit rules (never opened by the role).
  returned: always
  type: list
  elements: dict
policy_chains:
  description: Base chains whose default policy drops the traffic, C({family, table, chain, iptables}).
  returned: always
  type: list
  elements: dict
  sample: [{family: ip, table: filter, chain: INPUT, iptables: true}]
services:
  description: The services checked, C({name, proto, ports}).
  returned: always
  type: list
  elements: dict
tcp_ranges:
  description: Every TCP port needed, merged, in iptables multiport form.
  returned: always
  type: list
  elements: str
  sample: ["22", "6379:6385", "8265", "10001:10999", "32768:60999"]
tcp_nft:
  description: The same in nftables set form.
  returned: always
  type: str
  sample: 22, 6379-6385, 8265, 10001-10999, 32768-60999
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils import _roce


def _run(module, name, args):
    path = module.get_bin_path(name, opt_dirs=["/usr/sbin", "/sbin"])
    if path is None:
        return None
    rc, out, err = module.run_command([path, *args], environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.warn(f"{name} {' '.join(args)} failed (rc {rc}): {err.strip()}; its rules are not evaluated.")
        return None
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "subnet": {"type": "str", "required": True},
            "interface": {"type": "str", "required": True},
            "ray_ports": {"type": "dict", "required": True},
            "ssh_port": {"type": "int", "default": 22},
            "port_range_path": {"type": "path", "default": "/proc/sys/net/ipv4/ip_local_port_range"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        with open(params["port_range_path"], encoding="utf-8") as handle:
            port_range = handle.read()
    except OSError as exc:
        module.fail_json(msg=f"Cannot read {params['port_range_path']}: {exc}.")
    nft = _run(module, "nft", ["-j", "list", "ruleset"])
    iptables = None if nft else _run(module, "iptables-save", ["-t", "filter"])
    ufw = _run(module, "ufw", ["status", "verbose"]) if os.geteuid() == 0 else None
    try:
        services = _roce.cluster_services(params["ray_ports"], port_range, params["ssh_port"])
        found = _roce.firewall_blocks(
            services,
            params["subnet"],
            params["interface"],
            nft_json=nft,
            iptables_save=iptables,
            ufw_status=ufw,
        )
    except ValueError as exc:
        module.fail_json(msg=f"Cannot evaluate the firewall: {exc}. Check subnet and ray_ports.")
    module.exit_json(changed=False, **_roce.firewall_summary(found, services))


if __name__ == "__main__":
    main()
