# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""One fix per finding, in the inventory's terms, sharpened by the memory plan and settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.state import _Finding

if TYPE_CHECKING:
    from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.scanner import Scanner

_FIXES = {
    "ray_oom_kill": (
        "Set `sparkops_ray_memory_monitor: false` (sets RAY_memory_monitor_refresh_ms=0; earlyoom stays as "
        "the guard against a real out-of-memory) or raise `sparkops_ray_memory_threshold`, and leave "
        "`sparkops_gpu_memory_utilization` unset so the memory plan recommends a value whose peak fits "
        "(or lower it). When the kill came during CUDA graph capture, `sparkops_cuda_graphs: false` "
        "(adds --enforce-eager) removes that peak. See docs/runbooks/."
    ),
    "cuda_graph_capture_oom": (
        "Lower `sparkops_gpu_memory_utilization` (or leave it unset so the memory plan keeps graph-capture "
        "headroom) or set `sparkops_cuda_graphs: false` (adds --enforce-eager, no capture at all)."
    ),
    "startup_memory_short": (
        "Something else holds memory on that node: let preflight find it (`preflight_reclaim: true` stops "
        "stale GPU consumers; list legitimate ones in `preflight_gpu_consumer_allowlist`), or lower "
        "`sparkops_gpu_memory_utilization` (leave it unset to let the memory plan recommend one from the "
        "memory really free)."
    ),
    "kv_cache_insufficient": (
        "Lower `sparkops_max_model_len`, or give the KV cache more room: raise "
        "`sparkops_gpu_memory_utilization` (leave it unset to let the memory plan size it) or spread the "
        "weights wider with `sparkops_tensor_parallel_size` / `sparkops_pipeline_parallel_size`."
    ),
    "cuda_oom": (
        "Lower `sparkops_gpu_memory_utilization` (or leave it unset to let the memory plan recommend one) "
        "and clear stale GPU consumers (`preflight_reclaim`, `preflight_gpu_consumer_allowlist`). If it "
        "fails while loading weights the shard does not fit: raise `sparkops_tensor_parallel_size` / "
        "`sparkops_pipeline_parallel_size` or lower `sparkops_max_model_len`."
    ),
    "ray_node_ip_mismatch": (
        "Pin every node to its RoCE address: set host vars `ib_address` and `ib_interface` on each host "
        "(they feed `ray start --node-ip-address`, VLLM_HOST_IP, NCCL_SOCKET_IFNAME and "
        "GLOO_SOCKET_IFNAME), then restart the Ray cluster."
    ),
    "ray_placement_unsatisfiable": (
        "Make `sparkops_tensor_parallel_size` x `sparkops_pipeline_parallel_size` equal the GPUs `ray "
        "status` "
        "reports; check every worker joined on its `ib_address` (a `node:<ip>` request for an address Ray "
        "does not know means VLLM_HOST_IP and Ray disagree) and that `roce_network_firewall_open` lets the "
        "workers reach the head."
    ),
    "nccl_socket_connect_failed": (
        "NCCL's TCP connections cannot reach the peer: check `ib_address` / `ib_interface` on every host "
        "(NCCL_SOCKET_IFNAME), that the RoCE link passes roce_network's MTU ping, and set "
        "`roce_network_firewall_open: true` so NCCL's ports are open between the nodes."
    ),
    "nccl_ib_error": (
        "Fix the RoCE path NCCL uses: leave `roce_network_nccl_ib_gid_index` null so NCCL picks the GID per "
        "device (a pinned NCCL_IB_GID_INDEX fails on a Spark's unaddressed twin), keep "
        "`roce_network_nccl_ib_hca` to the devices roce_network detected, and check `ib_interface` and the "
        "link MTU with the roce_network stage (its report names the GID NCCL takes on each device)."
    ),
    "gloo_interface": (
        "Point torch.distributed and Gloo at the RoCE link: set host vars `ib_interface` "
        "(GLOO_SOCKET_IFNAME) and `ib_address` (VLLM_HOST_IP) on every host, and open the ports with "
        "`roce_network_firewall_open: true`. A 127.x peer address means the host name resolves to loopback."
    ),
    "nccl_collective_timeout": (
        "A rank stopped answering. Look above for what killed or cut it off; with no other finding, check "
        "the RoCE path (`roce_network_nccl_ib_hca`, a pinned `roce_network_nccl_ib_gid_index`, `ib_interface`) and "
        "that every rank runs the same image and `sparkops_tensor_parallel_size`."
    ),
    "nvidia_driver_unavailable": (
        "Repair the driver on that node before anything else: reboot after a driver update (a version "
        "mismatch), or install a driver the known-bad platform table accepts (docs/known-bad-platforms.md; "
        "`preflight_known_bad_accept` overrides a known-bad row); preflight stops a deploy on this."
    ),
    "uma_driver_out_of_memory": (
        "The GPU driver could not back a unified-memory allocation: the node's RAM was taken by the page "
        "cache or another process. Drop the page cache before the start (`sync; echo 3 > "
        "/proc/sys/vm/drop_caches`; `preflight_reclaim: true` also stops stale GPU consumers), then lower "
        "`sparkops_gpu_memory_utilization` or leave it unset so the memory plan sizes it from the memory "
        "really free (`sparkops preflight` shows the plan). A host that stopped answering needs a power cycle."
    ),
    "rdma_memory_registration_failed": (
        "NCCL could not pin memory for RDMA: not a GID or HCA problem. Keep `ray_cluster_memlock_unlimited: "
        "true` (and `vllm_serve_memlock_unlimited`) so the containers run with `--ulimit memlock=-1`; check "
        "`ulimit -l` inside the container. With memlock unlimited, the kernel could not pin pages it holds in "
        "CMA pageblocks: check `grep Cma /proc/meminfo`. CmaFree above CmaTotal is the kernel's Kexec "
        "HandOver scratch memory counted as CMA (NV-Kernels PR #591, Linux 7.0.0-1019): boot with `kho=off` "
        "(preflight's kernel_kho_cma row, docs/known-bad-platforms.md). Otherwise drop the page cache before the "
        "start and lower `sparkops_gpu_memory_utilization` so NCCL's buffers are not the last free pages."
    ),
    "ray_missing_in_image": (
        "The image has no Ray: vLLM's own images dropped it in v0.18. Build or pull an image with Ray "
        "(`vllm_image_source: build` with a Dockerfile that runs `pip install ray`, see "
        "inventory/sample/group_vars/all/vllm_image.yml) and set `vllm_image_ref` to it; the same image "
        "must run on every node."
    ),
    "worker_env_overwritten_by_head": (
        "vLLM's Ray executor copies the head's NCCL_*/UCX_*/GLOO_* values to every worker (vLLM PR #14099), "
        "which breaks a worker whose interface or HCA names differ. Keep the per-node names out of the "
        "copy: list them in the container's `~/.config/vllm/ray_non_carry_over_env_vars.json` (vLLM "
        "prints that path when it copies), or give every node the same names; set `ib_interface` per host "
        "so each node's own value is right, and do not export them in the head's shell."
    ),
    "gpu_xid_error": (
        "Read the Xid's meaning in the summary: an application Xid (13, 31, 43, 45) follows a bad kernel or "
        "an image built for another GPU, so rerun with `sparkops_cuda_graphs: false` and the image's "
        "own test; a hardware Xid (48, 64, 79, 94, 95, 119, 154) needs `nvidia-smi -q`, a reset or a reboot "
        "of that node before a retry, and a driver the known-bad platform table accepts (`preflight_known_bad_accept`)."
    ),
    "gpu_arch_unsupported": (
        "The image was built without this GPU's architecture (on a DGX Spark: compute capability 12.1, "
        "`TORCH_CUDA_ARCH_LIST=12.1a`). Use an image built for GB10 / sm_121 (`vllm_image_ref`, or "
        "`vllm_image_source: build` with that arch list); a CUDA-12.8-or-older PyTorch cannot run on it."
    ),
    "engine_rpc_timeout": (
        "A rank stopped answering mid-serving (a hung rank). On two Sparks the known cause is cross-node "
        "tensor parallel with CUDA graphs on NCCL 2.28.9: use an image with NCCL 2.30.4 or newer "
        "(`vllm_image_ref`), or set `sparkops_cuda_graphs: false` (adds --enforce-eager). Check the other "
        "node's log for the rank that stopped."
    ),
    "cudagraph_memory_estimate_negative": (
        "vLLM's CUDA graph memory estimate went negative, so it sized the KV cache too large and the "
        "out-of-memory comes later. Set `sparkops_cuda_graphs: false` (adds --enforce-eager) or lower "
        "`sparkops_gpu_memory_utilization` by the negative amount; leaving it unset lets the memory plan "
        "keep its own graph-capture reserve."
    ),
    "model_files_unavailable": (
        "The model is not where the process looks. Set `sparkops_model_path` to the directory model_sync "
        "fills on every node (an absolute path, the same on head and workers) and `sparkops_model_id` to "
        "its repository id; run `sparkops deploy` so model_sync copies it to the node that lacks it. "
        "Offline mode (HF_HUB_OFFLINE=1) with a repo id only works when the cache already holds it."
    ),
    "nccl_library_mismatch": (
        "More than one NCCL is in the image and the one loaded is not the one PyTorch or vLLM was built "
        "for. Use an image with one NCCL (`vllm_image_ref`; `pip list | grep nccl` and `find / -name "
        "'libnccl.so*'` in the image), or point VLLM_NCCL_SO_PATH at the intended one through the image."
    ),
    "ray_gcs_lost": (
        "A raylet lost the GCS it had joined: the head's Ray died (killed, out of memory, restarted), "
        "which is not an addressing problem. Look at the head's log for why (a ray_oom_kill or "
        "uma_driver_out_of_memory finding there), then restart the cluster (`sparkops restart`); keep "
        "`sparkops_ray_memory_monitor` and earlyoom settings so the head is not the process killed."
    ),
    "engine_core_init_failed": (
        "vLLM's wrapper hides the cause: run diagnose on the complete logs of every node (the worker lines "
        "above the wrapper), with `context`; without a cause, retry with `sparkops_cuda_graphs: false` and "
        "follow docs/runbooks/."
    ),
}

