#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
module: roce_devices_info
short_description: Find the RDMA devices behind a RoCE interface and the NCCL settings for them
version_added: 0.1.0
description:
  - Reads C(/sys/class/infiniband/*) and returns the RDMA devices whose netdev is O(interface), with their
    GID tables (C(ports/N/gids/M), C(ports/N/gid_attrs/types/M), C(ports/N/gid_attrs/ndevs/M)).
  - A device belongs to the interface when the interface is in its C(device/net/) or in the C(ndevs) of
    its GIDs.
  - On a DGX Spark every ConnectX-7 port appears twice, once per PCIe link (e.g. C(rocep1s0f1) with netdev
    C(enp1s0f1np1) and C(roceP2p1s0f1) with C(enP2p1s0f1np1)). Names that differ only in the PCI domain
    marker C(P<n>) are twins, and both are returned; NCCL reaches only about 3 GB/s over a Spark's link
    unless both are in C(NCCL_IB_HCA).
  - No C(NCCL_IB_GID_INDEX) is derived. With it unset NCCL picks the GID per device (C(ncclIbGetGidIndex) in
    NCCL's C(src/transport/net_ib.cc), v2.21.5 to v2.28.9, takes an IPv4-mapped RoCE v2 GID where the device has
    one); one index for every device is wrong on a Spark's twin, which netplan leaves without an IPv4
    address. C(nccl_gids) says what NCCL will pick on each device.
  - With O(gid_index) (an operator's pinned C(NCCL_IB_GID_INDEX)), C(pinned_gid_problems) names every listed
    device and port that has no RoCE v2 GID at that index; the caller fails on it.
  - A host without any RDMA device (such as the local lab) returns an empty C(nccl_ib_hca) and a warning,
    not a failure; NCCL then uses TCP sockets on the interface.
author:
  - sparkops.vllm contributors
options:
  interface:
    description:
      - The network interface of the RoCE port (the netdev, e.g. C(enp1s0f1np1)), the host's C(ib_interface).
    type: str
    required: true
  address:
    description:
      - The host's address on the link (C(ib_address)). Gives C(address_gid_indices), and a warning when no
        RoCE v2 GID holds it.
    type: str
  hca:
    description:
      - The C(NCCL_IB_HCA) in force when the inventory overrides the detected one (comma list); the devices
        O(gid_index) is checked on. Default the detected devices.
    type: str
  gid_index:
    description:
      - An operator's pinned C(NCCL_IB_GID_INDEX), checked on every device of O(hca).
    type: int
  sysfs_root:
    description:
      - Where sysfs is mounted. Tests point it at a fixture tree.
    type: path
    default: /sys
extends_documentation_fragment:
  - sparkops.vllm.attributes.info
notes:
  - RoCE traffic itself (UDP 4791) is handled by the adapter and never reaches the host's firewall; NCCL's
    and Gloo's TCP bootstrap does.
"""

EXAMPLES = r"""
- name: Find the RoCE devices of the ib interface
  sparkops.vllm.roce_devices_info:
    interface: "{{ ib_interface }}"
    address: "{{ ib_address }}"
  register: roce

- name: Export them to NCCL
  ansible.builtin.set_fact:
    nccl_env:
      NCCL_IB_HCA: "{{ roce.nccl_ib_hca }}"
      NCCL_SOCKET_IFNAME: "{{ roce.nccl_socket_ifname }}"
  when: roce.nccl_ib_hca | length > 0
"""

RETURN = r"""
nccl_ib_hca:
  description:
    - Every RDMA device of the interface, twins included, comma-separated for C(NCCL_IB_HCA); devices bound to
      the interface itself first. Empty when the host has none.
  returned: always
  type: str
  sample: rocep1s0f1,roceP2p1s0f1
nccl_gids:
  description:
    - Per device and port, the GID NCCL takes with C(NCCL_IB_GID_INDEX) unset; C(ipv4_roce_v2) says whether it is an
      IPv4-mapped RoCE v2 GID.
  returned: always
  type: list
  elements: dict
  sample:
    - {device: rocep1s0f1, port: 1, index: 3, gid: "::ffff:192.168.200.12", type: RoCE v2, ipv4_roce_v2: true}
    - {device: roceP2p1s0f1, port: 1, index: 0, gid: "fe80::ba3f:d2ff:fe12:3457", type: IB/RoCE v1,
       ipv4_roce_v2: false}
nccl_gid_summary:
  description: One line for the report, from C(nccl_gids).
  returned: always
  type: str
address_gid_indices:
  description: Per device, the index of the RoCE v2 GID holding O(address); devices without one are absent.
  returned: always
  type: dict
  sample: {rocep1s0f1: 3}
pinned_gid_problems:
  description: With O(gid_index), one line per listed device and port without a RoCE v2 GID at it; empty otherwise.
  returned: always
  type: list
  elements: str
nccl_socket_ifname:
  description: The interface, for C(NCCL_SOCKET_IFNAME).
  returned: always
  type: str
  sample: enp1s0f1np1
gloo_socket_ifname:
  description: The interface, for C(GLOO_SOCKET_IFNAME).
  returned: always
  type: str
  sample: enp1s0f1np1
devices:
  description: The RDMA devices of the interface, with their GID tables (empty GID slots left out).
  returned: always
  type: list
  elements: dict
  sample:
    - name: rocep1s0f1
      twin: false
      netdevs: [enp1s0f1np1]
      ports:
        - port: 1
          state: "4: ACTIVE"
          link_layer: Ethernet
          gids:
            - {index: 0, gid: "fe80::ba3f:d2ff:fe12:3456", ip: "fe80::ba3f:d2ff:fe12:3456", type: IB/RoCE v1,
               ndev: enp1s0f1np1}
            - {index: 3, gid: "::ffff:192.168.200.12", ip: 192.168.200.12, type: RoCE v2, ndev: enp1s0f1np1}
  contains:
    name: {description: The RDMA device, type: str}
    twin: {description: True for the device of the port's other PCIe link, type: bool}
    netdevs: {description: Its network interfaces, type: list, elements: str}
    ports:
      description: Per port its state, link layer and GIDs C({index, gid, ip, type, ndev}).
      type: list
      elements: dict
all_devices:
  description: Every RDMA device of the host with its netdevs, to name the right interface when none matched.
  returned: always
  type: list
  elements: dict
  sample: [{name: rocep1s0f0, netdevs: [enp1s0f0np0]}, {name: rocep1s0f1, netdevs: [enp1s0f1np1]}]
roce_present:
  description: True when the interface has at least one RDMA device.
  returned: always
  type: bool
  sample: true
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils._roce import roce_devices


def main():
    module = AnsibleModule(
        argument_spec={
            "interface": {"type": "str", "required": True},
            "address": {"type": "str"},
            "sysfs_root": {"type": "path", "default": "/sys"},
            "hca": {"type": "str"},
            "gid_index": {"type": "int"},
        },
        supports_check_mode=True,
    )
    interface = module.params["interface"]
    try:
        found = roce_devices(
            module.params["sysfs_root"],
            interface,
            module.params["address"],
            hca=module.params["hca"],
            gid_index=module.params["gid_index"],
        )
    except ValueError as exc:
        module.fail_json(
            msg=f"address {module.params['address']!r} is not an IP address ({exc}); pass ib_address."
        )
    for warning in found.pop("warnings"):
        module.warn(warning)
    module.exit_json(
        changed=False,
        nccl_socket_ifname=interface,
        gloo_socket_ifname=interface,
        roce_present=bool(found["devices"]),
        **found,
    )


if __name__ == "__main__":
    main()
