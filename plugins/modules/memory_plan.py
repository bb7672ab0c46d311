#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
---
module: memory_plan
short_description: Plan vLLM's memory on unified-memory (DGX Spark) and discrete GPUs
version_added: 0.1.0
description:
  - Pure computation, nothing on the node changes. It models how vLLM V1 budgets memory and
    checks the result against Ray's memory monitor, then evaluates a given
    C(gpu_memory_utilization) or recommends the largest one that fits.
  - vLLM claims O(gpu_memory_utilization) x O(memory_total_gib). Inside the claim, per rank, are
    the shard's weights, the activation peak of the profiling run, the non-torch memory (NCCL
    buffers, cuBLAS workspaces) and, from vLLM 0.21, the estimated CUDA-graph memory; the KV cache
    gets the rest.
  - Outside the claim are the CUDA context and, before vLLM 0.21, the CUDA graphs captured after
    the KV cache is allocated (the graph-capture peak).
  - On unified memory (GB10) all of it is system memory. The peak is memory used before launch
    (MemTotal - MemAvailable) + CUDA context + claim + graphs outside the claim + Ray and vLLM host
    processes; Ray kills a worker above O(ray_memory_threshold) x O(system_memory_total_gib).
  - On discrete GPUs the peak is checked against the device's memory, and Ray's monitor against
    host memory.
  - The formula, every default and its source, and a worked example are in docs/memory-plan.md.
  - The file-reading inputs O(model_path) and O(model_config_path) are read on the managed node.
author:
  - sparkops.vllm contributors
attributes:
  check_mode:
    support: full
    description: Computes the same plan in check mode; nothing is ever changed.
  diff_mode:
    support: none
  idempotent:
    support: full
    description: Always returns C(changed=false).