# The fix when the log shows the kill came while the weights loaded (``phase``
# "weight_loading"). vLLM allocates the KV cache only after the model is loaded
# (vllm/v1/engine/core.py EngineCore.__init__: the executor loads the model, then
# _initialize_kv_caches profiles with determine_available_memory and allocates; 0.17.x
# and current main), and captures CUDA graphs last: neither the utilization nor
# --enforce-eager changes the load-time peak. docs/runbooks/ray-oom-during-cuda-graph-
# capture.md ("Killed while loading weights") gives the sources and says what is a guess.
_LOADING_TAIL = (
    " Lowering `sparkops_gpu_memory_utilization` barely changes that peak (vLLM sizes and allocates the "
    "KV cache only after the weights are loaded) and `sparkops_cuda_graphs: false` (--enforce-eager) does "
    "not help either (no graph exists yet). What does: drop the page cache and stop other loads on that "
    "node (one model load per node at a time), spread the weights wider (`sparkops_tensor_parallel_size` / "
    "`sparkops_pipeline_parallel_size`), or use an image whose vLLM has PR #45179 (FP8/NVFP4 MoE "
    "post-processing with a smaller transient). Give the memory plan the peak you measure as its load-time "
    "term (`load_reserve_gib`, docs/memory-plan.md) so preflight checks it. See docs/runbooks/"
    "ray-oom-during-cuda-graph-capture.md (killed while loading weights)."
)
_LOADING_FIXES = {
    "ray_oom_kill": (
        "The kill came while the weights loaded, before the KV cache and the CUDA graphs: the peak is the "
        "weights plus their post-processing, the memory plan's load-time peak. Set "
        "`sparkops_ray_memory_monitor: false` (earlyoom stays the guard) or raise "
        "`sparkops_ray_memory_threshold` so Ray does not kill the load." + _LOADING_TAIL
    ),
    "cuda_oom": (
        "It ran out while the weights loaded or were post-processed: the shard and its post-processing do "
        "not fit next to what else holds memory. Clear stale GPU consumers (`preflight_reclaim`, "
        "`preflight_gpu_consumer_allowlist`)." + _LOADING_TAIL
    ),
    "uma_driver_out_of_memory": (
        "The driver ran out while the weights loaded or were post-processed (on a GB10 the page cache of "
        "the checkpoint read competes for the same RAM): drop the page cache before the start (`sync; echo "
        "3 > /proc/sys/vm/drop_caches`; `preflight_reclaim: true` stops stale GPU consumers)." + _LOADING_TAIL
    ),
}


