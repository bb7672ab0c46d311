# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The rules: the key phrases of every finding, and the CUDA graph capture markers."""

from __future__ import annotations

import re

from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.rules_runtime import RUNTIME_RULES
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.rule_syntax import (
    _ADDR,
    _NUM,
    Rule,
    _gate,
    _rule,
    _rx,
)

# Pseudo findings resolved at the end: "_oom" becomes cuda_graph_capture_oom or
# cuda_oom, "_socket_fallback" becomes an nccl_ib_error warning on a multi-node log.
# "_nccl_version" lines are compared at the end (nccl_library_mismatch).
# Order matters: the first rule that matches a line wins; the run-time rules
# (rules_runtime.py) come first.
RULES: tuple[Rule, ...] = (
    *RUNTIME_RULES,
    # --- Ray's memory monitor (four generations of wording) ---
    _rule("ray_oom_kill", "error", "task_killed", r"killed due to the node running low on memory", "killed"),
    _rule(
        "ray_oom_kill",
        "error",
        "usage",
        r"Memory on the node \(IP: " + _ADDR + r", ID: \w+\).*? was "
        rf"{_NUM} ?GB / {_NUM} ?GB \({_NUM}\),? which exceeds the memory usage threshold of {_NUM}",
    ),
    _rule("ray_oom_kill", "error", "threshold", rf"exceeds the memory usage threshold of {_NUM}"),
    # Ray 2.0-2.1 (ray-project/ray#28774): "System memory low at node with IP 172.31.66.10. Used
    # memory (54.90GB) / total capacity (57.60GB) (0.95307) exceeds threshold 0.95, killing latest task"
    _rule(
        "ray_oom_kill",
        "error",
        "usage",
        r"System memory low at node with IP " + _ADDR + rf"\. Used memory \({_NUM} ?GB\) / total capacity "
        rf"\({_NUM} ?GB\) \({_NUM}\),? exceeds threshold {_NUM}",
        "low at node with ip",
    ),
    _rule(
        "ray_oom_kill",
        "error",
        "threshold",
        rf"System memory low at node|exceeds threshold {_NUM}, killing latest task",
        "low at node",
        "killing latest task",
    ),
    _rule(
        "ray_oom_kill",
        "error",
        "pressure",
        r"killed due to memory pressure \(OOM\)(?:.*?\bIP: " + _ADDR + r"\))?",
    ),
    _rule("ray_oom_kill", "error", "exit_type", r"NODE_OUT_OF_MEMORY"),
    _rule(
        "ray_oom_kill",
        "error",
        "legacy",
        rf"More than {_NUM}% of the memory on node (\S+) is used \({_NUM} / {_NUM} GB\)",
    ),
    _rule("ray_oom_kill", "error", "legacy", r"RayOutOfMemoryError"),
    _rule("ray_oom_kill", "error", "exception", r"ray\.exceptions\.OutOfMemoryError"),
    _rule("ray_oom_kill", "error", "monitor", r"Ray killed this worker \(ID: \w+\) because", "killed"),
    # --- vLLM's memory checks ---
    _rule(
        "startup_memory_short",
        "error",
        "free_less",
        rf"Free memory on device(?: \S+)? \({_NUM} ?/ ?{_NUM} GiB\) on startup is less than desired "
        rf"GPU memory utilization \({_NUM}, {_NUM} GiB\)",
    ),
    _rule(
        "startup_memory_short",
        "error",
        "free_less",
        r"is less than desired GPU memory utilization",
        "desired",
    ),
    _rule(
        "startup_memory_short",
        "error",
        "profiling",
        rf"Error in memory profiling\.? Initial free memory {_NUM} ?GiB, current free memory {_NUM}",
    ),
    _rule(
        "kv_cache_insufficient", "error", "no_blocks", r"No available memory for the cache blocks", "blocks"
    ),
    _rule(
        "kv_cache_insufficient",
        "error",
        "max_len",
        rf"max seq len \((\d+)\),? \(?{_NUM} ?GiB KV cache is needed, which is larger than the available "
        rf"KV cache memory \({_NUM} ?GiB\)",
    ),
    _rule(
        "kv_cache_insufficient",
        "error",
        "kv_need",
        rf"{_NUM} ?GiB KV cache is needed, which is larger than the available KV cache memory \({_NUM} "
        rf"?GiB\)",
    ),
    _rule(
        "kv_cache_insufficient",
        "error",
        "serve_len",
        r"To serve at least one request with the models?'s max seq len \((\d+)\)",
        "max seq len",
    ),
    _rule(
        "kv_cache_insufficient",
        "error",
        "max_len_tokens",
        r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV "
        r"cache \((\d+)\)",
    ),
    _rule("kv_cache_insufficient", "error", "estimate", r"estimated maximum model length is (\d+)"),
    _rule("kv_cache_insufficient", "error", "negative", r"Available KV cache memory: (-\d+(?:\.\d+)?) ?GiB"),
    # --- CUDA / host out of memory (classified at the end) ---
    _rule("_oom", "error", "torch", r"CUDA out of memory\.?(?: Tried to allocate (\S+ ?[GMK]i?B))?"),
    _rule("_oom", "error", "runtime", r"CUDA error: out of memory"),
    _rule(
        "_oom",
        "error",
        "torch",
        r"torch\.(?:cuda\.)?OutOfMemoryError|OutOfMemoryError: CUDA",
        "outofmemoryerror",
    ),
    _rule(
        "_oom",
        "error",
        "runtime",
        r"cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY",
        "cudaerrormemoryallocation",
        "cuda_error_out_of_memory",
    ),
    _rule("_oom", "error", "runtime", r"CUBLAS_STATUS_ALLOC_FAILED"),
    _rule("_oom", "error", "runtime", r"Cuda failure (?:\d+ )?'?out of memory"),
    _rule("_oom", "error", "kernel", r"Out of memory: Killed process (\d+) \(([^)]*)\)", "killed"),
    _rule("_oom", "error", "earlyoom", r"sending SIG(?:TERM|KILL) to process (\d+)", "sigterm", "sigkill"),
    # --- NVIDIA driver ---
    _rule(
        "nvidia_driver_unavailable",
        "error",
        "unreachable",
        r"couldn'?t communicate with the NVIDIA driver",
    ),
    _rule("nvidia_driver_unavailable", "error", "nvml", r"Failed to initialize NVML: ?([^\"()]*)"),
    _rule("nvidia_driver_unavailable", "error", "no_devices", r"No devices were found"),
    _rule(
        "nvidia_driver_unavailable",
        "error",
        "kernel",
        r"NVRM: .*(?:RmInitAdapter failed|rm_init_adapter failed|fallen off the bus|API mismatch)",
    ),
    _rule("nvidia_driver_unavailable", "error", "gpu_lost", r"GPU has fallen off the bus"),
    _rule(
        "nvidia_driver_unavailable",
        "error",
        "nvml",
        r"NVML_?Error_?(?:DriverNotLoaded|LibraryNotFound|GpuIsLost|LibRmVersionMismatch|Unknown)"
        r"|NVML_ERROR_(?:DRIVER_NOT_LOADED|LIBRARY_NOT_FOUND|GPU_IS_LOST|LIB_RM_VERSION_MISMATCH)",
        "nvmlerror",
        "nvml_error",
    ),
    _rule("nvidia_driver_unavailable", "error", "torch", r"Found no NVIDIA driver on your system"),
    _rule(
        "nvidia_driver_unavailable",
        "error",
        "too_old",
        r"CUDA driver version is insufficient for CUDA runtime version|NVIDIA driver on your system is too "
        r"old",
        "insufficient",
        "too old",
    ),
    _rule("nvidia_driver_unavailable", "error", "torch", r"CUDA driver initialization failed", "driver"),
    _rule("nvidia_driver_unavailable", "error", "torch", r"No CUDA GPUs are available", "gpus"),
    _rule("nvidia_driver_unavailable", "error", "torch", r"Unexpected error from cudaGetDeviceCount"),
    _rule("nvidia_driver_unavailable", "error", "torch", r"CUDA initialization: CUDA unknown error"),
    _rule(
        "nvidia_driver_unavailable",
        "error",
        "container",
        r"nvidia-container-cli: initialization error|could not select device driver \"\S*\" with "
        r"capabilities: \[\[gpu\]\]",
        "nvidia-container-cli",
        "device driver",
    ),
    _rule("nvidia_driver_unavailable", "error", "nvml", r"Unable to determine the device handle for GPU"),
    # --- Ray addressing and placement ---
    _rule("ray_node_ip_mismatch", "warning", "node_ip", r"This node has an IP address of " + _ADDR + r",? "),
    _rule("ray_node_ip_mismatch", "error", "unique_ip", r"Every node should have a unique IP address"),
    _rule(
        "ray_node_ip_mismatch",
        "error",
        "driver_node",
        r"Ray does not allocate any GPUs on the driver node",
    ),
    _rule(
        "ray_node_ip_mismatch",
        "warning",
        "gcs",
        r"(?:Failed|Unable) to connect to GCS at (?:address )?" + _ADDR + r"(?::\d+)?\b",
    ),
    _rule(
        "ray_placement_unsatisfiable",
        "error",
        "no_node_types",
        r"No available node types can fulfill resource request (\{[^}]*\})?",
    ),
    _rule("ray_placement_unsatisfiable", "error", "timeout", r"Cannot provide a placement group"),
    _rule(
        "ray_placement_unsatisfiable",
        "warning",
        "waiting",
        r"Waiting for creating a placement group of specs for (\d+) seconds",
    ),
    _rule(
        "ray_placement_unsatisfiable",
        "warning",
        "unschedulable",
        r"resource request cannot be scheduled right now: (\{[^}]*\})?",
    ),
    _rule("ray_placement_unsatisfiable", "error", "no_gpu", r"Current node has no GPU available", "no gpu"),
    _rule(
        "ray_placement_unsatisfiable",
        "error",
        "too_few",
        r"number of required GPUs exceeds the total number of available GPUs",
        "exceeds",
    ),
    _rule(
        "ray_placement_unsatisfiable",
        "error",
        "too_few",
        r"Tensor parallel size \((\d+)\) cannot be larger than the number of available GPUs \((\d+)\)",
    ),
    # --- NCCL over RoCE (before the socket rules: an ibv timeout also says "timed out") ---
    _rule("nccl_ib_error", "error", "ibv", r"Call to (ibv_\w+) failed(?: with (\d+))?"),
    _rule("nccl_ib_error", "error", "ibv", r"(ibv_\w+) failed", "ibv_"),
    _rule(
        "nccl_ib_error",
        "error",
        "completion",
        r"NET/IB ?:? .*?Got completion .*?(?:status|error) ?=? ?(\d+)",
        "got completion",
    ),
    _rule(
        "nccl_ib_error",
        "error",
        "completion",
        r"IBV_WC_\w+_ERR|transport retry counter exceeded",
        "ibv_wc",
        "retry counter",
    ),
    _rule("nccl_ib_error", "error", "net_ib", r"NCCL WARN NET/IB\b(?! ?: ?No device found)", "nccl warn"),
    _rule("nccl_ib_error", "error", "net_ib", r"NET/IB ?:? .*\b(?:error|failed)\b", "error", "failed"),
    _rule("_socket_fallback", "warning", "no_ib", r"NET/IB ?: ?No device found", "no device"),
    _rule("_socket_fallback", "warning", "socket", r"NCCL INFO Using network Socket", "socket"),
    # --- NCCL's TCP sockets ---
    _rule(
        "nccl_socket_connect_failed",
        "error",
        "connect",
        r"socket\w*Connect: Connect to (\S+?) (?:failed|returned)(?: ?: ?([^\"(),;]*))?",
    ),
    _rule(
        "nccl_socket_connect_failed", "error", "connect", r"NCCL WARN .*Connect to (\S+?) failed", "nccl warn"
    ),
    _rule(
        "nccl_socket_connect_failed",
        "error",
        "no_interface",
        # Also in a "Last error:" block of torch's DistBackendError, with no NCCL WARN in front.
        r"(?:Bootstrap|NET/Socket) ?: ?no (?:socket )?interface found",
    ),
    _rule(
        "nccl_socket_connect_failed",
        "error",
        "connect",
        r"NCCL WARN .*(?:Connection refused|No route to host|Connection reset by peer|Software caused "
        r"connection abort)",
        "nccl warn",
    ),
    # --- torch.distributed rendezvous and Gloo ---
    _rule("gloo_interface", "error", "no_address", r"Unable to find (?:address|interface) for:? ?(\S+)"),
    _rule("gloo_interface", "error", "full_mesh", r"Gloo connectFullMesh failed"),
    # torch ProcessGroupGloo (vllm-project/vllm#7074, aws-samples/aws-do-eks#50): the host name
    # resolves to no local address, so Gloo binds to loopback and peers dial 127.x.
    _rule(
        "gloo_interface",
        "error",
        "loopback",
        r"Unable to resolve hostname to a \(local\) address",
        "resolve hostname",
    ),
    _rule(
        "gloo_interface",
        "error",
        "remote",
        r"SO_ERROR: (Connection refused|Connection timed out|No route to host), remote=\[?([0-9A-Fa-f.:]+?)\]?:(\d+)",
        ", remote=",
    ),
    _rule(
        "gloo_interface",
        "error",
        "connect",
        r"gloo.*?connect \[?([0-9A-Fa-f.:]+?)\]?:(\d+):? ?(Connection refused|Connection timed out|No route "
        r"to host)",
    ),
    _rule(
        "gloo_interface",
        "error",
        "c10d",
        r"client socket has (?:failed to connect|timed out after \d+\w* while trying to connect) to "
        r"\[?([\w.:-]+?)\]?:(\d+)",
        "client socket",
    ),
    # --- NCCL watchdog ---
    _rule("nccl_collective_timeout", "error", "watchdog", r"Watchdog caught collective operation timeout"),
    _rule(
        "nccl_collective_timeout",
        "error",
        "watchdog",
        r"WorkNCCL\(.*?OpType=(\w+).*?\) ran for (\d+) milliseconds before timing out",
    ),
    _rule(
        "nccl_collective_timeout",
        "error",
        "watchdog",
        r"watchdog (?:thread )?(?:got stuck|terminated with exception)|Heartbeat monitor timed out",
        "watchdog",
        "heartbeat",
    ),
    _rule("nccl_collective_timeout", "error", "watchdog", r"Some NCCL operations have failed or timed out"),
    # A peer that vanished mid-collective: the same symptom as a timeout, seen sooner.
    _rule(
        "nccl_collective_timeout",
        "warning",
        "remote",
        r"ncclRemoteError|remote process exiting prematurely",
        "ncclremoteerror",
        "prematurely",
    ),
    _rule(
        "nccl_collective_timeout",
        "error",
        "setup",
        r"retrieving ncclUniqueId from \[(\d+)\] via c10d key-value store.*?(?:wait timeout|timed out)",
    ),
    # --- the wrapper ---
    _rule("engine_core_init_failed", "error", "wrapper", r"Engine core initialization failed"),
    _rule("engine_core_init_failed", "error", "wrapper", r"EngineCore failed to start", "failed to start"),
    _rule("engine_core_init_failed", "error", "wrapper", r"Engine process failed to start", "engine process"),
)

