# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Which finding explains which: the precedence table, and the bounds every part shares."""

from __future__ import annotations

SEVERITIES = ("error", "warning", "info")
_SEVERITY_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}

# The precedence table. Findings are reported in this order: root causes first. Each
# entry names the findings it explains when both are present; the reason is in
# docs/diagnose.md. A wrapper (a finding that only ever reports that something else
# failed) is dropped when something above explains it; any other explained finding
# stays in the list, after its cause, and says so.
PRECEDENCE: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "nvidia_driver_unavailable",
        (
            "gpu_xid_error",
            "uma_driver_out_of_memory",
            "ray_placement_unsatisfiable",
            "cuda_oom",
            "nccl_collective_timeout",
            "engine_rpc_timeout",
            "engine_core_init_failed",
        ),
    ),
    ("gpu_xid_error", ("nccl_collective_timeout", "engine_rpc_timeout", "engine_core_init_failed")),
    ("gpu_arch_unsupported", ("engine_core_init_failed",)),
    ("ray_missing_in_image", ("ray_placement_unsatisfiable", "engine_core_init_failed")),
    ("model_files_unavailable", ("engine_core_init_failed",)),
    (
        "nccl_library_mismatch",
        (
            "nccl_socket_connect_failed",
            "nccl_ib_error",
            "nccl_collective_timeout",
            "engine_rpc_timeout",
            "engine_core_init_failed",
        ),
    ),
    (
        "ray_node_ip_mismatch",
        (
            "ray_placement_unsatisfiable",
            "gloo_interface",
            "nccl_socket_connect_failed",
            "nccl_collective_timeout",
            "engine_core_init_failed",
        ),
    ),
    (
        "worker_env_overwritten_by_head",
        (
            "gloo_interface",
            "nccl_socket_connect_failed",
            "nccl_ib_error",
            "nccl_collective_timeout",
            "engine_rpc_timeout",
            "engine_core_init_failed",
        ),
    ),
    ("gloo_interface", ("nccl_collective_timeout", "engine_core_init_failed")),
    ("nccl_socket_connect_failed", ("nccl_collective_timeout", "engine_core_init_failed")),
    (
        "rdma_memory_registration_failed",
        ("nccl_ib_error", "nccl_collective_timeout", "engine_rpc_timeout", "engine_core_init_failed"),
    ),
    ("nccl_ib_error", ("nccl_collective_timeout", "engine_core_init_failed")),
    ("ray_placement_unsatisfiable", ("engine_core_init_failed",)),
    (
        "cudagraph_memory_estimate_negative",
        (
            "ray_oom_kill",
            "uma_driver_out_of_memory",
            "cuda_graph_capture_oom",
            "cuda_oom",
            "engine_rpc_timeout",
            "engine_core_init_failed",
        ),
    ),
    (
        "ray_oom_kill",
        (
            "uma_driver_out_of_memory",
            "ray_gcs_lost",
            "cuda_graph_capture_oom",
            "cuda_oom",
            "nccl_collective_timeout",
            "engine_rpc_timeout",
            "engine_core_init_failed",
        ),
    ),
    (
        "uma_driver_out_of_memory",
        (
            "ray_gcs_lost",
            "cuda_graph_capture_oom",
            "cuda_oom",
            "nccl_collective_timeout",
            "engine_rpc_timeout",
            "engine_core_init_failed",
        ),
    ),
    ("ray_gcs_lost", ("nccl_collective_timeout", "engine_rpc_timeout", "engine_core_init_failed")),
    ("cuda_graph_capture_oom", ("cuda_oom", "nccl_collective_timeout", "engine_core_init_failed")),
    ("startup_memory_short", ("kv_cache_insufficient", "cuda_oom", "engine_core_init_failed")),
    ("kv_cache_insufficient", ("engine_core_init_failed",)),
    ("cuda_oom", ("nccl_collective_timeout", "engine_rpc_timeout", "engine_core_init_failed")),
    ("nccl_collective_timeout", ("engine_rpc_timeout", "engine_core_init_failed")),
    ("engine_rpc_timeout", ("engine_core_init_failed",)),
    ("engine_core_init_failed", ()),
)
FINDING_IDS: tuple[str, ...] = tuple(entry[0] for entry in PRECEDENCE)
_ORDER = {finding_id: index for index, finding_id in enumerate(FINDING_IDS)}
_EXPLAINS = dict(PRECEDENCE)
# Findings that only report that something else failed: hidden when explained.
WRAPPERS = frozenset({"engine_core_init_failed"})
# Warnings that name the cause of what follows: when they explain an error-severity
# finding of the same log, they are the root cause and become errors themselves.
CAUSE_WARNINGS = frozenset(
    {"worker_env_overwritten_by_head", "cudagraph_memory_estimate_negative", "uma_driver_out_of_memory"}
)

MAX_EVIDENCE = 6
# An evidence line longer than this is cut (the report quotes a line, not a blob).
MAX_EVIDENCE_CHARS = 2000
# How far (in physical lines) a CUDA graph capture frame may sit from an OOM line and
# still belong to the same traceback.
_CAPTURE_WINDOW = 80
_JUNCTION = 64
_RECORD_STARTS = ("(", "[", "INFO ", "WARNING ", "DEBUG ")
# The findings that carry the startup phase they hit (``phase``: "weight_loading" or
# "graph_capture", from the loading and capture lines above them in the same log): a
# memory kill during loading has another fix than one during capture (issue 16 point 5).
PHASE_FINDINGS = frozenset({"ray_oom_kill", "cuda_oom", "cuda_graph_capture_oom", "uma_driver_out_of_memory"})
