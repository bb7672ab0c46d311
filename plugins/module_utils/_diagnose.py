# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Diagnose failed vLLM / Ray / NCCL / driver starts from their logs.

The parser streams: every physical line is looked at once, noise lines cost a
handful of substring tests, and what is kept (findings, a few evidence lines each,
a short window of recent lines) is bounded, so a 100 MB log runs in constant memory.

Matching is on stable key phrases searched anywhere in the message, never on whole
lines, so new prefixes, loggers and wording around the phrase do not matter. Phrases
that a terminal wrapped over two physical lines are found across the line break.

Run it on files::

    python -m ansible_collections.sparkops.vllm.plugins.module_utils._diagnose LOG... [--json]
        [--context context.json]

It imports nothing from Ansible: the module ``sparkops.vllm.diagnose``, the runbooks
and the CLI all call :func:`diagnose_paths` / :func:`diagnose_text`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

try:  # Imported as part of the collection (module, tests).
    from ansible_collections.sparkops.vllm.plugins.module_utils._log_lines import (
        clean_physical,
        iter_path_chunks,
        normalize,
        strip_ansi_bytes,
    )
    from ansible_collections.sparkops.vllm.plugins.module_utils._vllm_memory_log import parse_memory_lines
except ImportError:  # pragma: no cover - copied next to _log_lines.py on its own
    from _log_lines import (  # type: ignore[no-redef]
        clean_physical,
        iter_path_chunks,
        normalize,
        strip_ansi_bytes,
    )
    from _vllm_memory_log import parse_memory_lines  # type: ignore[no-redef]

__all__ = [
    "FINDING_IDS",
    "PRECEDENCE",
    "Scanner",
    "diagnose_lines",
    "diagnose_paths",
    "diagnose_text",
    "format_report",
    "main",
]

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
            "cuda_oom",
            "ray_placement_unsatisfiable",
            "nccl_collective_timeout",
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
    ("gloo_interface", ("nccl_collective_timeout", "engine_core_init_failed")),
    ("nccl_socket_connect_failed", ("nccl_collective_timeout", "engine_core_init_failed")),
    ("nccl_ib_error", ("nccl_collective_timeout", "engine_core_init_failed")),
    ("ray_placement_unsatisfiable", ("engine_core_init_failed",)),
    (
        "ray_oom_kill",
        (
            "cuda_graph_capture_oom",
            "cuda_oom",
            "nccl_collective_timeout",
            "engine_core_init_failed",
        ),
    ),
    ("cuda_graph_capture_oom", ("cuda_oom", "nccl_collective_timeout", "engine_core_init_failed")),
    ("startup_memory_short", ("kv_cache_insufficient", "cuda_oom", "engine_core_init_failed")),
    ("kv_cache_insufficient", ("engine_core_init_failed",)),
    ("cuda_oom", ("nccl_collective_timeout", "engine_core_init_failed")),
    ("nccl_collective_timeout", ("engine_core_init_failed",)),
    ("engine_core_init_failed", ()),
)
FINDING_IDS: tuple[str, ...] = tuple(entry[0] for entry in PRECEDENCE)
_ORDER = {finding_id: index for index, finding_id in enumerate(FINDING_IDS)}
_EXPLAINS = dict(PRECEDENCE)
# Findings that only report that something else failed: hidden when explained.
WRAPPERS = frozenset({"engine_core_init_failed"})

MAX_EVIDENCE = 6
# How far (in physical lines) a CUDA graph capture frame may sit from an OOM line and
# still belong to the same traceback.
_CAPTURE_WINDOW = 80
_JUNCTION = 64
_RECORD_STARTS = ("(", "[", "INFO ", "WARNING ", "DEBUG ")

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
        "Fix the RoCE path NCCL uses: set `roce_network_nccl_ib_gid_index` (the RoCE v2 GID, often 3) and "
        "`roce_network_nccl_ib_hca` (the HCA roce_network detected) for NCCL_IB_GID_INDEX / NCCL_IB_HCA, "
        "and check `ib_interface` and the link MTU with the roce_network stage."
    ),
    "gloo_interface": (
        "Point torch.distributed and Gloo at the RoCE link: set host vars `ib_interface` "
        "(GLOO_SOCKET_IFNAME) and `ib_address` (VLLM_HOST_IP) on every host, and open the ports with "
        "`roce_network_firewall_open: true`. A 127.x peer address means the host name resolves to loopback."
    ),
    "nccl_collective_timeout": (
        "A rank stopped answering. Look above for what killed or cut it off; with no other finding, check "
        "the RoCE path (`roce_network_nccl_ib_hca`, `roce_network_nccl_ib_gid_index`, `ib_interface`) and "
        "that every rank runs the same image and `sparkops_tensor_parallel_size`."
    ),
    "nvidia_driver_unavailable": (
        "Repair the driver on that node before anything else: reboot after a driver update (a version "
        "mismatch), or install a driver branch listed in `preflight_driver_branch_allowlist`; preflight "
        "stops a deploy on this."
    ),
    "engine_core_init_failed": (
        "vLLM's wrapper hides the cause: run diagnose on the complete logs of every node (the worker lines "
        "above the wrapper), with `context`; without a cause, retry with `sparkops_cuda_graphs: false` and "
        "follow docs/runbooks/."
    ),
}


def _rx(pattern: str) -> re.Pattern[str]:
    """Compile a key phrase: case-insensitive, and any space may be missing or doubled.

    Terminal wrapping and re-flowed copies lose or add blanks; a phrase glued back
    together from two physical lines still matches.
    """
    return re.compile(pattern.replace(" ", r"\s*"), re.IGNORECASE)


_NUM = r"(-?\d+(?:\.\d+)?)"
_ADDR = r"([0-9A-Za-z][\w.:-]*?)"


@dataclass(frozen=True)
class Rule:
    """One key phrase: which finding it feeds, at what severity, and which variant.

    ``anchors`` are lower-case words of which every match contains one (derived from
    the pattern, or given where the derived word is too common); a line without any
    skips the regex, and a line without any rule's anchor is skipped altogether, which
    keeps a busy log cheap.

    ``needs`` are the lower-case words the pattern itself spells out, which every match
    in an ASCII line contains; a line that lacks one cannot match, so the regex is not
    run. Unlike the anchors they change no result, only the cost.
    """

    finding: str
    severity: str
    pattern: re.Pattern[str]
    kind: str
    anchors: tuple[str, ...]
    needs: tuple[str, ...] = ()