# State markers for CUDA graph capture, matched on lines that passed the filter.
_CAPTURE_START_SOURCE = r"Capturing (?:CUDA ?graphs?|cudagraphs?|batches)|Profiling CUDA graph memory"
_CAPTURE_FRAME_SOURCE = (
    r"capture_(?:end|begin|model)\b|torch\.cuda\.graph\b|_capture_cudagraph|cudagraph_capture"
    r"|CUDAGraphWrapper|capture_graph|cuda_graph_runner|graph_capture"
)
_CAPTURE_END_SOURCE = (
    r"Graph capturing finished|init engine \(profile, create kv cache, warmup model\) took"
    r"|Starting vLLM API server|Application startup complete"
)
_CAPTURE_START = _rx(_CAPTURE_START_SOURCE)
_CAPTURE_FRAME = _rx(_CAPTURE_FRAME_SOURCE)
_CAPTURE_END = _rx(_CAPTURE_END_SOURCE)
# (regex, words): in an ASCII line holding none of the words the regex cannot match.
_CAPTURE_START_GATE = _gate(_CAPTURE_START_SOURCE)
_CAPTURE_FRAME_GATE = _gate(_CAPTURE_FRAME_SOURCE)
_CAPTURE_END_GATE = _gate(_CAPTURE_END_SOURCE)
# State markers for weight loading (issue 16 point 5). vLLM's wordings, the same in 0.17.x
# and current main: "Starting to load model %s..." and "Model loading took %s GiB and %.6f
# seconds" (vllm/v1/worker/gpu_model_runner.py load_model; the first opens the load, the
# second closes it after post-processing); "Loading safetensors checkpoint shards" (the tqdm
# desc in vllm/model_executor/model_loader/weight_utils.py safetensors_weights_iterator, first
# rank only; its _BAR_FORMAT "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt}": only
# the first print, "| 0/N", is a marker); "Loading weights took %.2f seconds" (default_loader.py load_weights, printed
# before process_weights_after_loading runs, so the load is still open); a
# process_weights_after_loading frame in a traceback (base_loader.py load_model -> utils.py).
_LOAD_START_SOURCE = (
    r"Starting to load model|Loading safetensors checkpoint shards: 0% Completed \| 0/|Loading weights took"
    r"|process_weights_after_loading"
)
_LOAD_END_SOURCE = r"Model loading took"
_LOAD_START = _rx(_LOAD_START_SOURCE)
_LOAD_END = _rx(_LOAD_END_SOURCE)
_LOAD_START_GATE = _gate(_LOAD_START_SOURCE)
_LOAD_END_GATE = _gate(_LOAD_END_SOURCE)
# Lines worth handing to the memory-log parser (its figures are quoted in summaries).
_MEMORY_HINTS = ("took", "kv cache", "actual usage", "free memory on device", "memory profiling", "takes")
_MAX_MEMORY_LINES = 512
_NODE_IP = re.compile(r"IP address of ([0-9A-Za-z][\w.:-]*?),")
