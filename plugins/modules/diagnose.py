#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

from __future__ import annotations

DOCUMENTATION = r"""
---
module: diagnose
short_description: Find the root cause of a failed vLLM, Ray, NCCL or driver start in its logs
version_added: 0.1.0
description:
  - Reads vLLM, Ray, NCCL, torch.distributed and nvidia-smi output as it really arrives (nested
    process prefixes such as C(EngineCore_DP0 pid=1) and C(RayWorkerWrapper pid=2, ip=10.0.0.2) in
    parentheses, ANSI colours,
    terminal-wrapped lines, Ray's C([repeated 30x across cluster]), pytest's C(E) marker, syslog and
    docker timestamps) and reports what went wrong, root cause first.
  - Findings follow a documented precedence table (see C(docs/diagnose.md)). V(engine_core_init_failed) is
    only a wrapper and is reported only when nothing above explains it.
  - Each finding's O(findings[].fix) names the sparkops.vllm setting to change, not only the raw vLLM flag.
  - Files are streamed in blocks in constant memory; a 100 MB log takes seconds. A line longer than
    64 KiB (a newline-free file) is cut there, so memory stays bounded and line numbers still match.
  - Only regular files are read; a FIFO, a device or a directory fails with its name, without blocking.
  - The same parser runs without Ansible as C(sparkops diagnose FILE... [--json] [--context FILE]).
  - The module reads files on the managed node and changes nothing.
author:
  - sparkops.vllm contributors
options:
  content:
    description:
      - The log text itself.
      - Mutually exclusive with O(paths).
    type: str
  paths:
    description:
      - Log files on the managed node, read in the order given. Findings span all files; each evidence item
        carries the file's path.
      - Mutually exclusive with O(content).
    type: list
    elements: path
  context:
    description:
      - What the inventory knows, to sharpen findings. Every key is optional.
      - V(hosts) maps each inventory host name to
        C({ib_address, ib_interface, management_addresses, ansible_host}).
        An address found in the log is named after its host, and a Ray node IP that is a management address
        is reported as such (C(that is spark-1's management address, not its ib_address 192.168.200.12)).
      - V(host) is the host name for lines that do not name one (a log taken from one node).
      - V(path_hosts) maps a path in O(paths) to the host it was taken from.
      - V(memory_plan) is the return of C(sparkops.vllm.memory_plan) (C(gpu_memory_utilization), C(fits),
        C(peak_gib), C(limit_gib)); memory findings then quote its recommendation.
      - V(settings) holds the current C(sparkops_*) values (for example C(sparkops_gpu_memory_utilization),
        C(sparkops_tensor_parallel_size)), quoted in summaries and fixes.
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    description: The module only reads; it behaves the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  idempotent:
    support: full
    description: The module never changes anything; the same input gives the same findings.
  platform:
    support: full
    platforms: posix
    description: Runs wherever Python runs; it only reads the files or text it is given.
notes:
  - Line numbers count physical lines from 1 per file, as C(grep -n) shows them. A phrase a terminal wrapped
    over two lines is reported at the first of them.
  - Evidence is capped at a few distinct lines per finding; the summary says how many lines matched.
seealso:
  - name: Failure diagnosis
    description: The finding table, the precedence table and how to run the parser on files.
    link: https://example.invalid/sparkops/vllm/docs/diagnose.md
"""

EXAMPLES = r"""
- name: Diagnose the vLLM serve log on the head
  sparkops.vllm.diagnose:
    paths:
      - /var/log/sparkops/vllm-serve.log
  register: __diagnosis

- name: Diagnose the journal of the serve unit, with the inventory's addresses
  sparkops.vllm.diagnose:
    content: "{{ __serve_journal.stdout }}"
    context:
      host: "{{ inventory_hostname }}"
      hosts:
        spark-1:
          ib_address: 192.168.200.12
          management_addresses:
            - 10.1.230.180
        spark-2:
          ib_address: 192.168.200.13
      memory_plan: "{{ __memory_plan }}"

- name: Stop with the root cause and its fix
  ansible.builtin.fail:
    msg: "{{ __diagnosis.findings[0].summary }} Fix: {{ __diagnosis.findings[0].fix }}"
  when: __diagnosis.root_cause is not none
"""

