# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The summaries of the run-time findings (rules_runtime.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.rules_runtime import (
    XID_HARDWARE,
    XID_MEANING,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.state import _Finding

if TYPE_CHECKING:
    from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.scanner import Scanner


def where(acc: _Finding) -> str:
    if not acc.hosts:
        return ""
    if len(acc.hosts) == 1:
        return f" on {acc.hosts[0]}"
    return " on " + ", ".join(acc.hosts[:4]) + (" and more" if len(acc.hosts) > 4 else "")


def _times(acc: _Finding) -> str:
    return f" ({acc.count} log lines)" if acc.count > 1 else ""


def phase_note(acc: _Finding) -> str:
    """A sentence on the startup phase the finding hit, or "" when the log does not say."""
    if acc.phase == "weight_loading":
        return (
            " It happened while the weights were loading or being post-processed (vLLM had printed its "
            'loading lines and no "Model loading took" yet): before the KV cache and the CUDA graphs exist.'
            " Converting FP8/NVFP4 MoE weights holds a layer's original and converted copy at once (vLLM "
            "PR #45179)."
        )
    if acc.phase == "graph_capture":
        return " It happened during CUDA graph capture, a transient peak after the weights loaded."
    return ""


def _sum_uma(acc: _Finding, scanner: Scanner) -> str:
    text = (
        f"The GPU driver could not back a unified-memory allocation{where(acc)}{_times(acc)} (NVRM "
        "NV_ERR_NO_MEMORY): on a GB10 the GPU takes its memory from the same RAM as the page cache and "
        "every process, so the node was out of memory even when CUDA printed nothing."
    )
    text += phase_note(acc)
    if acc.severity != "error":
        text += " A single such line with nothing else wrong is also seen on runs that went on to serve."
    return text


def _sum_rdma(acc: _Finding, scanner: Scanner) -> str:
    ibv = acc.kinds.get("ibv") or acc.kinds.get("ofi")
    call = ibv[0] if ibv and ibv[0] and acc.kinds.get("ibv") else "memory registration"
    why = ""
    if ibv and len(ibv) > 1 and ibv[1]:
        why = f" ({ibv[1]})"
    return (
        f"NCCL could not register memory for RDMA{where(acc)}: {call} failed{why}. The memory could not "
        "be pinned: a memlock limit, or a kernel that cannot migrate the pages out of contiguous (CMA) "
        "memory; the RoCE GID and HCA are not the problem."
    )


def _sum_ray_missing(acc: _Finding, scanner: Scanner) -> str:
    what = "the `ray` command" if "cli" in acc.kinds else "the Python module `ray`"
    return (
        f"The Ray backend was asked for but the image has no Ray{where(acc)}: {what} is missing, so no "
        "worker can join."
    )


def _sum_env(acc: _Finding, scanner: Scanner) -> str:
    names = []
    for item in acc.evidence:
        for name in ("NCCL_", "UCX_", "GLOO_"):
            at = item["text"].find("variable " + name)
            if at >= 0:
                names.append(item["text"][at + 9 :].split(" ", 1)[0])
    overwrite = acc.kinds.get("overwrite")
    shown = ", ".join(dict.fromkeys(names)) or (overwrite[0] if overwrite else "NCCL_*")
    text = f"vLLM's Ray executor overwrote the worker's own {shown}{where(acc)} with the head's value"
    if overwrite:
        text += f" ('{overwrite[1]}' became '{overwrite[2]}')"
    return text + "; NCCL errors on that worker follow from it."


def _xid_parts(acc: _Finding) -> list[str]:
    seen = []
    for item in acc.evidence:
        text = item["text"]
        at = text.find("): ")
        number = text[at + 3 :].split(",", 1)[0].strip() if at >= 0 else ""
        if number.isdigit() and number not in seen:
            seen.append(number)
    xid = acc.kinds.get("xid")
    if xid and xid[1] and xid[1] not in seen:
        seen.append(xid[1])
    return seen


def _sum_xid(acc: _Finding, scanner: Scanner) -> str:
    parts = []
    hardware = False
    for number in _xid_parts(acc):
        meaning = XID_MEANING.get(int(number), "see NVIDIA's Xid catalog")
        parts.append(f"Xid {number}: {meaning}")
        hardware = hardware or int(number) in XID_HARDWARE
    text = f"The GPU driver logged Xid errors{where(acc)}{_times(acc)}: " + "; ".join(parts) + "."
    if hardware:
        text += " At least one points at the GPU or driver, not the application."
    else:
        text += " These point at the application's kernels (or an image built for another GPU)."
    return text