def _plan_load_peak(plan: dict) -> tuple:
    """(load peak GiB, limit GiB, " on HOST") of a node plan, or of a cluster plan's tightest node."""
    nodes = plan.get("nodes")
    if not isinstance(nodes, dict) or not nodes:
        return plan.get("load_peak_gib"), plan.get("limit_gib"), ""
    figures = [
        (n["limit_gib"] - n["load_peak_gib"], host, n)
        for host, n in sorted(nodes.items())
        if isinstance(n, dict) and n.get("load_peak_gib") is not None and n.get("limit_gib") is not None
    ]
    if not figures:
        return None, None, ""
    _, host, node = min(figures, key=lambda item: item[0])
    return node["load_peak_gib"], node["limit_gib"], f" on {host}"


def _loading_fix(finding_id: str, scanner: Scanner) -> str:
    fix = _LOADING_FIXES[finding_id]
    plan = scanner.context.memory_plan
    if plan:
        peak, limit, where = _plan_load_peak(plan)
        if peak is not None and limit is not None:
            fix += (
                f" The memory plan put the load-time peak at {peak} GiB against the limit {limit} GiB{where}."
            )
    return fix


def _plan_peak(plan: dict) -> tuple:
    """(peak GiB, limit GiB, " on HOST") of a node plan, or of a cluster plan's tightest node."""
    nodes = plan.get("nodes")
    if not isinstance(nodes, dict) or not nodes:
        return plan.get("peak_gib"), plan.get("limit_gib"), ""
    figures = [
        (n["limit_gib"] - n["peak_gib"], host, n)
        for host, n in sorted(nodes.items())
        if isinstance(n, dict) and n.get("peak_gib") is not None and n.get("limit_gib") is not None
    ]
    if not figures:
        return None, None, ""
    _, host, node = min(figures, key=lambda item: item[0])
    return node["peak_gib"], node["limit_gib"], f" on {host}"


