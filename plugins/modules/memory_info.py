#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
module: memory_info
short_description: Read the node's memory from /proc/meminfo, in bytes
version_added: 0.1.0
description:
  - Reads C(/proc/meminfo) and returns total, available, free, cached and swap memory in bytes.
  - Never runs C(free), whose old versions cut numbers wider than their columns on large hosts.
  - On kernels without C(MemAvailable) (before 3.14) the available memory is estimated and a warning says so.
  - On a DGX Spark (GB10) this is also the GPU's memory, which the GPU cannot report itself.
author:
  - sparkops.vllm contributors
options:
  meminfo_path:
    description:
      - The meminfo file to read.
    type: path
    default: /proc/meminfo
extends_documentation_fragment:
  - sparkops.vllm.attributes.info
"""

EXAMPLES = r"""
- name: Read memory
  sparkops.vllm.memory_info:
  register: mem

- name: Show available GiB
  ansible.builtin.debug:
    msg: "{{ (mem.memory.available_bytes / 1024 ** 3) | round(1) }} GiB available"
"""

RETURN = r"""
memory:
  description: Memory in bytes (kB values of /proc/meminfo times 1024).
  returned: success
  type: dict
  sample:
    total_bytes: 130663165952
    available_bytes: 121411960832
    free_bytes: 118843203584
    buffers_bytes: 341606400
    cached_bytes: 3840884736
    swap_total_bytes: 0
    swap_free_bytes: 0
    shmem_bytes: 29114368
    sreclaimable_bytes: 801001472
    cma_total_bytes: null
    cma_free_bytes: null
    available_estimated: false
    hugepages: {total: 0, free: 0, page_size_bytes: 2097152, reserved_bytes: 0}
  contains:
    total_bytes: {description: MemTotal, type: int}
    available_bytes: {description: MemAvailable, or an estimate when the kernel lacks it, type: int}
    free_bytes: {description: MemFree, type: int}
    buffers_bytes: {description: Buffers; null when absent, type: int}
    cached_bytes: {description: Cached (page cache); null when absent, type: int}
    swap_total_bytes: {description: SwapTotal; null when absent, type: int}
    swap_free_bytes: {description: SwapFree; null when absent, type: int}
    shmem_bytes: {description: Shmem; null when absent, type: int}
    sreclaimable_bytes: {description: SReclaimable; null when absent, type: int}
    cma_total_bytes: {description: CmaTotal; null on kernels without CMA, type: int}
    cma_free_bytes: {description: CmaFree; null on kernels without CMA, type: int}
    available_estimated:
      description: True when MemAvailable was missing and available_bytes is estimated.
      type: bool
    hugepages:
      description: >-
        Huge pages (total and free counts, page size, bytes reserved). Reserved huge pages count
        as used, so a host with many of them shows little available memory. Values are null when absent.
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils import _safe_read
from ansible_collections.sparkops.vllm.plugins.module_utils._meminfo import MeminfoError, memory_from_meminfo


def main():
    module = AnsibleModule(
        argument_spec={"meminfo_path": {"type": "path", "default": "/proc/meminfo"}},
        supports_check_mode=True,
    )
    path = module.params["meminfo_path"]
    try:
        # A FIFO or a device is refused, never waited on; a meminfo file is a few KiB.
        text = _safe_read.read_text(path, max_bytes=1024 * 1024)
    except OSError as exc:
        module.fail_json(
            msg=f"Cannot read {path}: {exc.strerror or exc}. Point meminfo_path at a readable meminfo file."
        )
    try:
        memory, warnings = memory_from_meminfo(text)
    except MeminfoError as exc:
        module.fail_json(msg=f"{path}: {exc}")
    for warning in warnings:
        module.warn(warning)
    module.exit_json(changed=False, memory=memory)


if __name__ == "__main__":
    main()