options:
  weights_gib:
    description:
      - Total size of all weight files, in GiB (2**30 bytes). Hugging Face shows decimal GB,
        so 119 GB is 110.83 GiB.
      - One of O(weights_gib), O(model_path) or O(measured.weights_gib) is required.
    type: float
  model_path:
    description:
      - Directory whose weight files (C(*.safetensors), C(*.bin), C(*.pt), C(*.pth), C(*.gguf))
        are summed, links followed and each file counted once. A Hugging Face cache folder
        (C(models--org--name)) is read at the snapshot C(refs/main) names.
      - Its C(config.json), when present, gives the KV bytes per token unless
        O(model_config_path) or O(kv_cache_bytes_per_token) is given.
    type: path
  tensor_parallel_size:
    description: vLLM's C(--tensor-parallel-size).
    type: int
    default: 1
  pipeline_parallel_size:
    description: vLLM's C(--pipeline-parallel-size). Weights split over TP x PP ranks.
    type: int
    default: 1
  memory_total_gib:
    description:
      - The memory total vLLM sees on this node's GPU (cudaMemGetInfo). On a GB10 it is about
        MemTotal (121.7 GiB on a 121.69 GiB MemTotal box); on a discrete GPU the device's memory.
    type: float
    required: true
  memory_available_gib:
    description:
      - MemAvailable of this node before launch, in GiB. MemTotal minus it is the memory the OS
        and other processes already use. Without it the plan assumes nothing else uses memory.
    type: float
  memory_free_gib:
    description:
      - Free memory CUDA will report when vLLM starts, MemFree on unified memory (page cache
        counts as used), the device's free memory on a discrete GPU.
      - On unified memory it is only used for the page-cache risk of vLLM before about 0.12,
        whose startup check read it; later releases read MemAvailable there.
    type: float
  system_memory_total_gib:
    description:
      - MemTotal in GiB, the total Ray's memory monitor compares against. Defaults to
        O(memory_total_gib) on unified memory; on discrete GPUs, without it the host-memory check
        is skipped. Ray prints its figures in GiB labelled C(GB).
    type: float
  unified_memory:
    description: True for GB10-class devices whose GPU memory is system memory.
    type: bool
    default: true
  node_role:
    description:
      - C(head) also runs the Ray GCS, dashboard, vLLM's API server and EngineCore, so its
        O(ray_reserve_gib) default is larger.
    type: str
    choices: [head, worker]
    default: head
  gpu_memory_utilization:
    description:
      - A value in (0, 1] to evaluate. Left out, the plan recommends the largest value (rounded
        down to 0.01) whose peak stays O(safety_margin_gib) under the limit and whose KV cache
        still holds O(max_model_len) tokens.
    type: float
  cuda_graphs:
    description: False plans for C(--enforce-eager) (no CUDA graphs).
    type: bool
    default: true
  cuda_graph_memory_profiled:
    description:
      - Whether vLLM estimates CUDA-graph memory into the claim (default from vLLM 0.21). Left
        out, it follows O(vllm_version); with neither, the graphs are assumed outside the claim.
      - False with vLLM 0.21+ adds C(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0) to RV(env).
    type: bool
  vllm_version:
    description: vLLM's version, for example C(0.17.1rc1).
    type: str
  activation_reserve_gib:
    description:
      - Activation peak of the profiling run per rank, in GiB. Default 2.0 (fixture 28's 1.4 GiB
        rounded up for a GB10 MoE; with the non-torch default 4.00 GiB, over the 3.20 GiB the
        seed implies on GB10). O(measured.activation_gib) overrides it.
    type: float
  non_torch_reserve_gib:
    description:
      - Non-torch memory per rank inside the claim (cuBLAS workspaces; on unified memory also the
        growth of other memory while vLLM profiles). NCCL's communicators are not in it (see
        O(nccl_reserve_gib)). Default 2.0 on unified memory (the seed's 3.20 GiB of activation
        plus non-torch, rounded up with the activation default), 0.5 on discrete GPUs (fixture 28
        measured 0.21). O(measured.non_torch_gib) overrides it.
    type: float
  cuda_graph_reserve_gib:
    description:
      - CUDA-graph memory per rank. Default 3.5 (fixture 28, "Graph capturing finished in 53 secs,
        took 3.45 GiB"). O(measured.cuda_graph_gib) overrides it.
    type: float
  cuda_context_reserve_gib:
    description:
      - CUDA context, created before vLLM's baseline snapshot and so outside the claim. Default
        0.5 (fixture 28, free 43.93 of 44.42 GiB at the snapshot).
    type: float
    default: 0.5
  nccl_reserve_gib:
    description:
      - NCCL's communicators per rank (vLLM's pynccl one and torch's process group), created before
        vLLM's startup snapshot (vllm/v1/worker/gpu_worker.py C(init_device), 0.12 to 0.34) and so
        outside the claim, like the CUDA context. Default 1.0 when TP x PP > 1, else 0; an estimate
        (vLLM pull request 45517 reports 1-2 GiB on rank 0); vLLM logs no figure for it.
    type: float
  ray_reserve_gib:
    description:
      - Host memory of Ray's processes and vLLM's host-side processes on this node. Default 3.0 on
        the head (GCS, raylet, dashboard, API server, EngineCore, GPU worker), 1.5 on a worker
        (raylet, agent, GPU worker). Estimates; measure with C(ps -eo rss,cmd) and override.
    type: float
  ray_memory_threshold:
    description: Ray's C(memory_usage_threshold).
    type: float
    default: 0.95
  ray_memory_monitor:
    description:
      - False plans with Ray's memory monitor off; RV(env) then carries
        C(RAY_memory_monitor_refresh_ms=0), earlyoom guards the node (RV(earlyoom_args)), and
        the limit becomes earlyoom's SIGTERM threshold, MemTotal less O(earlyoom_term_percent).
    type: bool
    default: true
  earlyoom_term_percent:
    description:
      - earlyoom's C(-m PERCENT) with Ray's monitor off; SIGTERM once less than this percentage
        of memory is available. The plan keeps its peak under MemTotal less this percentage
        (less O(safety_margin_gib)), and RV(earlyoom_args) carries the same figure.
    type: float
    default: 4.0
  earlyoom_kill_percent:
    description: earlyoom's C(KILL_PERCENT) (SIGKILL), at most O(earlyoom_term_percent).
    type: float
    default: 2.0
  drop_caches:
    description:
      - On unified memory, drop the page cache right before the memory is claimed (RV(drop_caches);
        the Ray and serve units do it in their C(ExecStartPre)). The driver does not reliably
        reclaim page cache for GPU allocations on a GB10.
    type: bool
    default: true
  load_reserve_gib:
    description:
      - Memory per rank that weight post-processing (FP8/NVFP4 MoE conversion) holds on top of the
        weights while they load, before the KV cache exists (vLLM pull request 45179). The load-time peak
        (used before launch, CUDA context, Ray and host processes, weights and this) is checked
        against the same limit as the graph-capture peak. Default 3.0, an estimate.
    type: float
  running_stack_host_gib:
    description:
      - On a rerun, host memory this cluster's own running containers hold. MemTotal minus
        MemAvailable already holds it and it comes back when they restart, so it is added back
        like their GPU memory. Wins over O(running_stack_label).
    type: float
  running_stack_label:
    description:
      - C(key=value) label of this cluster's containers. When given (and O(running_stack_host_gib)
        is not), the module reads the host memory the running containers with this label hold from
        their memory cgroups, v1 or v2, less their reclaimable page cache (the file LRU lists, not
        C(file), which counts /dev/shm), and adds it back; RV(running_stack) says what it read.
      - Containers are found from every PID's C(/proc/<pid>/cgroup) and Docker's inspect of each.
    type: str
  proc_root:
    description: Where C(/proc) is read from (tests point it at a fixture tree).
    type: path
    default: /proc
  cgroup_root:
    description: Where the cgroup file system is mounted (tests point it at a fixture tree).
    type: path
    default: /sys/fs/cgroup
  safety_margin_gib:
    description: Headroom kept under the limit when recommending a utilization.
    type: float
    default: 1.0
  max_model_len:
    description: vLLM's C(--max-model-len); the KV cache must hold one sequence of this length.
    type: int
  max_num_seqs:
    description: vLLM's C(--max-num-seqs), passed through to RV(vllm_args).
    type: int
  kv_cache_bytes_per_token:
    description:
      - KV bytes one token takes on one rank at this O(tensor_parallel_size). Wins over a config.
    type: int
  model_config_path:
    description:
      - The model's C(config.json), to derive KV bytes per token. Only layers with a KV cache
        count (C(layer_types), C(full_attention_interval), C(hybrid_override_pattern) in hybrid
        models); per layer 2 x kv_heads_per_rank x head_dim x dtype bytes.
    type: path
  kv_cache_dtype:
    description: vLLM's C(--kv-cache-dtype); C(auto) uses the model's dtype.
    type: str
    default: auto
  measured:
    description:
      - Per-rank figures from the previous start's log; each overrides its default.
      - Keys C(weights_gib), C(activation_gib), C(non_torch_gib), C(cuda_graph_gib); the output of
        the parser (C(plugins/module_utils/_vllm_memory_log.py)) can be passed as is, other keys
        are ignored.
    type: dict
    default: {}
  measured_log:
    description:
      - Text of a previous vLLM start's log. Its memory lines are parsed into O(measured)
        (explicit O(measured) keys win), and a v0.21+ log sets O(cuda_graph_memory_profiled).
    type: str