RETURN = r"""
findings:
  description:
    - What went wrong, root causes first (in the order of the precedence table).
    - A clean startup log gives no finding of severity V(error).
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: The finding id.
      type: str
      sample: ray_oom_kill
      choices:
        - nvidia_driver_unavailable
        - ray_node_ip_mismatch
        - gloo_interface
        - nccl_socket_connect_failed
        - nccl_ib_error
        - ray_placement_unsatisfiable
        - ray_oom_kill
        - cuda_graph_capture_oom
        - startup_memory_short
        - kv_cache_insufficient
        - cuda_oom
        - nccl_collective_timeout
        - engine_core_init_failed
    severity:
      description: V(error), V(warning) or V(info).
      type: str
      sample: error
    phase:
      description:
        - On a memory kill (V(ray_oom_kill), V(cuda_oom), V(cuda_graph_capture_oom),
          V(uma_driver_out_of_memory)), the startup phase it hit, from vLLM's lines above it in the same
          log. Absent when the log does not say.
      type: str
      returned: when known
      choices: [weight_loading, graph_capture]
      sample: weight_loading
    summary:
      description: What happened, with the figures and hosts the log gave.
      type: str
      sample: >-
        Ray's memory monitor killed a worker on spark-1: node 192.168.200.12 used 113.78 / 119.70 GB (95.05%),
        over the threshold 0.95.
    fix:
      description: What to change, naming the sparkops.vllm setting.
      type: str
      sample: >-
        Set `sparkops_ray_memory_monitor: false` (sets RAY_memory_monitor_refresh_ms=0; earlyoom stays as the
        guard against a real out-of-memory) or raise `sparkops_ray_memory_threshold`, ...
    evidence:
      description: The log lines that show it (a few distinct ones).
      type: list
      elements: dict
      sample:
        - line: 412
          text: "Memory on the node (IP: 192.168.200.12, ID: 5bf8) where the task ... was running was ..."
          host: spark-1
          path: /var/log/sparkops/vllm-serve.log
root_cause:
  description: The id of the first finding when it is an error, else null.
  returned: always
  type: str
  sample: ray_oom_kill
explained:
  description:
    - Which findings are explained by which (from the precedence table). C(reported) is false for a wrapper
      that was left out of O(findings) because a root cause explains it.
  returned: always
  type: list
  elements: dict
  sample:
    - id: engine_core_init_failed
      explained_by: [ray_oom_kill]
      reported: false
memory:
  description:
    - vLLM's memory figures seen in the log, in the shape C(sparkops.vllm.memory_plan) takes as C(measured)
      (C(weights_gib), C(kv_cache_gib), C(cuda_graph_gib), C(kv_cache_tokens), ...). They never make a finding
      on their own; summaries quote them.
  returned: always
  type: dict
  sample:
    kv_cache_gib: 49.12
    weights_gib: 58.9
lines_read:
  description: Physical lines read.
  returned: always
  type: int
  sample: 18231
paths:
  description: The files read, in order.
  returned: always
  type: list
  elements: str
  sample: [/var/log/sparkops/vllm-serve.log]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose import (
    diagnose_paths,
    diagnose_text,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "content": {"type": "str"},
            "paths": {"type": "list", "elements": "path"},
            "context": {"type": "dict", "default": {}},
        },
        mutually_exclusive=[("content", "paths")],
        required_one_of=[("content", "paths")],
        supports_check_mode=True,
    )
    params = module.params
    if params["paths"] is not None:
        try:
            result = diagnose_paths(params["paths"], params["context"])
        except OSError as exc:
            module.fail_json(
                msg=f"Cannot read {exc.filename}: {exc.strerror}. Give regular log files that exist on the managed node, "
                "or pass the log text as content.",
                paths=params["paths"],
            )
    else:
        result = diagnose_text(params["content"], params["context"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