def _literal_words(pattern: str, shortest: int = 4) -> list[str] | None:
    """The literal words that every match of ``pattern`` must contain, in pattern order.

    Escapes, character classes, groups and optional or repeated characters are cut
    out, so what is left is spelt letter for letter in every match. ``None`` when an
    alternation outside any group leaves nothing certain.
    """
    text = re.sub(r"\\.", " ", pattern)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    previous = None
    while previous != text:
        previous = text
        text = re.sub(r"\([^()]*\)", " ", text)
    if "|" in text or "(" in text:
        return None
    text = re.sub(r".[?*]", " ", text)
    text = re.sub(r".\{[^}]*\}", " ", text)
    return re.findall(rf"[A-Za-z_/]{{{shortest},}}", text)


def _anchor(pattern: str) -> str | None:
    """The longest word that every match of ``pattern`` must contain, if one is certain."""
    words = _literal_words(pattern)
    return max(words, key=len).lower() if words else None


def _needs(pattern: str) -> tuple[str, ...]:
    """The words of ``pattern`` to test before running it (see :class:`Rule`)."""
    words = _literal_words(pattern, 3) or []
    return tuple(sorted({word.lower() for word in words}, key=len, reverse=True))


def _top_branches(pattern: str) -> list[str]:
    """``pattern`` split at each ``|`` that no group or character class encloses."""
    branches, depth, start, index, in_class = [], 0, 0, 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            # A "]" first in the class (after an optional "^") is a literal.
            if pattern[index + 1 : index + 2] == "^":
                index += 1
            if pattern[index + 1 : index + 2] == "]":
                index += 1
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            branches.append(pattern[start:index])
            start = index + 1
        index += 1
    branches.append(pattern[start:])
    return branches


def _gate(pattern: str) -> tuple[tuple[str, ...], ...] | None:
    """The words of each top-level branch of ``pattern``.

    An ASCII line that lacks a word of every branch cannot match. ``None`` when some
    branch spells out no certain word (the regex must always run).
    """
    gate = []
    for branch in _top_branches(pattern):
        found = _literal_words(branch, 3)
        if not found:
            return None
        gate.append(tuple(sorted({word.lower() for word in found}, key=len, reverse=True)))
    return tuple(gate)


def _rule(finding: str, severity: str, kind: str, pattern: str, *anchors: str) -> Rule:
    derived = _anchor(pattern)
    if not anchors and derived is None:
        raise ValueError(f"rule {finding}/{kind} needs explicit anchors: {pattern}")
    return Rule(finding, severity, _rx(pattern), kind, anchors or (derived,), _needs(pattern))


