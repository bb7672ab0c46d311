# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""One summary per finding: what happened, where, with the figures the log gave."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.rules import _NODE_IP
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.state import _Finding
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.summaries_runtime import (
    RUNTIME_SUMMARIES,
    _times,
    phase_note,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.summaries_runtime import (
    where as _where,  # one wording of "on HOST" for every summary
)

if TYPE_CHECKING:
    from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.scanner import Scanner


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
    text += phase_note(acc)
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
        return text + "; on unified memory this is the GPU running out too." + phase_note(acc)
    text = f"CUDA out of memory{_where(acc)}{_times(acc)}"
    torch = acc.kinds.get("torch")
    if torch and torch[0]:
        text += f" (tried to allocate {torch[0]})"
    return text + "." + phase_note(acc)


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
    remote = acc.kinds.get("remote")
    if remote and not connect:
        connect = (remote[1], remote[2], remote[0])
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
    if "loopback" in acc.kinds:
        parts.append(
            f"torch could not resolve the host name to a local address{_where(acc)} and bound Gloo to "
            "loopback (GLOO_SOCKET_IFNAME unset or wrong)"
        )
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
    if "gpu_lost" in acc.kinds:
        return (
            f"The GPU has fallen off the bus{_where(acc)} (Xid 79): the driver can no longer reach it; "
            "nothing on that node can use the GPU until it is reset or the node rebooted."
        )
    if "no_devices" in acc.kinds or "kernel" in acc.kinds:
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
    **RUNTIME_SUMMARIES,
}