def _sum_arch(acc: _Finding, scanner: Scanner) -> str:
    ptxas = acc.kinds.get("ptxas")
    if ptxas and ptxas[0]:
        return (
            f"The image's compiler does not know the GPU's architecture {ptxas[0]}{where(acc)}: Triton or "
            "a kernel build in the image predates the GPU."
        )
    return (
        f"CUDA found no kernel image for this GPU{where(acc)}: the image was built without its "
        "architecture (a DGX Spark's GB10 is compute capability 12.1)."
    )


def _sum_rpc(acc: _Finding, scanner: Scanner) -> str:
    rpc = acc.kinds.get("rpc")
    versions = sorted(scanner.nccl_releases)
    text = (
        f"The engine's RPC {rpc[0]} to a worker timed out{where(acc)}: a rank hung mid-serving."
        if rpc and rpc[0]
        else f"The engine's broadcast to its workers stalled while serving{where(acc)}: a rank stopped."
    )
    if any(version.startswith("2.28.") for version in versions):
        text += (
            f" The log shows NCCL {', '.join(versions)}: cross-node tensor parallel with CUDA graphs "
            "hangs on NCCL 2.28.9."
        )
    return text


def _sum_negative(acc: _Finding, scanner: Scanner) -> str:
    estimate = acc.kinds.get("estimate") or acc.kinds.get("actual")
    amount = f" ({estimate[0]} GiB)" if estimate and estimate[0] else ""
    text = (
        f"vLLM's CUDA graph memory came out negative{amount}{where(acc)}, so the KV cache was sized too large"
    )
    kv = scanner.memory.get("kv_cache_gib")
    if kv is not None:
        text += f" ({kv} GiB)"
    return text + "; an out-of-memory during capture or serving follows."


def _sum_model(acc: _Finding, scanner: Scanner) -> str:
    if "offline" in acc.kinds:
        return (
            f"The model files are not in the local cache and the hub cannot be asked{where(acc)} "
            "(offline mode, or no network): a repository id was given where a local path was meant."
        )
    cache = acc.kinds.get("cache_dir")
    if cache and cache[0]:
        return f"The model cache directory {cache[0]} does not exist{where(acc)}."
    local = acc.kinds.get("local_path")
    if local:
        name = next((group for group in local if group), "the model")
        return f"The model {name} is neither a local directory nor a repository id vLLM can use{where(acc)}."
    return f"The model's repository cannot be reached{where(acc)} (not found, gated, or no token)."


def _sum_nccl_mismatch(acc: _Finding, scanner: Scanner) -> str:
    parts = []
    symbol = acc.kinds.get("symbol")
    if symbol and symbol[0]:
        parts.append(f"the loaded NCCL lacks {symbol[0]}: it is older than the one the code was built for")
    if "load" in acc.kinds:
        parts.append("vLLM could not load the NCCL it was pointed at")
    versions = acc.kinds.get("versions")
    if versions:
        parts.append(f"the log names NCCL {' and '.join(versions)}")
    return f"More than one NCCL is in play{where(acc)}: " + "; ".join(parts) + "."


def _sum_gcs_lost(acc: _Finding, scanner: Scanner) -> str:
    lost = acc.kinds.get("lost")
    within = f" for {lost[0]} s" if lost and lost[0] else ""
    return (
        f"A raylet lost the GCS it had joined{where(acc)}{within} and terminated: the head's Ray "
        "(its GCS) died or restarted; the node's address was fine."
    )


RUNTIME_SUMMARIES = {
    "uma_driver_out_of_memory": _sum_uma,
    "rdma_memory_registration_failed": _sum_rdma,
    "ray_missing_in_image": _sum_ray_missing,
    "worker_env_overwritten_by_head": _sum_env,
    "gpu_xid_error": _sum_xid,
    "gpu_arch_unsupported": _sum_arch,
    "engine_rpc_timeout": _sum_rpc,
    "cudagraph_memory_estimate_negative": _sum_negative,
    "model_files_unavailable": _sum_model,
    "nccl_library_mismatch": _sum_nccl_mismatch,
    "ray_gcs_lost": _sum_gcs_lost,
}
