#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
module: inventory_contract
short_description: Check the inventory contract of sparkops.vllm, reporting every problem at once
version_added: 0.1.0
description:
  - Stage 0 of C(deploy.yml) (role C(sparkops.vllm.validate)). Reads C(groups) and C(hostvars) on the controller and
    checks the groups C(head), C(workers), C(cluster), each host's C(ib_address), C(ib_interface), C(ib_mtu),
    C(ib_prefix), and the cluster-wide C(sparkops_*) settings.
  - Every problem is collected and all are reported together, sorted, in one failure. Each names the host (or
    C(cluster), or C(inventory)), the variable, the value and the fix. Secrets are never echoed.
  - Vaulted values stay encrypted, so validation needs no vault password.
  - An action plugin that contacts no host; run it in a play on C(localhost) with C(gather_facts) off.
    The rules live in C(plugins/module_utils/_inventory_contract.py).
author:
  - sparkops.vllm contributors
options:
  ib_mtu_min:
    description: The smallest C(ib_mtu) accepted.
    type: int
    default: 576
  ib_mtu_max:
    description: The largest C(ib_mtu) accepted.
    type: int
    default: 9216
  ib_interface_pattern:
    description: Regular expression an C(ib_interface) must match to be a Linux network interface name.
    type: str
    default: "^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$"
  ib_interface_rdma_pattern:
    description: Regular expression of RDMA device names refused as C(ib_interface).
    type: str
    default: "^(mlx[0-9]+_[0-9]+|[Rr][Oo][Cc][Ee][A-Za-z0-9]+|rxe[0-9]+)$"
  cluster_name_max_length:
    description: The longest C(sparkops_cluster_name) accepted.
    type: int
    default: 32
  ib_subnet_min_prefix:
    description: The shortest prefix length accepted for C(sparkops_ib_subnet) and C(ib_prefix).
    type: int
    default: 16
attributes:
  check_mode:
    support: full
    description: Reads only the inventory; the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    description: Never changes anything.
  action:
    support: full
"""

EXAMPLES = r"""
- name: Inventory is valid for a sparkops.vllm cluster
  sparkops.vllm.inventory_contract:
  run_once: true
"""

RETURN = r"""
problems:
  description: Every problem found, sorted; empty when the inventory is valid.
  returned: always
  type: list
  elements: str
  sample: ["spark-2: ib_address '192.168.100.13' is outside sparkops_ib_subnet 192.168.200.0/24. Fix: ..."]
msg:
  description: The failure with every problem, or the one-line summary of a valid inventory.
  returned: always
  type: str
  sample: "Inventory OK: 2 nodes (head spark-1, workers spark-2), ..."
"""