def _plan_recommendation(plan: dict):
    """The utilization the plan recommends; a given (forced) value is not a recommendation."""
    if plan.get("utilization_source") != "given":
        return plan.get("gpu_memory_utilization")
    nodes = plan.get("nodes") if isinstance(plan.get("nodes"), dict) else {}
    values = [
        n.get("recommended_gpu_memory_utilization")
        for n in nodes.values()
        if isinstance(n, dict) and n.get("recommended_gpu_memory_utilization") is not None
    ]
    return min(values) if values else None


def _fix(finding_id: str, acc: _Finding, scanner: Scanner) -> str:
    if acc.phase == "weight_loading" and finding_id in _LOADING_FIXES:
        return _loading_fix(finding_id, scanner)
    fix = _FIXES[finding_id]
    plan = scanner.context.memory_plan
    memory_ids = {
        "ray_oom_kill",
        "cuda_graph_capture_oom",
        "startup_memory_short",
        "cuda_oom",
        "uma_driver_out_of_memory",
        "cudagraph_memory_estimate_negative",
    }
    if finding_id in memory_ids and plan:
        peak, limit, where = _plan_peak(plan)
        if plan.get("fits") is False and peak is not None and limit is not None:
            fix += (
                f" The memory plan already predicted this: peak {peak} GiB over the limit {limit} GiB{where}."
            )
        recommended = _plan_recommendation(plan)
        if recommended is not None:
            fix += f" The memory plan recommends gpu_memory_utilization {recommended}."
    current = scanner.context.settings.get("sparkops_gpu_memory_utilization")
    if finding_id in memory_ids and current is not None:
        fix += f" sparkops_gpu_memory_utilization is set to {current} now."
    if finding_id == "kv_cache_insufficient":
        estimate = acc.kinds.get("estimate")
        if estimate:
            fix += f" vLLM estimates `sparkops_max_model_len: {estimate[0]}` fits as things are."
    return fix