notes:
  - Measured values are per rank at the same TP and PP as the plan.
seealso:
  - name: The memory plan, formula and sources
    description: docs/memory-plan.md in this collection.
    link: https://example.invalid/sparkops/vllm/docs/memory-plan.md
"""

EXAMPLES = r"""
- name: Evaluate the seed deployment (vLLM 0.17, two DGX Sparks, utilization 0.90)
  sparkops.vllm.memory_plan:
    weights_gib: 110.83
    tensor_parallel_size: 2
    memory_total_gib: 121.7
    system_memory_total_gib: 119.70
    memory_available_gib: 117.7
    gpu_memory_utilization: 0.90
    vllm_version: 0.17.1rc1
  register: __plan

- name: Recommend a utilization from the model folder and the last start's log
  sparkops.vllm.memory_plan:
    model_path: /models/Qwen3.5-122B-A10B-FP8
    tensor_parallel_size: 2
    memory_total_gib: "{{ (memory.total_bytes / 1073741824) | round(2) }}"
    memory_available_gib: "{{ (memory.available_bytes / 1073741824) | round(2) }}"
    memory_free_gib: "{{ (memory.free_bytes / 1073741824) | round(2) }}"
    node_role: "{{ 'head' if inventory_hostname in groups['head'] else 'worker' }}"
    max_model_len: 32768
    vllm_version: 0.17.1rc1
    measured_log: "{{ lookup('ansible.builtin.file', 'logs/vllm-last-start.log') }}"
  register: __plan

- name: Stop before launch when the plan does not fit
  ansible.builtin.assert:
    that: __plan.fits
    fail_msg: >-
      {{ __plan.reasons | join('; ') }}.
      Levers: {{ __plan.levers | map(attribute='detail') | join('; ') }}
"""

RETURN = r"""
running_stack:
  description:
    - What O(running_stack_label) read, null without it. C(gib) is what was added back;
      C(containers) maps each container to its C(bytes) and C(cgroup) (C(v1:path) or C(v2:path));
      C(warnings) names containers whose cgroup could not be read (they add nothing).
  returned: always
  type: dict
  sample: {bytes: 1288490188, gib: 1.2, containers: {sparkops-spark-vllm-ray-head: {bytes: 1288490188, cgroup: "v2:/system.slice/docker-0a1b.scope"}}, warnings: []}
