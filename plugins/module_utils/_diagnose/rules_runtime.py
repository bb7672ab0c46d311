# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The rules of the findings two-Spark clusters hit at run time (issue 17, "Diagnose II").

They are tested before the base table (``rules.py``): each names a cause that a base
rule would otherwise file under a wider finding (an ``ibv_reg_mr`` ENOMEM under
``nccl_ib_error``, an Xid record under no finding at all). Where each wording comes
from is cited next to it; tests/fixtures/diagnose/ holds the excerpts with their source.
"""

from __future__ import annotations

import re

from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.rule_syntax import Rule, _rule

_ENV = r"((?:NCCL|UCX|GLOO)_\w+)"

RUNTIME_RULES: tuple[Rule, ...] = (
    # --- the GPU driver could not back a unified-memory allocation ---
    # NVIDIA/open-gpu-kernel-modules#1358, vllm-project/vllm#56824, vllm#41834: the kernel
    # prints "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY]
    # (0x00000051) returned from _memdescAllocInternal(pMemDesc)", often with no CUDA text.
    # (Anchors hold neither "memory" nor "error": lines with those words are common, and
    # each anchor holding one is tested on all of them.)
    _rule("uma_driver_out_of_memory", "error", "nvrm", r"NV_ERR_NO_MEMORY", "nv_err_no_mem"),
    _rule(
        "uma_driver_out_of_memory",
        "error",
        "nvrm",
        r"nvCheckOkFailedNoLog: Check failed: Out of memory",
        "nvcheckokfailednolog",
    ),
    # --- RDMA memory registration (NVIDIA/nccl-tests#206, NVIDIA/nccl#1191, nccl#563,
    # MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark#259: ENOMEM from long-term pinning) ---
    _rule(
        "rdma_memory_registration_failed",
        "error",
        "ibv",
        r"(ibv_reg_\w*mr\w*|ibv_create_cq|ibv_create_qp) failed(?: with error)?:? ?(Cannot allocate memory|Bad "
        r"address|ENOMEM|EFAULT|errno 1[24]\b)",
        "ibv_reg_",
        "ibv_create_",
    ),
    _rule(
        "rdma_memory_registration_failed",
        "error",
        "ibv",
        r"(ibv_reg_\w*mr\w*) failed",
        "ibv_reg_",
    ),
    _rule(
        "rdma_memory_registration_failed",
        "error",
        "ofi",
        r"Unable to register memory.*?(Cannot allocate memory|Bad address)",
        "unable to register",
    ),
    # --- the image has no Ray (vllm-project/vllm#754 wording; gpustack/gpustack#5430:
    # vLLM's own image dropped Ray in v0.18) ---
    _rule("ray_missing_in_image", "error", "module", r"Ray is not installed", "ray is not installed"),
    _rule(
        "ray_missing_in_image",
        "error",
        "module",
        r"No module named '?ray(?:['\s.]|$)",
        "named 'ray",
        "named ray",
    ),
    _rule(
        "ray_missing_in_image",
        "error",
        "cli",
        r"\"?\bray\"?: (?:executable file not found|command not found)",
        "ray: command not found",
        'ray": executable file not found',
        "ray: executable file not found",
    ),
    # --- vLLM's Ray executor copied the head's env over the worker's (vllm/utils
    # update_environment_variables: "Overwriting environment variable %s from '%s' to '%s'") ---
    _rule(
        "worker_env_overwritten_by_head",
        "warning",
        "overwrite",
        rf"Overwriting environment variable {_ENV} from '([^']*)' to '([^']*)'",
        "overwriting environment",
    ),
    # --- Xid records (the meaning of each Xid: NVIDIA's Xid catalog, see xid_meaning) ---
    _rule("gpu_xid_error", "error", "xid", r"NVRM: Xid \(([^)]*)\): (\d+)", "xid"),
    # --- the image lacks the GPU's architecture (cudaErrorNoKernelImageForDevice; Triton's
    # ptxas on a Spark: "Value 'sm_121a' is not defined for option 'gpu-name'") ---
    _rule(
        "gpu_arch_unsupported",
        "error",
        "no_kernel",
        r"no kernel image is available for execution on (?:the|this) device",
        "no kernel image",
    ),
    _rule("gpu_arch_unsupported", "error", "no_kernel", r"cudaErrorNoKernelImageForDevice", "nokernelimage"),
    _rule(
        "gpu_arch_unsupported",
        "error",
        "ptxas",
        r"ptxas fatal ?: Value '(sm_\w+)' is not defined for option 'gpu-name'",
        # Not "ptxas": its letters are all common ones, and the prefilter needs one rare
        # letter per token (prefilter._PIVOT_PREFERENCE) to stay one pass per letter.
        "for option 'gpu-name'",
    ),
    # --- the engine's RPC to a worker timed out (vllm-project/vllm#41530, #40926, #46611,
    # eugr/spark-vllm-docker#321: "TimeoutError: RPC call to sample_tokens timed out.") ---
    _rule("engine_rpc_timeout", "error", "rpc", r"RPC call to (\w+) timed out", "rpc call"),
    _rule(
        "engine_rpc_timeout",
        "warning",
        "broadcast",
        r"No available shared memory broadcast block found in (\d+) seconds",
        "broadcast block",
    ),
    # --- vLLM's CUDA graph estimate went negative (vllm-project/vllm#44740, PR #25683) ---
    _rule(
        "cudagraph_memory_estimate_negative",
        "warning",
        "estimate",
        r"Estimated CUDA graph memory: (-\d+(?:\.\d+)?) ?GiB",
        "estimated cuda graph",
    ),
    _rule(
        "cudagraph_memory_estimate_negative",
        "warning",
        "actual",
        r"(-\d+(?:\.\d+)?) ?GiB for CUDAGraph memory",
        "gib for cudagraph",
    ),
    _rule(
        "cudagraph_memory_estimate_negative",
        "warning",
        "actual",
        r"Graph capturing finished in \d+ secs?, took (-\d+(?:\.\d+)?) ?GiB",
        "graph capturing",
    ),
    # --- the model is not where the process looks (huggingface_hub's errors, vLLM's check) ---
    _rule(
        "model_files_unavailable",
        "error",
        "offline",
        r"LocalEntryNotFoundError|cannot find the requested files in the local cache|OfflineModeIsEnabled",
        "localentrynotfound",
        "in the local cache",
        "offlinemodeisenabled",
    ),
    _rule(
        "model_files_unavailable",
        "error",
        "cache_dir",
        r"Cache directory not found: ?(\S+?)\.?(?:\s|$)|CacheNotFound",
        "cache directory not found",
        "cachenotfound",
    ),
    _rule(
        "model_files_unavailable",
        "error",
        "local_path",
        r"Invalid repository ID or local directory specified: ?'?([^'\s]+)|(\S+) is not a local folder and is not a "
        r"valid model identifier|does not appear to have a file named (config\.json)",
        "invalid repository",
        "not a local folder",
        "does not appear to have a file",
    ),
    _rule(
        "model_files_unavailable",
        "error",
        "hub",
        r"RepositoryNotFoundError|GatedRepoError|Repository Not Found for url",
        "repositorynotfound",
        "gatedrepo",
        "repository not found",
    ),
    # --- more than one NCCL (vllm-project/vllm#4195: a torch build against another NCCL;
    # verl-project/verl#6621: torch 2.28.9 next to nvidia-nccl 2.30.4) ---
    _rule("nccl_library_mismatch", "error", "symbol", r"undefined symbol: ?(nccl\w+)", "undefined symbol"),
    _rule(
        "nccl_library_mismatch",
        "error",
        "load",
        r"name 'ncclGetVersion' is not defined|Failed to load NCCL library from (\S+)",
        "ncclgetversion",
        "failed to load nccl",
    ),
    _rule("_nccl_version", "info", "torch", r"NCCL version (\d+\.\d+\.\d+)", "nccl version"),
    _rule("_nccl_version", "info", "vllm", r"vLLM is using nccl==(\d+\.\d+\.\d+)", "using nccl=="),
    # --- a raylet lost a GCS it had joined (ray gcs_rpc_client.h: "Failed to connect to GCS
    # within 60 seconds. GCS may have been killed."; ray-project/ray#25175, #34334) ---
    _rule(
        "ray_gcs_lost",
        "error",
        "lost",
        r"Failed to connect to GCS within (\d+) seconds|GCS may have been killed|gcs_rpc_server_reconnect_timeout_s",
        "connect to gcs within",
        "gcs may have been killed",
        "gcs_rpc_server_reconnect",
    ),
)

# NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors, "Xid error listing"): what
# each Xid means and whom it points at. Xid 79 is filed as nvidia_driver_unavailable.
XID_MEANING: dict[int, str] = {
    8: "GPU stopped processing (a driver or application timeout)",
    13: "graphics engine exception (an illegal instruction or out-of-range access in a kernel)",
    31: "GPU memory page fault (an illegal address in a CUDA kernel or a driver bug)",
    32: "invalid or corrupted push buffer stream",
    38: "driver firmware error",
    43: "GPU stopped processing (the application hit a fault and its channel was reset)",
    45: "preemptive cleanup after earlier errors (the process was killed or hit another Xid)",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint or warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    154: "GPU recovery action changed (a reset or a reboot is required)",
}
# Xids that point at the GPU or the driver rather than the application.
XID_HARDWARE = frozenset({38, 48, 61, 62, 64, 74, 79, 92, 94, 95, 119, 120, 154})

# Versions print as "2.27.3" or "2.27.3+cuda12.9"; only the release part is compared.
NCCL_RELEASE = re.compile(r"\d+\.\d+\.\d+")
# Colour codes whose ESC byte was escaped on the way: rsyslog writes "#033"
# ("#033[36m(raylet)#033[0m"), some log viewers "ESC" (vllm-project/vllm#5405).
SYSLOG_ESCAPED_SGR = re.compile(r"(?:#033|ESC)\[[0-?]*[ -/]*[@-~]")
# A fixture's provenance line (tests/fixtures: "# Source: GitHub owner/repo issue #N ...").
PROVENANCE = "# Source: "