# Pseudo findings resolved at the end: "_oom" becomes cuda_graph_capture_oom or
# cuda_oom, "_socket_fallback" becomes an nccl_ib_error warning on a multi-node log.
# Order matters: the first rule that matches a line wins.
RULES: tuple[Rule, ...] = (
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
        r"NCCL WARN (?:Bootstrap|NET/Socket) ?: ?no (?:socket )?interface found",
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

# A line is looked at closely only when it holds one of these lower-case words: every
# rule's anchors, the CUDA graph capture markers, and the memory lines quoted in
# summaries. Everything else is noise and costs only these substring tests.
_MARKER_TOKENS = (
    "capturing",
    "profiling cuda graph",
    "capture_",
    "torch.cuda.graph",
    "cudagraph",
    "graph_capture",
    "cuda_graph",
    "init engine",
    "api server",
    "startup complete",
)
_MEMORY_TOKENS = ("took", "kv cache memory", "kv cache size", "actual usage", "free memory", "takes")
_ALL_TOKENS = list(
    dict.fromkeys([anchor for rule in RULES for anchor in rule.anchors] + [*_MARKER_TOKENS, *_MEMORY_TOKENS])
)
# A token that contains another adds nothing to the filter ("node_out_of_memory" and
# "memory"); dropping it keeps the per-line cost down.
TRIGGER_TOKENS: tuple[str, ...] = tuple(
    token for token in _ALL_TOKENS if not any(other != token and other in token for other in _ALL_TOKENS)
)

# Each anchor with the rules (by index, in table order) it opens.
_ANCHOR_RULES: tuple[tuple[str, tuple[int, ...]], ...] = tuple(
    (anchor, tuple(index for index, rule in enumerate(RULES) if anchor in rule.anchors))
    for anchor in dict.fromkeys(anchor for rule in RULES for anchor in rule.anchors)
)
# Every anchor holds a trigger token: a line's tokens name the only anchors to test.
_TOKEN_ANCHORS: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = {
    token: tuple(entry for entry in _ANCHOR_RULES if token in entry[0]) for token in TRIGGER_TOKENS
}


def _ascii_lower(text: str) -> str:
    """``text.lower()``, with any non-ASCII character replaced by ``?``.

    It holds exactly the ASCII words the lower-cased text holds (no token has a
    ``?``), and substring tests on an ASCII string are much cheaper.
    """
    low = text.lower()
    return low if low.isascii() else low.encode("ascii", "replace").decode("ascii")


# -- the block prefilter ------------------------------------------------------
#
# A file is read in blocks of whole lines. Instead of testing every line for every
# trigger token, a few regex passes over the whole block (lower-cased, line breaks
# removed, so a token a terminal cut in two is found too) name the few lines that
# hold a token or sit next to one; only those take the per-line path. Each pass
# looks for one "pivot" letter, rare in logs, and checks the tokens around it.
_PIVOT_PREFERENCE = "kvbfgudlo"
# Bytes of the last _JUNCTION characters of a line, at most (UTF-8).
_TAIL_BYTES = 4 * _JUNCTION


def _pivot_rank(char: str) -> int:
    found = _PIVOT_PREFERENCE.find(char)
    return found if found >= 0 else len(_PIVOT_PREFERENCE) + ord(char)


def _trie_source(node: dict[str, Any]) -> str:
    alternatives = []
    for key in sorted(node):
        if key == "":
            alternatives.extend(f"(?<={re.escape(token)})" for token in sorted(node[key]))
        else:
            alternatives.append(re.escape(key) + _trie_source(node[key]))
    return alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"


def _pivot_scanners(tokens: Iterable[str]) -> tuple[tuple[re.Pattern[bytes], int, int, tuple[str, ...]], ...]:
    """One ``(regex, before, after, tokens)`` per pivot letter.

    The regex matches the pivot letter of any of ``tokens`` (the rest of the token is
    checked by look-ahead and look-behind, so overlapping tokens are all found, and a
    line holds one of ``tokens`` only where the regex matches); the token lies within
    ``before`` bytes before and ``after`` bytes from the match start.
    """
    groups: dict[str, list[tuple[int, str]]] = {}
    for token in tokens:
        if not token.isascii() or token != token.lower():
            raise ValueError(f"trigger token {token!r} is not lower-case ASCII")
        index = min(range(len(token)), key=lambda at, token=token: _pivot_rank(token[at]))
        groups.setdefault(token[index], []).append((index, token))
    scanners = []
    for pivot, items in sorted(groups.items()):
        tree: dict[str, Any] = {}
        for index, token in items:
            node = tree
            for char in token[index + 1 :]:
                node = node.setdefault(char, {})
            node.setdefault("", set()).add(token)
        source = re.escape(pivot) + "(?=" + _trie_source(tree) + ")"
        before = max(index for index, _ in items)
        after = max(len(token) - index for index, token in items)
        ordered = tuple(token for _, token in items)
        scanners.append((re.compile(source.encode("ascii")), before, after, ordered))
    return tuple(scanners)


_PIVOT_SCANNERS = _pivot_scanners(TRIGGER_TOKENS)
# The tokens of the scanners in a bit mask (bit i: _PIVOT_SCANNERS[i]), filled on use.
_MASK_TOKENS: dict[int, tuple[str, ...]] = {}


def _mask_tokens(mask: int) -> tuple[str, ...]:
    tokens = _MASK_TOKENS.get(mask)
    if tokens is None:
        chosen = {token for bit, entry in enumerate(_PIVOT_SCANNERS) if mask >> bit & 1 for token in entry[3]}
        tokens = _MASK_TOKENS[mask] = tuple(token for token in TRIGGER_TOKENS if token in chosen)
    return tokens


# Characters whose str.lower() holds ASCII letters (U+0130, U+212A), UTF-8 encoded: a
# line with one could hold a token that the bytes do not spell out.
_LOWER_TO_ASCII = (b"\xc4\xb0", b"\xe2\x84\xaa")
# ip= after an ASCII non-word byte or at a line start; after a non-ASCII character
# whether \b holds depends on the character, so those lines take the per-line path.
# (Both open with the literal "ip=", which the regex engine finds fast.)
_IP_BYTES = re.compile(rb"ip=(?<![A-Za-z0-9_\x80-\xff]ip=)([0-9A-Fa-f.:]+)")
_IP_AFTER_NON_ASCII = re.compile(rb"ip=(?<=[\x80-\xff]ip=)")
_RECORD_STARTS_BYTES = tuple(start.encode("ascii") for start in _RECORD_STARTS)
_E_LINE = re.compile(rb"\nE   ")


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
# Lines worth handing to the memory-log parser (its figures are quoted in summaries).
_MEMORY_HINTS = ("took", "kv cache", "actual usage", "free memory on device", "memory profiling", "takes")
_MAX_MEMORY_LINES = 512
_NODE_IP = re.compile(r"IP address of ([0-9A-Za-z][\w.:-]*?),")


def _candidate_rules(text: str, low: str, tokens: Iterable[str] | None = None) -> list[Rule]:
    """The rules, in table order, whose anchor ``low`` holds and that ``text`` may match.

    ``low`` is :func:`_ascii_lower` of ``text``; ``tokens``, when given, are the
    trigger tokens of a line ``text`` was cut from (only anchors holding one can be
    in ``low``). A rule whose ``needs`` an ASCII ``text`` lacks cannot match it and
    is left out; for any other text only the anchors decide.
    """
    if tokens is None:
        anchors = _ANCHOR_RULES
    else:
        anchors = tuple(dict.fromkeys(entry for token in tokens for entry in _TOKEN_ANCHORS[token]))
    opened = [indexes for anchor, indexes in anchors if anchor in low]
    if not opened:
        return []
    order = opened[0] if len(opened) == 1 else sorted(set().union(*opened))
    if not text.isascii():
        return [RULES[index] for index in order]
    rules = []
    for index in order:
        rule = RULES[index]
        for word in rule.needs:
            if word not in low:
                break
        else:
            rules.append(rule)
    return rules


def _may_match(gate: tuple[tuple[str, ...], ...] | None, low: str, plain: bool) -> bool:
    """False only when an ASCII (``plain``) line lacks a word of every branch of ``gate``."""
    if gate is None or not plain:
        return True
    for words in gate:
        for word in words:
            if word not in low:
                break
        else:
            return True
    return False


@dataclass
class _Event:
    finding: str
    severity: str
    kind: str
    line: int
    text: str
    host: str | None
    path: str | None
    groups: tuple[str | None, ...]
    repeated: int = 1
    during_capture: bool = False


@dataclass
class _Finding:
    finding: str
    severity: str = "info"
    first_line: int = 0
    first_path: str | None = None
    count: int = 0
    evidence: list[dict[str, Any]] = field(default_factory=list)
    seen: set[tuple[str, str | None]] = field(default_factory=set)
    kinds: dict[str, tuple[str | None, ...]] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    during_capture: bool = False

    def add(self, event: _Event) -> None:
        if self.count == 0:
            self.first_line, self.first_path = event.line, event.path
        self.count += event.repeated
        if _SEVERITY_RANK[event.severity] < _SEVERITY_RANK[self.severity]:
            self.severity = event.severity
        # Keep the groups of the most specific match seen for each variant.
        known = self.kinds.get(event.kind)
        if known is None or sum(g is not None for g in event.groups) > sum(g is not None for g in known):
            self.kinds[event.kind] = event.groups
        if event.host and event.host not in self.hosts and len(self.hosts) < 32:
            self.hosts.append(event.host)
        self.during_capture = self.during_capture or event.during_capture
        key = (event.text.strip(), event.host)
        if key in self.seen or len(self.evidence) >= MAX_EVIDENCE:
            return
        self.seen.add(key)
        item: dict[str, Any] = {"line": event.line, "text": event.text.strip()}
        if event.host:
            item["host"] = event.host
        if event.path:
            item["path"] = event.path
        if event.repeated > 1:
            item["repeated"] = event.repeated
        self.evidence.append(item)


class _Context:
    """The optional ``context``: inventory addresses, the memory plan and settings."""

    def __init__(self, context: Mapping[str, Any] | None) -> None:
        context = dict(context or {})
        self.hosts: dict[str, dict[str, Any]] = {
            str(name): dict(values or {}) for name, values in (context.get("hosts") or {}).items()
        }
        self.default_host = context.get("host")
        self.path_hosts = {str(k): str(v) for k, v in (context.get("path_hosts") or {}).items()}
        self.memory_plan = dict(context.get("memory_plan") or {})
        self.settings = dict(context.get("settings") or {})
        self.addresses: dict[str, tuple[str, str]] = {}
        for name, values in self.hosts.items():
            if values.get("ib_address"):
                self.addresses[str(values["ib_address"])] = (name, "ib")
            for address in values.get("management_addresses") or ():
                self.addresses.setdefault(str(address), (name, "management"))
            if values.get("ansible_host"):
                self.addresses.setdefault(str(values["ansible_host"]), (name, "management"))

    def host_name(self, host: str | None) -> str | None:
        if host is None:
            return None
        if host in self.addresses:
            return self.addresses[host][0]
        return host

    def describe_address(self, address: str) -> str:
        """Say whose address this is, per the inventory."""
        owner = self.addresses.get(address)
        if owner is None:
            if not self.hosts:
                return ""
            ib = ", ".join(
                f"{name} {values['ib_address']}"
                for name, values in self.hosts.items()
                if values.get("ib_address")
            )
            return f" {address} is no host's `ib_address` in the inventory ({ib})."
        name, kind = owner
        ib_address = self.hosts[name].get("ib_address")
        if kind == "management":
            return f" {address} is {name}'s management address, not its ib_address {ib_address}."
        return f" {address} is {name}'s ib_address."


class Scanner:
    """Streaming diagnosis: :meth:`feed` physical lines, then :meth:`finish`."""

    def __init__(self, context: Mapping[str, Any] | None = None) -> None:
        self.context = _Context(context)
        self.findings: dict[str, _Finding] = {}
        self.lines_read = 0
        self.bytes_read = 0
        self.paths: list[str] = []
        self.memory: dict[str, Any] = {}
        self._memory_lines: list[str] = []
        self._path: str | None = None
        self._path_host: str | None = None
        self._prev_line = ""
        self._prev_number = 0
        self._prev_matched = False
        # The last line normalised and its result: a wrapped continuation joins to it.
        self._normalized: tuple[str, tuple[str, str | None, str | None, str | None, int, bool]] = (
            "",
            normalize(""),
        )
        self._capture_active = False
        self._capture_finished: set[str | None] = set()
        self._capture_frames: deque[int] = deque(maxlen=32)
        self._pending_oom: deque[_Event] = deque(maxlen=64)
        self._oom_events: list[_Event] = []
        self._seen_hosts: set[str] = set()
        self._socket_fallback: list[_Event] = []

    # -- input -----------------------------------------------------------------
    def start_path(self, path: str | None) -> None:
        """Begin a new file: line numbers restart, wrapped lines never join across files."""
        self._path = path
        self._path_host = self.context.path_hosts.get(path or "") or self.context.default_host
        self._prev_line = ""
        self._prev_number = 0
        if path is not None:
            self.paths.append(path)

    def feed_lines(self, lines: Iterable[str]) -> None:
        """Feed physical lines of the current file, numbering them from 1."""
        feed = self.feed
        for number, raw in enumerate(lines, 1):
            feed(raw, number)

    def feed(self, raw: str, number: int) -> None:
        """Look at one physical line."""
        self.lines_read += 1
        self.bytes_read += len(raw)
        self._look(clean_physical(raw), number)

    def feed_file(self, path: str, block_size: int = 1 << 20) -> None:
        """Feed the current file from ``path``: the same as :meth:`feed_lines`, faster.

        The file is read in blocks of whole lines; a few regex passes per block (see
        ``_PIVOT_SCANNERS``) pick the lines that :meth:`feed` would look at closely:
        those holding a trigger token, those a wrapped token may continue into, and
        the few whose bytes do not tell (carriage returns, ``E   `` markers, the
        characters whose lower case is ASCII). Only those are decoded and fed one by
        one; the state every other line would leave behind is restored when needed.
        """
        number = 0
        # The last line of the block before, when it was not fed one by one.
        held: bytes | None = None
        for block in iter_path_chunks(path, block_size):
            lines = block.split(b"\n")
            if block.endswith(b"\n"):
                lines.pop()
            count = len(lines)
            self.lines_read += count
            self.bytes_read += len(block) if block.isascii() else len(block.decode("utf-8", "replace"))
            picked = self._pick_lines(block, lines)
            if number:
                # A block's passes cannot see a token cut by the break before its first
                # line: that line's seam test is run as the line path runs it.
                picked.setdefault(0, 0)
            # The index of the last line fed one by one (-1: the line before the block,
            # when it was fed or there is none).
            fed = -1 if held is None else -2
            for index in sorted(picked):
                previous = lines[index - 1] if index else held
                if index != fed + 1 and previous is not None:
                    self._restore(previous, number + index)
                mask = picked[index]
                self._look(
                    clean_physical(lines[index].decode("utf-8", "replace")),
                    number + index + 1,
                    TRIGGER_TOKENS if mask < 0 else _mask_tokens(mask),
                )
                fed = index
            held = None if fed == count - 1 else lines[-1]
            number += count
        if held is not None:
            self._restore(held, number)

    def _restore(self, raw: bytes, number: int) -> None:
        """Leave the state :meth:`feed` leaves after a line it did not look at closely."""
        self._prev_line = clean_physical(raw.decode("utf-8", "replace"))
        self._prev_number = number
        self._prev_matched = False

    def _pick_lines(self, block: bytes, lines: list[bytes]) -> dict[int, int]:
        """The lines of ``block`` that must be fed one by one, by index.

        Each maps to a mask of the scanners that matched in it: the line's tokens are
        among theirs (-1: any token, the bytes do not tell). Notes the hosts (``ip=``)
        of the lines left out on the way.
        """
        stripped = strip_ansi_bytes(block)
        stripped_lines = lines if stripped is block else stripped.split(b"\n")[: len(lines)]
        joined = stripped.lower().replace(b"\n", b"")
        starts = list(accumulate(map(len, stripped_lines), initial=0))
        last_byte = len(joined) - 1
        picked: dict[int, int] = {}
        count = len(lines)
        for bit, (scanner, before, after, _tokens) in enumerate(_PIVOT_SCANNERS):
            flag = 1 << bit
            for match in scanner.finditer(joined):
                at = match.start()
                line = bisect_right(starts, at) - 1
                end = starts[line + 1]
                if at - before < starts[line] or at + after > end:
                    # The token may cross line breaks: take every line it may touch.
                    first = bisect_right(starts, max(at - before, 0)) - 1
                    line = bisect_right(starts, min(at + after - 1, last_byte)) - 1
                    end = starts[line + 1]
                    for index in range(first, line + 1):
                        picked[index] = picked.get(index, 0) | flag
                else:
                    picked[line] = picked.get(line, 0) | flag
                # The seam test of the next line sees this line's last _JUNCTION
                # characters; it runs on a line that is not empty and starts no record.
                if at + after > end - (_JUNCTION if stripped_lines[line].isascii() else _TAIL_BYTES):
                    following = line + 1
                    if (
                        following < count
                        and stripped_lines[following]
                        and not stripped_lines[following].startswith(_RECORD_STARTS_BYTES)
                    ):
                        picked.setdefault(following, 0)
        plain = stripped.isascii()
        odd = (
            b"\r" in stripped
            or stripped.startswith(b"E   ")
            or _E_LINE.search(stripped) is not None
            or (not plain and any(code[-1:] in stripped and code in stripped for code in _LOWER_TO_ASCII))
        )
        note_hosts = len(self._seen_hosts) < 64 and b"ip=" in stripped
        ambiguous_ip = note_hosts and not plain and _IP_AFTER_NON_ASCII.search(stripped) is not None
        if not odd and not ambiguous_ip:
            if note_hosts:
                self._add_hosts(_IP_BYTES.findall(stripped))
            return picked
        hosts = []
        for index, line in enumerate(stripped_lines):
            if b"\r" in line or any(code in line for code in _LOWER_TO_ASCII):
                picked[index] = -1
                if index + 1 < count:
                    picked.setdefault(index + 1, 0)
                continue
            if line.startswith(b"E   ") or _IP_AFTER_NON_ASCII.search(line):
                picked.setdefault(index, 0)
            if note_hosts and b"ip=" in line:
                hosts.extend(_IP_BYTES.findall(line))
        self._add_hosts(hosts)
        return picked

    def _add_hosts(self, hosts: Iterable[bytes]) -> None:
        # The lines fed one by one note their own hosts. The set is filled a block at a
        # time rather than a line at a time, which can only differ once it holds 64
        # addresses, where all that is read from it (more than one) holds either way.
        if len(self._seen_hosts) < 64:
            self._seen_hosts.update(host.decode("ascii") for host in set(hosts))

    def _look(self, line: str, number: int, among: tuple[str, ...] = TRIGGER_TOKENS) -> None:
        """Look at one cleaned physical line; ``among`` holds every trigger token it may hold."""
        low = _ascii_lower(line)
        tokens = tuple(filter(low.__contains__, among))
        if "ip=" in low:
            self._note_hosts(line)
        prev = self._prev_line
        junction = False
        # A line that opens with a process prefix or log level starts a record of its own,
        # so it cannot be the tail of a wrapped phrase.
        if prev and line and not tokens and not line.startswith(_RECORD_STARTS):
            # A key phrase cut in two by a terminal: test the seam only.
            head = line[4:] if line.startswith("E   ") else line
            seam = _ascii_lower(prev[-_JUNCTION:] + head[:_JUNCTION])
            junction = any(map(seam.__contains__, TRIGGER_TOKENS))
        self._prev_matched = self._examine(line, number, prev, tokens) if tokens or junction else False
        self._prev_line = line
        self._prev_number = number

    # -- matching --------------------------------------------------------------
    def _note_hosts(self, line: str) -> None:
        if len(self._seen_hosts) < 64:
            for match in re.finditer(r"\bip=([0-9A-Fa-f.:]+)", line):
                self._seen_hosts.add(match.group(1))

    def _examine(self, line: str, number: int, prev: str, tokens: tuple[str, ...]) -> bool:
        normalized = normalize(line)
        text, host, source, _level, repeated, headed = normalized
        host = self.context.host_name(host or self._path_host)
        low = _ascii_lower(text)
        # Without a token in the line no anchor is in it, and no rule can match.
        matched = bool(tokens) and self._match(
            text, low, tokens=tokens, number=number, host=host, source=source, repeated=repeated
        )
        if not headed and prev and not self._prev_matched:
            # Terminal-wrapped continuation: join it to the line before and keep only
            # a match that crosses the seam (each half was looked at on its own).
            known, prev_normalized = self._normalized
            if known != prev:
                prev_normalized = normalize(prev)
            prev_text, prev_host, prev_source, _l, prev_repeated, _h = prev_normalized
            joined = prev_text + text
            seam = len(prev_text)
            around = _ascii_lower(joined[max(0, seam - _JUNCTION) : seam + _JUNCTION])
            rules = (
                _candidate_rules(joined, _ascii_lower(joined))
                if any(token in around for token in TRIGGER_TOKENS)
                else ()
            )
            for rule in rules:
                found = rule.pattern.search(joined)
                if found and found.start() < seam < found.end():
                    self._record(
                        rule,
                        found=found,
                        text=joined,
                        number=self._prev_number,
                        host=self.context.host_name(prev_host or self._path_host),
                        source=prev_source,
                        repeated=prev_repeated,
                    )
                    matched = True
                    break
        self._normalized = (line, normalized)
        self._markers(text, low, number, source)
        return matched

    def _match(
        self,
        text: str,
        low: str,
        *,
        tokens: tuple[str, ...],
        number: int,
        host: str | None,
        source: str | None,
        repeated: int,
    ) -> bool:
        for rule in _candidate_rules(text, low, tokens):
            found = rule.pattern.search(text)
            if found:
                self._record(
                    rule, found=found, text=text, number=number, host=host, source=source, repeated=repeated
                )
                return True
        return False

    def _record(
        self,
        rule: Rule,
        *,
        found: re.Match[str],
        text: str,
        number: int,
        host: str | None,
        source: str | None,
        repeated: int,
    ) -> None:
        groups = found.groups()
        if rule.finding == "ray_oom_kill" and rule.kind in {"usage", "pressure"} and groups[0]:
            # Ray names the node whose memory ran out; that is the host that matters.
            host = self.context.host_name(groups[0])
        during_capture = self._capture_active and source not in self._capture_finished
        event = _Event(
            rule.finding,
            rule.severity,
            rule.kind,
            number,
            text,
            host,
            self._path,
            groups,
            repeated,
            during_capture,
        )
        if rule.finding == "_oom":
            self._record_oom(event)
        elif rule.finding == "_socket_fallback":
            if len(self._socket_fallback) < MAX_EVIDENCE:
                self._socket_fallback.append(event)
        else:
            self._add(event)

    def _record_oom(self, event: _Event) -> None:
        near = any(event.line - frame <= _CAPTURE_WINDOW for frame in self._capture_frames)
        event.during_capture = event.during_capture or near
        if len(self._oom_events) < 256:
            self._oom_events.append(event)
            if not event.during_capture:
                self._pending_oom.append(event)
        else:
            # Bounded memory: past 256 OOM lines only the count grows.
            self._add(
                _Event(
                    "cuda_oom",
                    event.severity,
                    event.kind,
                    event.line,
                    event.text,
                    event.host,
                    event.path,
                    event.groups,
                    event.repeated,
                )
            )

    def _markers(self, text: str, low: str, number: int, source: str | None) -> None:
        plain = text.isascii()
        if _may_match(_CAPTURE_START_GATE, low, plain) and _CAPTURE_START.search(text):
            self._capture_active = True
            self._capture_finished.clear()
        if _may_match(_CAPTURE_FRAME_GATE, low, plain) and _CAPTURE_FRAME.search(text):
            self._capture_frames.append(number)
            # A traceback printed after its exception line (Ray's format): the OOM
            # just above belongs to the capture too.
            for event in self._pending_oom:
                if 0 <= number - event.line <= _CAPTURE_WINDOW and event.path == self._path:
                    event.during_capture = True
        if _may_match(_CAPTURE_END_GATE, low, plain) and _CAPTURE_END.search(text):
            if source is None or "graph capturing finished" not in low:
                self._capture_active = False
            else:
                self._capture_finished.add(source)
        if len(self._memory_lines) < _MAX_MEMORY_LINES and any(hint in low for hint in _MEMORY_HINTS):
            self._memory_lines.append(text)

    def _add(self, event: _Event) -> None:
        finding = self.findings.get(event.finding)
        if finding is None:
            finding = self.findings[event.finding] = _Finding(event.finding)
        finding.add(event)

    # -- output ----------------------------------------------------------------
    def _sharpen_with_context(self) -> None:
        """An address the inventory says is wrong turns a Ray hint into an error."""
        acc = self.findings.get("ray_node_ip_mismatch")
        if acc is None or not self.context.hosts:
            return
        for item in acc.evidence:
            found = _NODE_IP.search(item["text"])
            if found and self.context.addresses.get(found.group(1), ("", "unknown"))[1] != "ib":
                acc.severity = "error"

    def _evidence_order(self, item: Mapping[str, Any]) -> tuple[int, int]:
        path = item.get("path")
        return (self.paths.index(path) if path in self.paths else 0, item["line"])

    def finish(self) -> dict[str, Any]:
        """Resolve pending classifications, apply the precedence table, and report."""
        if self._memory_lines:
            self.memory = parse_memory_lines(self._memory_lines)
            self.memory.pop("lines_matched", None)
        for event in self._oom_events:
            event.finding = "cuda_graph_capture_oom" if event.during_capture else "cuda_oom"
            self._add(event)
        self._oom_events.clear()
        multi_node = len(self._seen_hosts) > 1 or len(self.context.hosts) > 1
        if multi_node:
            for event in self._socket_fallback:
                event.finding = "nccl_ib_error"
                self._add(event)

        present = set(self.findings)
        explained_by: dict[str, list[str]] = {}
        for cause in FINDING_IDS:
            if cause not in present:
                continue
            for effect in _EXPLAINS[cause]:
                if effect in present:
                    explained_by.setdefault(effect, []).append(cause)

        self._sharpen_with_context()
        findings = []
        explained = []
        for finding_id in sorted(present, key=_ORDER.__getitem__):
            acc = self.findings[finding_id]
            causes = explained_by.get(finding_id, [])
            hidden = bool(causes) and finding_id in WRAPPERS
            if causes:
                explained.append({"id": finding_id, "explained_by": causes, "reported": not hidden})
            if hidden:
                continue
            summary = _SUMMARIES[finding_id](acc, self)
            if causes:
                summary += f" Probably a consequence of {', '.join(causes)} (reported above)."
            findings.append(
                {
                    "id": finding_id,
                    "severity": acc.severity,
                    "summary": summary,
                    "fix": _fix(finding_id, acc, self),
                    "evidence": sorted(acc.evidence, key=self._evidence_order),
                }
            )
        return {
            "findings": findings,
            "root_cause": findings[0]["id"] if findings and findings[0]["severity"] == "error" else None,
            "explained": explained,
            "memory": dict(self.memory),
            "lines_read": self.lines_read,
            "paths": list(self.paths),
        }


# -- summaries ---------------------------------------------------------------


def _where(acc: _Finding) -> str:
    if not acc.hosts:
        return ""
    if len(acc.hosts) == 1:
        return f" on {acc.hosts[0]}"
    return " on " + ", ".join(acc.hosts[:4]) + (" and more" if len(acc.hosts) > 4 else "")


def _times(acc: _Finding) -> str:
    return f" ({acc.count} log lines)" if acc.count > 1 else ""


def _sum_ray_oom(acc: _Finding, scanner: Scanner) -> str:
    text = f"Ray's memory monitor killed a worker{_where(acc)}"
    usage = acc.kinds.get("usage")
    legacy = acc.kinds.get("legacy")
    threshold = acc.kinds.get("threshold")
    if usage:
        address, used, total, fraction, limit = usage
        text += (
            f": node {address} used {used} / {total} GB ({float(fraction):.2%}), over the threshold {limit}"
        )
        text += (
            "." + scanner.context.describe_address(address) if address in scanner.context.addresses else "."
        )
    elif legacy and legacy[0]:
        pct, node, used, total = legacy[:4]
        text += f": more than {pct}% of the memory on {node} was used ({used} / {total} GB)."
    elif threshold:
        text += f": memory use exceeded the threshold {threshold[0]}."
    else:
        text += "."
    if acc.during_capture:
        text += " It happened during CUDA graph capture, a transient peak after the weights loaded."
    kv = scanner.memory.get("kv_cache_gib")
    if kv is not None:
        text += f" vLLM had already reported {kv} GiB of KV cache, so the model itself fit."
    text += (
        " On unified memory (DGX Spark) GPU allocations count as host memory, so Ray sees vLLM's claim;"
        " vLLM then only says that the engine failed."
    )
    return text


def _sum_graph_oom(acc: _Finding, scanner: Scanner) -> str:
    text = f"CUDA ran out of memory while capturing CUDA graphs{_where(acc)}{_times(acc)}."
    kv = scanner.memory.get("kv_cache_gib")
    if kv is not None:
        text += f" The weights and the KV cache ({kv} GiB) were allocated; the capture needed more on top."
    return text


def _sum_startup(acc: _Finding, scanner: Scanner) -> str:
    short = acc.kinds.get("free_less")
    profiling = acc.kinds.get("profiling")
    if short and short[0] is not None:
        free, total, util, want = short
        return (
            f"vLLM found only {free} of {total} GiB free at startup{_where(acc)}, less than the "
            f"{want} GiB that gpu_memory_utilization {util} asks for: another process holds memory."
        )
    if profiling and profiling[0] is not None:
        return (
            f"Free memory changed while vLLM profiled{_where(acc)} (from {profiling[0]} to {profiling[1]} "
            "GiB): another process allocated or released memory during startup."
        )
    return f"Free memory at startup is less than the desired GPU memory utilization{_where(acc)}."


def _sum_kv(acc: _Finding, scanner: Scanner) -> str:
    parts = []
    max_len = acc.kinds.get("max_len")
    tokens = acc.kinds.get("max_len_tokens")
    negative = acc.kinds.get("negative")
    if acc.kinds.get("no_blocks") is not None:
        parts.append("vLLM had no memory left for KV cache blocks after loading the weights")
    if negative is not None:
        parts.append(f"vLLM computed {negative[0]} GiB available for the KV cache")
    serve_len = acc.kinds.get("serve_len")
    kv_need = acc.kinds.get("kv_need")
    if max_len:
        parts.append(
            f"the max model length {max_len[0]} needs {max_len[1]} GiB of KV cache but only {max_len[2]} GiB "
            "is available"
        )
    elif serve_len or kv_need:
        length = f" {serve_len[0]}" if serve_len else ""
        need = f": {kv_need[0]} GiB needed, {kv_need[1]} GiB available" if kv_need else ""
        parts.append(f"the KV cache cannot hold one request of the max model length{length}{need}")
    if tokens:
        parts.append(f"the max model length {tokens[0]} exceeds the {tokens[1]} tokens the KV cache can hold")
    estimate = acc.kinds.get("estimate")
    if estimate:
        parts.append(f"vLLM estimates a max model length of {estimate[0]} would fit")
    if not parts:
        parts.append("the KV cache is too small")
    return f"KV cache insufficient{_where(acc)}: " + "; ".join(parts) + "."


def _sum_cuda_oom(acc: _Finding, scanner: Scanner) -> str:
    kinds = set(acc.kinds)
    if kinds <= {"kernel", "earlyoom"}:
        text = f"The host ran out of memory{_where(acc)} and the kernel or earlyoom killed a process"
        kernel = acc.kinds.get("kernel")
        if kernel:
            text += f" (pid {kernel[0]}, {kernel[1]})"
        return text + "; on unified memory this is the GPU running out too."
    text = f"CUDA out of memory{_where(acc)}{_times(acc)}"
    torch = acc.kinds.get("torch")
    if torch and torch[0]:
        text += f" (tried to allocate {torch[0]})"
    return text + "."


def _sum_ip(acc: _Finding, scanner: Scanner) -> str:
    parts = []
    node_ip = acc.kinds.get("node_ip")
    if node_ip:
        addresses = []
        for item in acc.evidence:
            found = _NODE_IP.search(item["text"])
            if found and found.group(1) not in addresses:
                addresses.append(found.group(1))
        shown = ", ".join(addresses) or node_ip[0]
        text = (
            f"A Ray client registered with an address no local raylet uses ({shown}): Ray, vLLM and "
            "torch.distributed disagree about this node's address."
        )
        for address in addresses[:4]:
            text += scanner.context.describe_address(address)
        parts.append(text)
    if "unique_ip" in acc.kinds:
        parts.append(
            "vLLM saw several Ray nodes with the same IP address (VLLM_HOST_IP set alike on two nodes)."
        )
    if "driver_node" in acc.kinds:
        parts.append(
            "Ray placed no GPU on the node vLLM's driver runs on: VLLM_HOST_IP does not match the address "
            "the head's raylet registered with."
        )
    gcs = acc.kinds.get("gcs")
    if gcs:
        parts.append(
            f"A node could not reach Ray's GCS at {gcs[0]}." + scanner.context.describe_address(gcs[0] or "")
        )
    return " ".join(parts)


def _sum_placement(acc: _Finding, scanner: Scanner) -> str:
    parts = []
    request = (acc.kinds.get("no_node_types") or acc.kinds.get("unschedulable") or (None,))[0]
    if request:
        parts.append(f"Ray cannot place the resource request {request}")
        node = re.search(r"'node:([\d.]+)'", request)
        if node:
            parts.append(
                f"it asks for the node with address {node.group(1)}, which Ray does not have"
                + scanner.context.describe_address(node.group(1)).rstrip(".")
            )
    elif "no_node_types" in acc.kinds or "timeout" in acc.kinds:
        parts.append("Ray cannot form vLLM's placement group")
    if "waiting" in acc.kinds:
        parts.append(f"vLLM waited {acc.kinds['waiting'][0]} s for its placement group")
    if "no_gpu" in acc.kinds:
        parts.append("the node vLLM runs on has no GPU in Ray")
    too_few = acc.kinds.get("too_few")
    if too_few:
        if too_few[0]:
            parts.append(f"tensor parallel size {too_few[0]} exceeds the {too_few[1]} GPUs available")
        else:
            parts.append("more GPUs were requested than the cluster offers")
    tp = scanner.context.settings.get("sparkops_tensor_parallel_size")
    if tp:
        parts.append(f"sparkops_tensor_parallel_size is {tp}")
    return f"Placement unsatisfiable{_where(acc)}: " + "; ".join(parts) + "."


def _sum_socket(acc: _Finding, scanner: Scanner) -> str:
    connect = acc.kinds.get("connect")
    if connect and connect[0]:
        peer = re.sub(r"<\d+>$", "", connect[0])
        why = f" ({connect[1].strip()})" if len(connect) > 1 and connect[1] else ""
        text = f"NCCL could not open a TCP connection{_where(acc)} to {peer}{why}."
        return text + scanner.context.describe_address(peer)
    if "no_interface" in acc.kinds:
        return f"NCCL found no socket interface{_where(acc)}: NCCL_SOCKET_IFNAME names no usable interface."
    return f"NCCL's socket connections failed{_where(acc)}."


def _sum_ib(acc: _Finding, scanner: Scanner) -> str:
    ibv = acc.kinds.get("ibv")
    parts = []
    if ibv:
        errno = f" with errno {ibv[1]}" if len(ibv) > 1 and ibv[1] else ""
        parts.append(f"NCCL's RDMA setup failed{_where(acc)}: {ibv[0]}{errno}")
        if ibv[0] == "ibv_modify_qp":
            parts.append(
                "queue pair setup between the nodes timed out, typically a wrong RoCE GID index or HCA"
            )
    if "completion" in acc.kinds:
        parts.append(f"RDMA completions failed{_where(acc)} (the link or the peer dropped)")
    if "net_ib" in acc.kinds and not parts:
        parts.append(f"NCCL's NET/IB transport reported errors{_where(acc)}")
    if "no_ib" in acc.kinds or "socket" in acc.kinds:
        parts.append("NCCL found no usable RoCE device on a multi-node run and fell back to TCP sockets")
    return "; ".join(parts) + "."


def _sum_gloo(acc: _Finding, scanner: Scanner) -> str:
    parts = []
    no_address = acc.kinds.get("no_address")
    if no_address:
        parts.append(f"Gloo found no address on interface {no_address[0]}{_where(acc)} (GLOO_SOCKET_IFNAME)")
    connect = acc.kinds.get("connect")
    if connect:
        parts.append(f"Gloo could not connect to {connect[0]}:{connect[1]} ({connect[2]})")
        if connect[0].startswith("127."):
            parts.append("a loopback address: the host name resolves to 127.x, not the RoCE address")
        parts.append(scanner.context.describe_address(connect[0]).strip())
    c10d = acc.kinds.get("c10d")
    if c10d:
        parts.append(f"torch.distributed could not reach its rendezvous at {c10d[0]}:{c10d[1]}")
        parts.append(scanner.context.describe_address(c10d[0]).strip())
    if "full_mesh" in acc.kinds:
        parts.append("Gloo could not connect its full mesh between the ranks")
    return "; ".join(part for part in parts if part) + "."


def _sum_timeout(acc: _Finding, scanner: Scanner) -> str:
    watchdog = acc.kinds.get("watchdog")
    if watchdog and watchdog[0]:
        return (
            f"NCCL's watchdog timed out a collective{_where(acc)}: {watchdog[0]} ran {watchdog[1]} ms; a "
            f"peer "
            "rank stopped answering."
        )
    if "remote" in acc.kinds and len(acc.kinds) == 1:
        return f"NCCL reported a remote error{_where(acc)}: a peer rank vanished or the network dropped."
    if "setup" in acc.kinds:
        return (
            f"NCCL communicator setup timed out{_where(acc)} waiting for rank {acc.kinds['setup'][0]}'s id: "
            "that rank never got there."
        )
    return (
        f"NCCL's watchdog caught a collective operation timeout{_where(acc)}: a peer rank stopped answering."
    )


def _sum_driver(acc: _Finding, scanner: Scanner) -> str:
    nvml = acc.kinds.get("nvml")
    if nvml and nvml[0]:
        reason = nvml[0].strip()
        text = f"NVML cannot initialise{_where(acc)}: {reason}."
        if "mismatch" in reason.lower():
            text += " The loaded kernel module and the user-space driver differ (an update without reboot)."
        return text
    if "too_old" in acc.kinds:
        return f"The NVIDIA driver{_where(acc)} is too old for the CUDA runtime in the image."
    if "no_devices" in acc.kinds or "kernel" in acc.kinds or "gpu_lost" in acc.kinds:
        return (
            f"The driver is loaded{_where(acc)} but no GPU is usable (no devices, or the kernel module "
            "failed)."
        )
    if "container" in acc.kinds:
        return f"The container runtime cannot reach the GPU{_where(acc)} (NVIDIA container toolkit)."
    return f"nvidia-smi or CUDA cannot reach the NVIDIA driver{_where(acc)}."


def _sum_engine(acc: _Finding, scanner: Scanner) -> str:
    return (
        f"vLLM's engine core failed to start{_where(acc)} and no root cause was found in this log; the "
        "cause is usually in a worker's lines or another node's log."
    )


_SUMMARIES = {
    "ray_oom_kill": _sum_ray_oom,
    "cuda_graph_capture_oom": _sum_graph_oom,
    "startup_memory_short": _sum_startup,
    "kv_cache_insufficient": _sum_kv,
    "cuda_oom": _sum_cuda_oom,
    "ray_node_ip_mismatch": _sum_ip,
    "ray_placement_unsatisfiable": _sum_placement,
    "nccl_socket_connect_failed": _sum_socket,
    "nccl_ib_error": _sum_ib,
    "gloo_interface": _sum_gloo,
    "nccl_collective_timeout": _sum_timeout,
    "nvidia_driver_unavailable": _sum_driver,
    "engine_core_init_failed": _sum_engine,
}


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
    fix = _FIXES[finding_id]
    plan = scanner.context.memory_plan
    memory_ids = {"ray_oom_kill", "cuda_graph_capture_oom", "startup_memory_short", "cuda_oom"}
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


# -- entry points ------------------------------------------------------------


def diagnose_lines(lines: Iterable[str], context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Diagnose an iterable of physical lines (one log)."""
    scanner = Scanner(context)
    scanner.start_path(None)
    scanner.feed_lines(lines)
    return scanner.finish()


def diagnose_text(content: str, context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Diagnose a log held in a string."""
    return diagnose_lines(content.split("\n"), context)


def diagnose_paths(paths: Iterable[str], context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Diagnose one or more log files, streaming each; findings span all files.

    Evidence items carry ``path`` so lines from different files stay apart; a file
    given in ``context.path_hosts`` lends its host to lines that name none.
    """
    scanner = Scanner(context)
    for path in paths:
        scanner.start_path(str(path))
        scanner.feed_file(str(path))
    return scanner.finish()


def format_report(result: Mapping[str, Any]) -> str:
    """A readable report of a diagnosis result."""
    findings = result.get("findings") or []
    out = []
    if not findings:
        out.append(f"No findings in {result.get('lines_read', 0)} lines.")
    for number, finding in enumerate(findings, 1):
        out.append(f"{number}. [{finding['severity'].upper()}] {finding['id']}")
        out.append(f"   {finding['summary']}")
        out.append(f"   Fix: {finding['fix']}")
        for item in finding["evidence"]:
            where = f"{item['path']}:" if item.get("path") else "line "
            host = f" [{item['host']}]" if item.get("host") else ""
            out.append(f"     {where}{item['line']}{host}: {item['text'][:200]}")
    for item in result.get("explained") or []:
        if not item["reported"]:
            out.append(f"(hidden: {item['id']}, explained by {', '.join(item['explained_by'])})")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m ...module_utils._diagnose FILE... [--json] [--context FILE]``.

    Exits 1 when an error-severity finding is present, 0 otherwise, so scripts can
    branch on it.
    """
    parser = argparse.ArgumentParser(
        prog="python -m ansible_collections.sparkops.vllm.plugins.module_utils._diagnose",
        description="Find the root cause of a failed vLLM / Ray / NCCL start in its logs.",
    )
    parser.add_argument("paths", nargs="+", metavar="FILE", help="log files ('-' reads standard input)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--context", metavar="FILE", help="JSON file with the context (hosts, memory_plan)")
    args = parser.parse_args(argv)
    context = None
    if args.context:
        with open(args.context, encoding="utf-8") as handle:
            context = json.load(handle)
    if args.paths == ["-"]:
        result = diagnose_lines(sys.stdin, context)
    else:
        result = diagnose_paths(args.paths, context)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_report(result))
    return 1 if any(item["severity"] == "error" for item in result["findings"]) else 0


if __name__ == "__main__":
    sys.exit(main())