gpu_memory_utilization:
  description: The evaluated or recommended utilization; null when none fits.
  returned: always
  type: float
  sample: 0.85
recommended_gpu_memory_utilization:
  description:
    - The largest utilization that fits with the safety margin, also when one was given; null if none.
  returned: always
  type: float
  sample: 0.85
kv_cache_gib:
  description: KV cache per rank at that utilization.
  returned: always
  type: float
  sample: 43.03
kv_cache_memory_bytes:
  description: The same in bytes, for C(--kv-cache-memory-bytes).
  returned: always
  type: int
  sample: 46202394009
kv_cache_tokens:
  description: KV cache in tokens (whole 16-token blocks); null when bytes per token are unknown.
  returned: always
  type: int
  sample: 3760128
kv_cache_bytes_per_token:
  description: KV bytes per token on one rank, given or derived from the config.
  returned: always
  type: int
  sample: 12288
max_concurrency:
  description: KV tokens divided by max_model_len; null when either is unknown.
  returned: always
  type: float
  sample: 14.34
peak_gib:
  description: Memory peak at graph capture (system memory on unified, device memory on discrete GPUs).
  returned: always
  type: float
  sample: 112.44
limit_gib:
  description:
    - What the peak is compared with. Ray's threshold x MemTotal on unified memory; with Ray's
      monitor off earlyoom's SIGTERM threshold, MemTotal less O(earlyoom_term_percent); the
      device's total on discrete GPUs.
  returned: always
  type: float
  sample: 113.72
fits:
  description: True when the peak, vLLM's startup check, the KV need and Ray's host check all pass.
  returned: always
  type: bool
  sample: true
reasons:
  description: The verdict in plain words, failing checks first.
  returned: always
  type: list
  elements: str
  sample:
    - "the graph-capture peak of 118.53 GiB is over Ray's memory-monitor limit 113.72 GiB
      (0.95 x 119.70 GiB MemTotal) by 4.81 GiB"
risks:
  description: Things that may still go wrong (page cache on unified memory, defaults in use, the monitor off).
  returned: always
  type: list
  elements: str
  sample: ["page cache: vLLM 0.17.1 reads MemAvailable at its startup check on an integrated GPU, ..."]
vllm_args:
  description: vLLM argv items for the plan; empty when nothing fits.
  returned: always
  type: list
  elements: str
  sample: ["--gpu-memory-utilization", "0.85", "--max-model-len", "32768"]
vllm_args_kv_cache_memory_bytes:
  description: The alternative argv, fixing the KV cache size in bytes instead of a utilization.
  returned: always
  type: list
  elements: str
  sample: ["--kv-cache-memory-bytes", "46202394009", "--max-model-len", "32768"]
env:
  description: Environment for the Ray and vLLM containers that the plan depends on.
  returned: always
  type: dict
  sample: {"RAY_memory_monitor_refresh_ms": "0"}
earlyoom_args:
  description:
    - With Ray's monitor off, C(EARLYOOM_ARGS) for C(/etc/default/earlyoom), from the same
      percentages as RV(limit_gib); it prefers Ray's GPU workers and vLLM's engine and avoids
      sshd, systemd, Docker and Ray's head processes. Null while Ray's monitor is on.
  returned: always
  type: str
  sample: "-m 4,2 -s 100,100 -r 0 --prefer '^(ray::RayWorkerW.*|VLLM::.*|vllm|pt_main_thread)$' --avoid '...'"
drop_caches:
  description: Whether the units drop the page cache before start (unified memory and O(drop_caches)).
  returned: always
  type: bool
  sample: true
cuda_graph_memory_profiled:
  description: Whether the plan put CUDA-graph memory inside the claim.
  returned: always
  type: bool
  sample: false
breakdown:
  description: Every term of the plan in GiB and where each came from (C(sources)).
  returned: always
  type: dict
  sample: {"claim_gib": 109.53, "weights_gib": 55.41, "activation_gib": 2.0, "non_torch_gib": 3.0,
           "kv_cache_gib": 49.12, "cuda_graph_outside_claim_gib": 3.5, "cuda_context_gib": 0.5,
           "used_before_launch_gib": 2.0, "ray_and_host_processes_gib": 3.0}
shortfall_gib:
  description: When it does not fit, the largest gap of the failing checks in GiB; null when it fits.
  returned: always
  type: float
  sample: 4.81
levers:
  description: When it does not fit, what closes the gap, each with a concrete value where computable.
  returned: always
  type: list
  elements: dict
  sample: [{"lever": "gpu_memory_utilization", "value": 0.85, "closes_gap": true,
            "detail": "--gpu-memory-utilization 0.85: KV cache 43.03 GiB"}]
measured:
  description: The measured values the plan used (from O(measured) and O(measured_log)).
  returned: always
  type: dict
  sample: {"weights_gib": 27.72, "activation_gib": 1.4, "non_torch_gib": 0.21, "cuda_graph_gib": 3.45}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils import _bounded
from ansible_collections.sparkops.vllm.plugins.module_utils._cgroup_memory import stack_host_memory
from ansible_collections.sparkops.vllm.plugins.module_utils._containers import (
    DockerLookup,
    docker_client_factory,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._memory_plan import (
    MemoryPlanError,
    build_input,
    plan_memory,
)


def _docker_cli(argv):
    """``docker inspect`` bounded in time; a hung engine reads as a failed inspect, named."""
    try:
        return _bounded.run(argv, timeout=20, env_update={"LC_ALL": "C"})
    except _bounded.CommandTimedOut as exc:
        return 124, "", str(exc)


def main():
    module = AnsibleModule(
        argument_spec={
            "weights_gib": {"type": "float"},
            "model_path": {"type": "path"},
            "tensor_parallel_size": {"type": "int", "default": 1},
            "pipeline_parallel_size": {"type": "int", "default": 1},
            "memory_total_gib": {"type": "float", "required": True},
            "memory_available_gib": {"type": "float"},
            "memory_free_gib": {"type": "float"},
            "system_memory_total_gib": {"type": "float"},
            "unified_memory": {"type": "bool", "default": True},
            "node_role": {"type": "str", "choices": ["head", "worker"], "default": "head"},
            "gpu_memory_utilization": {"type": "float"},
            "cuda_graphs": {"type": "bool", "default": True},
            "cuda_graph_memory_profiled": {"type": "bool"},
            "vllm_version": {"type": "str"},
            "activation_reserve_gib": {"type": "float"},
            "non_torch_reserve_gib": {"type": "float"},
            "cuda_graph_reserve_gib": {"type": "float"},
            "cuda_context_reserve_gib": {"type": "float", "default": 0.5},
            "nccl_reserve_gib": {"type": "float"},
            "ray_reserve_gib": {"type": "float"},
            "ray_memory_threshold": {"type": "float", "default": 0.95},
            "ray_memory_monitor": {"type": "bool", "default": True},
            "earlyoom_term_percent": {"type": "float", "default": 4.0},
            "earlyoom_kill_percent": {"type": "float", "default": 2.0},
            "running_stack_host_gib": {"type": "float"},
            "running_stack_label": {"type": "str"},
            "proc_root": {"type": "path", "default": "/proc"},
            "cgroup_root": {"type": "path", "default": "/sys/fs/cgroup"},
            "drop_caches": {"type": "bool", "default": True},
            "load_reserve_gib": {"type": "float"},
            "safety_margin_gib": {"type": "float", "default": 1.0},
            "max_model_len": {"type": "int"},
            "max_num_seqs": {"type": "int"},
            "kv_cache_bytes_per_token": {"type": "int"},
            "model_config_path": {"type": "path"},
            "kv_cache_dtype": {"type": "str", "default": "auto"},
            "measured": {"type": "dict", "default": {}},
            "measured_log": {"type": "str"},
        },
        supports_check_mode=True,
    )
    params = dict(module.params)
    running_stack = None
    if params["running_stack_label"] and params["running_stack_host_gib"] is None:
        lookup = DockerLookup(
            run_command=_docker_cli,
            docker_bin=module.get_bin_path("docker"),
            client_factory=docker_client_factory(),
        )
        running_stack = stack_host_memory(
            params["running_stack_label"], lookup, params["proc_root"], params["cgroup_root"]
        )
        params["running_stack_host_gib"] = running_stack["gib"]
    try:
        plan_input = build_input(params)
        result = plan_memory(plan_input)
    except MemoryPlanError as exc:
        module.fail_json(msg=str(exc), changed=False)
    module.exit_json(changed=False, measured=dict(plan_input.measured), running_stack=running_stack, **result)


if __name__ == "__main__":
    main()
