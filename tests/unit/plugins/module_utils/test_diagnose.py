# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The diagnose parser: real logs, written wordings per finding id, precedence, context, file interface."""

import re
import tracemalloc
from pathlib import Path

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose import (
    FINDING_IDS,
    MAX_EVIDENCE,
    PRECEDENCE,
    Scanner,
    diagnose_lines,
    diagnose_paths,
    diagnose_text,
    format_report,
)
from conftest import FIXTURES, ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

REAL = FIXTURES / "real"
WRITTEN = FIXTURES / "diagnose"
SETTINGS = (
    "vllm_image_ref",
    "vllm_image_source",
    "ray_cluster_memlock_unlimited",
    "sparkops_model_path",
    "sparkops_ray_memory_monitor",
    "sparkops_gpu_memory_utilization",
    "sparkops_max_model_len",
    "sparkops_cuda_graphs",
    "sparkops_ray_memory_monitor",
    "sparkops_ray_memory_threshold",
    "sparkops_tensor_parallel_size",
    "sparkops_pipeline_parallel_size",
    "ib_address",
    "ib_interface",
    "roce_network_nccl_ib_gid_index",
    "roce_network_nccl_ib_hca",
    "roce_network_firewall_open",
    "preflight_gpu_consumer_allowlist",
    "preflight_reclaim",
    "preflight_known_bad_accept",
)
SPARKS = {
    "hosts": {
        "spark-1": {"ib_address": "192.168.200.12", "management_addresses": ["10.1.230.180"]},
        "spark-2": {"ib_address": "192.168.200.13", "management_addresses": ["10.1.230.181"]},
    }
}


def ids(result):
    return [finding["id"] for finding in result["findings"]]


def errors(result):
    return [finding["id"] for finding in result["findings"] if finding["severity"] == "error"]


def finding(result, finding_id):
    return next(item for item in result["findings"] if item["id"] == finding_id)


# --- the real logs (tests/fixtures/real, copied unchanged) --------------------

# (fixture, findings in order, the real log line every first finding must cite)
REAL_CASES = [
    (
        "10_vllm_free_memory_less_than_desired_v0.9.1_issue20305.txt",
        ["startup_memory_short"],
        "Free memory on device (31.44/47.38 GiB) on startup is less than desired",
    ),
    (
        "20_vllm_cudagraph_capture_oom_issue19186.txt",
        ["cuda_graph_capture_oom"],
        "RuntimeError: CUDA error: out of memory",
    ),
    (
        "21_vllm_no_available_memory_cache_blocks_and_engine_init_failed_issue27508.txt",
        ["kv_cache_insufficient"],
        'raise ValueError("No available memory for the cache blocks. "',
    ),
    (
        "30_ray_oom_killer_message_ray-28776.txt",
        ["ray_oom_kill"],
        "Task was killed due to the node running low on memory.",
    ),
    (
        "34_ray_ip_mismatch_global_state_accessor_vllm-6689.txt",
        ["ray_node_ip_mismatch"],
        "This node has an IP address of 10.6.0.55, but we cannot find a local Raylet",
    ),
    (
        "37a_vllm_ray_no_node_types_fulfill_vllm-13388.txt",
        ["ray_placement_unsatisfiable"],
        "No available node types can fulfill resource request {'node:10.61.0.27': 0.001, 'GPU': 1.0}",
    ),
    (
        "40_nccl_ibv_modify_qp_roce_gid_nccl-2013.txt",
        ["nccl_ib_error"],
        "Call to ibv_modify_qp failed with 110 Connection timed out",
    ),
    (
        "42_nccl_socket_connect_abort_h100_sglang-5594.txt",
        ["nccl_socket_connect_failed"],
        "socketStartConnect: Connect to 10.0.0.82<38455> failed : Software caused connection abort",
    ),
    (
        "50_nvidia-smi_fail_couldnt_communicate_driver_shine-cluster-50.txt",
        ["nvidia_driver_unavailable"],
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    ),
    (
        "51a_nvidia-smi_fail_nvml_mismatch_570_tinygrad-47.txt",
        ["nvidia_driver_unavailable"],
        "Failed to initialize NVML: Driver/library version mismatch",
    ),
    (
        "52a_nvidia-smi_fail_no_devices_found_rtx5090_open-gpu-kernel-modules-862.txt",
        ["nvidia_driver_unavailable"],
        "No devices were found",
    ),
]


@pytest.mark.parametrize(("name", "expected", "quote"), REAL_CASES, ids=[case[0][:3] for case in REAL_CASES])
def test_real_logs(name, expected, quote):
    path = REAL / name
    assert path.read_text(encoding="utf-8").startswith("# Source:")
    result = diagnose_paths([str(path)])
    assert ids(result) == expected
    first = result["findings"][0]
    assert first["severity"] in {"error", "warning"}
    lines = path.read_text(encoding="utf-8").splitlines()
    cited = [item for item in first["evidence"] if quote in item["text"]]
    assert cited, first["evidence"]
    # The line number points at the physical line that holds the quote.
    assert all(quote in lines[item["line"] - 1] for item in cited)


@pytest.mark.parametrize(
    "name",
    [
        "15_vllm_kv_cache_lines_v0.21_lmcache-3326.txt",
        "28_vllm_v0.10.2_full_memory_sequence_8xL40S_TP8EP.txt",
    ],
)
def test_clean_real_startups_give_no_error(name):
    result = diagnose_paths([str(REAL / name)])
    assert errors(result) == []
    assert result["root_cause"] is None


def test_clean_startup_keeps_vllm_memory_figures():
    result = diagnose_paths([str(REAL / "28_vllm_v0.10.2_full_memory_sequence_8xL40S_TP8EP.txt")])
    assert result["memory"]["kv_cache_gib"] == 10.64
    assert result["memory"]["cuda_graph_gib"] == 3.45


def test_21_names_kv_cache_first_and_hides_the_wrapper():
    result = diagnose_paths(
        [str(REAL / "21_vllm_no_available_memory_cache_blocks_and_engine_init_failed_issue27508.txt")]
    )
    assert ids(result)[0] == "kv_cache_insufficient"
    assert "engine_core_init_failed" not in ids(result)
    assert result["explained"] == [
        {"id": "engine_core_init_failed", "explained_by": ["kv_cache_insufficient"], "reported": False}
    ]


def test_30_ray_oom_summary_quotes_the_figures():
    result = diagnose_paths([str(REAL / "30_ray_oom_killer_message_ray-28776.txt")])
    summary = finding(result, "ray_oom_kill")["summary"]
    assert "54.86 / 57.60 GB" in summary
    assert "0.95" in summary
    hosts = {item.get("host") for item in finding(result, "ray_oom_kill")["evidence"]}
    assert "172.31.69.247" in hosts


def test_42_host_comes_from_the_nccl_header():
    result = diagnose_paths([str(REAL / "42_nccl_socket_connect_abort_h100_sglang-5594.txt")])
    evidence = finding(result, "nccl_socket_connect_failed")["evidence"]
    assert {"line": 2, "host": "h100-15"}.items() <= evidence[-1].items()
    assert "10.0.0.82" in finding(result, "nccl_socket_connect_failed")["summary"]


# --- written wordings: at least two per id, each also with prefixes ----------

WORDINGS = {
    "ray_oom_kill": [
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
        "Memory on the node (IP: 10.0.0.2, ID: 4c1e) where the task (task ID: ff01, name=RayWorkerWrapper."
        "execute_method, pid=433, memory used=66.12GB) was running was 113.78GB / 119.70GB (0.950501), which "
        "exceeds the memory usage threshold of 0.95.",
        "node_manager.cc:3069: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers "
        "crashed "
        "due to other reasons at node (ID: 4c1e, IP: 10.0.0.2) over the last time period.",
        "ray.exceptions.RayOutOfMemoryError: More than 95% of the memory on node spark-1 is used "
        "(113.78 / 119.70 GB). The top 10 memory consumers are:",
        "Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to the node running "
        "low "
        "on memory.",
    ],
    "startup_memory_short": [
        "ValueError: Free memory on device (31.44/47.38 GiB) on startup is less than desired GPU memory "
        "utilization (0.95, 45.01 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
        "processes.",
        "ValueError: Free memory on device cuda:0 (98.12/119.70 GiB) on startup is less than desired GPU "
        "memory "
        "utilization (0.9, 107.73 GiB).",
        "AssertionError: Error in memory profiling. Initial free memory 100.2 GiB, current free memory 101.5 "
        "GiB. This happens when other processes sharing the same container release GPU memory while vLLM is "
        "profiling during initialization.",
    ],
    "kv_cache_insufficient": [
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine.",
        "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can "
        "be "
        "stored in KV cache (45000). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
        "when "
        "initializing the engine.",
        "ValueError: To serve at least one request with the models's max seq len (262144), (24.00 GiB KV "
        "cache "
        "is needed, which is larger than the available KV cache memory (10.75 GiB). Based on the available "
        "memory, the estimated maximum model length is 117408.",
        "INFO 09-24 20:53:40 [gpu_worker.py:298] Available KV cache memory: -1.44 GiB",
    ],
    "cuda_oom": [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.17 GiB. GPU 0 has a total capacity "
        "of 119.70 GiB of which 512.00 MiB is free.",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
        "RuntimeError: CUDA error: out of memory",
        "spark-2:588:1021 [0] include/alloc.h:99 NCCL WARN Cuda failure 2 'out of memory'",
        "Apr 09 00:47:22 spark-2 kernel: Out of memory: Killed process 4321 (python3) total-vm:1234kB",
    ],
    "ray_node_ip_mismatch": [
        "global_state_accessor.cc:432: This node has an IP address of 10.1.230.180, but we cannot find a "
        "local "
        "Raylet with the same address.",
        "This node has an IP address of 10.1.230.180, while we can not found the matched Raylet address. "
        "This "
        "maybe come from when you connect the Ray cluster with a different IP address or connect a "
        "container.",
        "RuntimeError: Every node should have a unique IP address. Got 2 nodes with node ids ['a', 'b'] and "
        "1 "
        "unique IP addresses {'10.1.230.180'}.",
        "RuntimeError: Ray does not allocate any GPUs on the driver node. Consider adjusting the Ray "
        "placement "
        "group or running the driver on a GPU node.",
    ],
    "ray_placement_unsatisfiable": [
        "Error: No available node types can fulfill resource request {'GPU': 1.0}",
        "ValueError: Cannot provide a placement group of placement_group_specs=[{'GPU': 1.0}, {'GPU': 1.0}] "
        "within 1800 seconds. See `ray status` and `ray list nodes`.",
        "ValueError: Tensor parallel size (2) cannot be larger than the number of available GPUs (1).",
        "ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement "
        "group.",
    ],
    "nccl_socket_connect_failed": [
        "h100-15:139:1092 [7] socket.c:485 NCCL WARN socketStartConnect: Connect to 10.0.0.82<38455> failed "
        ": "
        "Software caused connection abort",
        "spark-2:588:1021 [0] misc/socket.cc:484 NCCL WARN socketPollConnect: Connect to 10.1.230.180<45123> "
        "returned 113(No route to host) errno 113 No route to host",
        "spark-2:588:1021 [0] NCCL WARN Net : Connect to 10.0.0.1<43761> failed : Connection refused",
        "spark-2:588:588 [0] NCCL WARN Bootstrap : no socket interface found",
    ],
    "nccl_ib_error": [
        "host-01:12:12 [5] ibvwrap.c:262 NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed "
        "out, "
        "on dev mlx5_0:1, curr state INIT, next state RTR, local GID index 3",
        "spark-1:433:1102 [0] NCCL WARN NET/IB : Got completion from peer 192.168.200.13<49152> with "
        "status=12 "
        "opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:192.168.200.12",
        "spark-1:433:1102 [0] transport/net_ib.cc:1694 NCCL WARN NET/IB : ibv_poll_cq error 12",
        "spark-1:433:433 [0] NCCL WARN Call to ibv_create_qp failed",
    ],
    "gloo_interface": [
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != nullptr. "
        "Unable to find address for: enp1s0f0np0",
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [127.0.1.1]:23456: "
        "Connection refused",
        "[W409 01:05:12.123 socket.cpp:755] [c10d] The client socket has failed to connect to "
        "[10.1.230.180]:29500 (errno: 110 - Connection timed out).",
        "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] "
        "no error",
    ],
    "nccl_collective_timeout": [
        "[rank1]:[E409 01:25:03.771432 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective "
        "operation "
        "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600021 milliseconds before timing out.",
        "[PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: "
        "boom",
        "torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving ncclUniqueId "
        "from [0] via c10d key-value store by key '0', but store->get('0') got error: wait timeout after "
        "600000ms",
    ],
    "nvidia_driver_unavailable": [
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
        "latest "
        "NVIDIA driver is installed and running.",
        "Failed to initialize NVML: Driver/library version mismatch",
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
        "installed a driver.",
        "pynvml.NVMLError_DriverNotLoaded: Driver Not Loaded",
        'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
        "RuntimeError: The NVIDIA driver on your system is too old (found version 12020).",
    ],
    "engine_core_init_failed": [
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        "ERROR 06-30 13:53:19 [core.py:515] EngineCore failed to start.",
        "RuntimeError: Engine process failed to start. See stack trace for the root cause.",
    ],
    # The run-time findings: real lines (sources in tests/fixtures/diagnose/*.log and
    # test_diagnose_runtime.py), one per line of each list.
    "uma_driver_out_of_memory": [
        "[81033.194223] NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] "
        "(0x00000051) returned from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359",
        "nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) returned from "
        "_memdescAllocInternal(pMemDesc) @ mem_desc.c:1359",
    ],
    "rdma_memory_registration_failed": [
        "spark-2:4016:4653 [0] misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error "
        "Cannot allocate memory",
        "msm-h200-2:4016:4653 [7] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed with error "
        "Cannot allocate memory",
        "ip-10-0-87-143:149:298 [5] register_mr_buffers:465 NCCL WARN NET/OFI Unable to register memory "
        "(type = 1) for device 0. RC: 12, Error: Cannot allocate memory",
    ],
    "ray_missing_in_image": [
        "ImportError: Ray is not installed. Please install Ray to use distributed serving.",
        "ValueError: Ray is not installed. Please install Ray to use distributed serving.",
        'exec: "ray": executable file not found in $PATH: unknown.',
    ],
    "worker_env_overwritten_by_head": [
        "WARNING 03-30 18:45:37 [utils.py:2102] Overwriting environment variable NCCL_SOCKET_IFNAME from "
        "'enP2p1s0f1np1' to 'enp1s0f1np1'",
        "Overwriting environment variable UCX_NET_DEVICES from 'rocep1s0f1:1' to 'roceP2p1s0f1:1'",
    ],
    "gpu_xid_error": [
        "[93297.027938] NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, Graphics "
        "Exception: ESR 0x52e7b0=0x101000e 0x52e7b4=0x4 0x52e7a8=0xc81eb60 0x52e7ac=0x1174",
        "NVRM: Xid (PCI:0000:01:00): 31, Ch 0000005a, intr 10000000. MMU Fault: ENGINE GRAPHICS "
        "GPCCLIENT_T1_1 faulted @ 0x0_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
        "NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX "
        "SWITCH TIMEOUT, Info 0x58005",
    ],
    "gpu_arch_unsupported": [
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "2021-05-27 03:59:03,329 FATAL device_lambda.cuh:54 : Check failed: [error == cudaSuccess]  no "
        "kernel image is available for execution on the device",
        "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'",
    ],
    "engine_rpc_timeout": [
        "TimeoutError: RPC call to sample_tokens timed out.",
        "ERROR 09-05 01:24:34 [core.py:1403] TimeoutError: RPC call to execute_model timed out.",
    ],
    "cudagraph_memory_estimate_negative": [
        "INFO 08-02 10:11:12 [gpu_model_runner.py:6806] Estimated CUDA graph memory: -20.50 GiB total",
        "INFO 09-24 00:15:29 [v1/worker/gpu_model_runner.py:3380] Graph capturing finished in 79 secs, took "
        "-9.96 GiB",
    ],
    "model_files_unavailable": [
        "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file "
        "on the Hub and we cannot find the requested files in the local cache. Please check your connection "
        "and try again or make sure your Internet connection is on.",
        "ERROR 06-24 15:31:46 engine.py:389] Cache directory not found: /data/.cache/huggingface. Please use "
        "`cache_dir` argument or set `HF_HUB_CACHE` environment variable.",
        "huggingface_hub.utils._http.OfflineModeIsEnabled: Cannot reach "
        "https://huggingface.co/meta-llama/Llama-2-7b-chat-hf/",
    ],
    "nccl_library_mismatch": [
        "ImportError: /usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cuda.so: undefined symbol: "
        "ncclCommRegister",
        "ERROR 04-24 09:39:29 worker_base.py:153] NameError: name 'ncclGetVersion' is not defined",
    ],
    "ray_gcs_lost": [
        "[2023-04-12 11:23:25,823 E 946 946] (raylet) gcs_rpc_client.h:533: Failed to connect to GCS within "
        "60 seconds. GCS may have been killed. It's either GCS is terminated by `ray stop` or is killed "
        "unexpectedly.",
        "gcs_rpc_client.h:537:  Check failed: absl::ToInt64Seconds(absl::Now() - gcs_last_alive_time_) < "
        "::RayConfig::instance().gcs_rpc_server_reconnect_timeout_s() Failed to connect to GCS within 60 "
        "seconds",
    ],
}

# cuda_graph_capture_oom is about context, so its wordings are several lines.
GRAPH_CAPTURE_OOM = [
    # The traceback's frames come first (fixture 20's shape), torch's own exception.
    "\n".join(
        [
            '  File "/usr/lib/python3/site-packages/torch/cuda/graphs.py", line 186, in __exit__',
            "    self.cuda_graph.capture_end()",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        ]
    ),
    # A progress bar says capture started; the OOM has no graph frame of its own.
    "\n".join(
        [
            "INFO 04-09 01:14:41 [kv_cache_utils.py:864] GPU KV cache size: 1,072,688 tokens",
            "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  37%|###7      | 25/67 [00:19<00:31]",
            "ERROR 04-09 01:15:03 [core.py:708] RuntimeError: CUDA error: out of memory",
        ]
    ),
    # Ray's format: the exception first, the frames after it.
    "\n".join(
        [
            "ray.exceptions.RayTaskError(OutOfMemoryError): ray::RayWorkerWrapper.execute_method() "
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB.",
            "Traceback (most recent call last):",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 3090, '
            "in capture_model",
        ]
    ),
]

PREFIXES = [
    "",
    "(EngineCore_DP0 pid=412) (RayWorkerWrapper pid=588, ip=192.168.200.13) ERROR 04-09 01:15:03 "
    "[core.py:708] ",
    "\x1b[36m(raylet, ip=192.168.200.12)\x1b[0m ",
    "E       2026-04-09T01:15:02.553211Z ",
    "Apr 09 01:15:02 spark-1 bash[2211]: (APIServer pid=301) ",
]

WORDING_CASES = [
    (finding_id, text, prefix)
    for finding_id, texts in WORDINGS.items()
    for text in texts
    for prefix in PREFIXES
    # A kernel or syslog record keeps its own header first.
    if not (text.startswith("Apr 09") and prefix.startswith("Apr 09"))
]


def test_every_id_has_at_least_two_wordings():
    counted = {finding_id: len(texts) for finding_id, texts in WORDINGS.items()}
    counted["cuda_graph_capture_oom"] = len(GRAPH_CAPTURE_OOM)
    assert set(counted) == set(FINDING_IDS)
    assert min(counted.values()) >= 2


@pytest.mark.parametrize(("finding_id", "text", "prefix"), WORDING_CASES)
def test_wordings_with_prefixes(finding_id, text, prefix):
    result = diagnose_text(f"INFO 04-09 01:00:00 [x.py:1] starting\n{prefix}{text}\nINFO done\n")
    assert ids(result) == [finding_id]
    evidence = result["findings"][0]["evidence"]
    assert evidence[0]["line"] == 2
    if "ip=" in prefix and not text.startswith(("Memory on the node", "node_manager")):
        assert evidence[0]["host"] == re.search(r"ip=([\d.]+)", prefix).group(1)


@pytest.mark.parametrize("log", GRAPH_CAPTURE_OOM)
@pytest.mark.parametrize("prefix", PREFIXES[:3])
def test_graph_capture_oom(log, prefix):
    text = "\n".join(prefix + line for line in log.split("\n"))
    result = diagnose_text(text)
    assert ids(result) == ["cuda_graph_capture_oom"]


def test_oom_after_capture_finished_is_a_plain_cuda_oom():
    log = "\n".join(
        [
            "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67",
            "INFO 04-09 01:43:35 [gpu_model_runner.py:3118] Graph capturing finished in 53 secs, took 1.45 "
            "GiB",
            "INFO 04-09 01:43:35 [core.py:218] init engine (profile, create kv cache, warmup model) took "
            "93.11 s",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB.",
        ]
    )
    result = diagnose_text(log)
    assert ids(result) == ["cuda_oom"]
    assert "8.00 GiB" in result["findings"][0]["summary"]


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        # Wrapped mid-word by an 80-column terminal.
        (
            "(pid=433, ip=10.0.0.2) ray.exceptions.OutOfMemoryError: Task was killed due to the node runn\n"
            "ing low on memory.",
            "ray_oom_kill",
        ),
        ("ValueError: No available memory for the ca\nche blocks. Try increasing", "kv_cache_insufficient"),
        (
            "(EngineCore_DP0 pid=1) ERROR 10-25 13:08:43 [core.py:708] RuntimeError: Engine core "
            "initiali\nzation failed.",
            "engine_core_init_failed",
        ),
        (
            "h100-15:139:1092 [7] socket.c:485 NCCL WARN socketStartConnect: Conn\nect to 10.0.0.82<38455> "
            "failed",
            "nccl_socket_connect_failed",
        ),
        (
            "[Rank 1] Watchdog caught collective oper\nation timeout: WorkNCCL(SeqNum=1)",
            "nccl_collective_timeout",
        ),
        # Wrapped at a blank (the blank lost, as re-flowed text does).
        (
            "This node has an IP address of 10.1.230.180, but we\ncannot find a local Raylet",
            "ray_node_ip_mismatch",
        ),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the\nNVIDIA driver.",
            "nvidia_driver_unavailable",
        ),
        ("E       Failed to initialize\nE       NVML: Unknown Error", "nvidia_driver_unavailable"),
    ],
)
def test_terminal_wrapped_phrases(log, expected):
    result = diagnose_text(log)
    assert ids(result) == [expected]
    assert result["findings"][0]["evidence"][0]["line"] == 1


def test_wrapped_seam_does_not_join_two_records():
    # Each line is its own record; their concatenation must not form a phrase.
    log = "(APIServer pid=1) INFO x: No available memory for\n(APIServer pid=1) INFO the cache blocks"
    assert ids(diagnose_text(log)) == []


SILENT = [
    "spark-1:433:433 [0] NCCL INFO Bootstrap : Using enp1s0f1np1:192.168.200.12<0>",
    "spark-1:433:433 [0] NCCL INFO NET/IB : No device found.",
    "spark-1:433:433 [0] NCCL INFO Using network Socket",
    "spark-1:433:433 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>",
    "spark-1:433:433 [0] NCCL INFO ncclCommInitRank comm 0x5f3c rank 0 nranks 1 cudaDev 0 - Init COMPLETE",
    "INFO 05-19 02:17:43 [gpu_worker.py:462] Available KV cache memory: 111.99 GiB",
    "INFO 09-24 20:54:35 [gpu_worker.py:391] Free memory on device (43.93/44.42 GiB) on startup. Desired GPU "
    "memory utilization is (0.9, 39.98 GiB). Actual usage is 27.72 GiB for weight, 1.4 GiB for peak "
    "activation.",
    "INFO 11-20 10:00:00 [worker.py:280] Memory profiling takes 5.12 seconds. Total GPU memory: 119.70 GiB; "
    "model weights take 58.90 GiB; non_torch_memory takes 0.50 GiB; PyTorch activation peak memory takes "
    "4.20 "
    "GiB; the rest of the memory reserved for KV Cache is 44.12 GiB.",
    "INFO 09-24 20:50:58 [gpu_model_runner.py:2392] Model loading took 27.7183 GiB and 286.020245 seconds",
    "INFO 05-19 02:17:43 [gpu_worker.py:477] CUDA graph memory profiling is enabled (default since v0.21.0). "
    "To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.",
    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67 [00:52<00:00,  "
    "1.28it/s]",
    "INFO 04-09 01:43:35 [gpu_model_runner.py:3118] Graph capturing finished in 53 secs, took 1.45 GiB",
    "pynvml.NVMLError_NotSupported: Not Supported",
    "(raylet) memory_monitor.cc:85: MemoryMonitor initialized with usage threshold at 0.95 of total memory",
    "2024-08-07 10:14:35,296\tSUCC scripts.py:959 -- Ray runtime started.",
    "WARNING 09-24 20:53:34 [fused_moe.py:727] Using default MoE config. Performance might be sub-optimal!",
    "(APIServer pid=301) INFO:     Application startup complete.",
]


@pytest.mark.parametrize("line", SILENT)
def test_normal_info_lines_stay_silent(line):
    assert diagnose_text(line)["findings"] == []


def test_socket_fallback_is_a_warning_only_across_nodes():
    log = "\n".join(
        [
            "(RayWorkerWrapper pid=2, ip=192.168.200.13) spark-2:2:2 [0] NCCL INFO NET/IB : No device found.",
            "(RayWorkerWrapper pid=2, ip=192.168.200.13) spark-2:2:2 [0] NCCL INFO Using network Socket",
            "(RayWorkerWrapper pid=3, ip=192.168.200.12) spark-1:3:3 [0] NCCL INFO Using network Socket",
        ]
    )
    result = diagnose_text(log)
    assert [(item["id"], item["severity"]) for item in result["findings"]] == [("nccl_ib_error", "warning")]
    assert "roce_network_nccl_ib_hca" in result["findings"][0]["fix"]
    # The same lines from one host are normal.
    single = "\n".join(line for line in log.split("\n") if "192.168.200.13" in line)
    assert diagnose_text(single)["findings"] == []


def test_placement_waiting_alone_is_a_warning():
    result = diagnose_text(
        "Waiting for creating a placement group of specs for 10 seconds. specs=[{'GPU': 1.0}]"
    )
    assert [(item["id"], item["severity"]) for item in result["findings"]] == [
        ("ray_placement_unsatisfiable", "warning")
    ]


# --- precedence -----------------------------------------------------------------


def test_ray_oom_during_capture_then_wrapper_names_ray_oom_first():
    result = diagnose_paths([str(WRITTEN / "ray_oom_during_graph_capture.log")])
    assert ids(result) == ["ray_oom_kill"]
    assert result["root_cause"] == "ray_oom_kill"
    first = result["findings"][0]
    assert "during CUDA graph capture" in first["summary"]
    assert "113.78 / 119.70 GB" in first["summary"]
    assert "49.12 GiB" in first["summary"]
    assert "sparkops_ray_memory_monitor" in first["fix"]
    assert "sparkops_cuda_graphs" in first["fix"]
    assert result["explained"] == [
        {"id": "engine_core_init_failed", "explained_by": ["ray_oom_kill"], "reported": False}
    ]


def test_graph_capture_oom_explains_the_wrapper():
    log = (REAL / "20_vllm_cudagraph_capture_oom_issue19186.txt").read_text(encoding="utf-8")
    log += "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above.\n"
    assert ids(diagnose_text(log)) == ["cuda_graph_capture_oom"]


def test_socket_failure_explains_the_later_timeout():
    result = diagnose_paths([str(WRITTEN / "nccl_socket_then_timeout.log")])
    assert ids(result) == ["nccl_socket_connect_failed", "nccl_collective_timeout"]
    assert "consequence of nccl_socket_connect_failed" in result["findings"][1]["summary"]
    assert {
        "id": "nccl_collective_timeout",
        "explained_by": ["nccl_socket_connect_failed"],
        "reported": True,
    } in (result["explained"])


def test_order_follows_the_table_not_the_log():
    log = "\n".join(
        [
            "RuntimeError: Engine core initialization failed.",
            "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.",
            "ValueError: No available memory for the cache blocks.",
            "Failed to initialize NVML: Driver/library version mismatch",
        ]
    )
    result = diagnose_text(log)
    assert ids(result) == [
        "nvidia_driver_unavailable",
        "kv_cache_insufficient",
        "cuda_oom",
        "nccl_collective_timeout",
    ]


def test_wrapper_alone_is_reported():
    result = diagnose_text(
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above."
    )
    assert ids(result) == ["engine_core_init_failed"]
    assert result["root_cause"] == "engine_core_init_failed"


def test_precedence_table_is_consistent():
    assert len(FINDING_IDS) == 24
    order = {finding_id: index for index, finding_id in enumerate(FINDING_IDS)}
    for cause, effects in PRECEDENCE:
        for effect in effects:
            # A cause always sits above what it explains.
            assert order[cause] < order[effect]
    assert FINDING_IDS[-1] == "engine_core_init_failed"
    explained_wrapper = {cause for cause, effects in PRECEDENCE if "engine_core_init_failed" in effects}
    assert explained_wrapper == set(FINDING_IDS) - {"engine_core_init_failed"}


def test_docs_list_the_precedence_in_the_same_order():
    doc = (ROOT / "docs" / "diagnose.md").read_text(encoding="utf-8")
    section = doc.split("## Precedence", 1)[1]
    found = [match for match in re.findall(r"^\| \d+ \| `(\w+)`", section, re.MULTILINE)]
    assert found == list(FINDING_IDS)


# --- fixes name the project's settings ----------------------------------------


@pytest.mark.parametrize("finding_id", FINDING_IDS)
def test_every_fix_names_a_project_setting(finding_id):
    log = GRAPH_CAPTURE_OOM[0] if finding_id == "cuda_graph_capture_oom" else WORDINGS[finding_id][0]
    fix = finding(diagnose_text(log), finding_id)["fix"]
    assert any(f"`{name}" in fix for name in SETTINGS), fix


# --- context --------------------------------------------------------------------


def test_context_names_the_management_address():
    line = (
        "(raylet, ip=10.1.230.180) global_state_accessor.cc:432: This node has an IP address of "
        "10.1.230.180, "
        "but we cannot find a local Raylet with the same address."
    )
    plain = diagnose_text(line)
    sharp = diagnose_text(line, SPARKS)
    assert plain["findings"][0]["severity"] == "warning"
    assert sharp["findings"][0]["severity"] == "error"
    assert (
        "10.1.230.180 is spark-1's management address, not its ib_address 192.168.200.12"
        in (sharp["findings"][0]["summary"])
    )
    assert sharp["findings"][0]["evidence"][0]["host"] == "spark-1"


def test_context_maps_ib_addresses_to_host_names():
    result = diagnose_paths([str(WRITTEN / "gloo_c10d_management_ip.log")], SPARKS)
    gloo = finding(result, "gloo_interface")
    assert {item["host"] for item in gloo["evidence"]} == {"spark-2"}
    assert "spark-1's management address" in gloo["summary"]
    assert "enp1s0f0np0" in gloo["summary"]


def test_context_host_and_path_hosts(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text("RuntimeError: CUDA error: out of memory\n", encoding="utf-8")
    result = diagnose_paths([str(log)], {"path_hosts": {str(log): "spark-2"}})
    assert result["findings"][0]["evidence"][0] == {
        "line": 1,
        "text": "RuntimeError: CUDA error: out of memory",
        "host": "spark-2",
        "path": str(log),
    }
    assert diagnose_text("No devices were found", {"host": "spark-1"})["findings"][0]["evidence"][0][
        "host"
    ] == ("spark-1")


def test_context_memory_plan_and_settings_sharpen_the_fix():
    context = {
        "memory_plan": {"gpu_memory_utilization": 0.82, "fits": False, "peak_gib": 116.1, "limit_gib": 113.7},
        "settings": {"sparkops_gpu_memory_utilization": 0.9},
    }
    result = diagnose_paths([str(WRITTEN / "ray_oom_during_graph_capture.log")], context)
    fix = result["findings"][0]["fix"]
    assert "recommends gpu_memory_utilization 0.82" in fix
    assert "peak 116.1 GiB over the limit 113.7 GiB" in fix
    assert "sparkops_gpu_memory_utilization is set to 0.9" in fix


def test_placement_request_for_an_unknown_node_address():
    result = diagnose_paths([str(REAL / "37a_vllm_ray_no_node_types_fulfill_vllm-13388.txt")], SPARKS)
    summary = result["findings"][0]["summary"]
    assert "10.61.0.27" in summary
    assert "no host's `ib_address`" in summary


# --- written logs ----------------------------------------------------------------

WRITTEN_CASES = [
    ("ray_oom_during_graph_capture.log", ["ray_oom_kill"]),
    ("ray_oom_legacy_wrapped.log", ["ray_oom_kill"]),
    ("ray_oom_threshold_wrapped.log", ["ray_oom_kill"]),
    ("kv_cache_max_len_wrapped.log", ["kv_cache_insufficient"]),
    ("nccl_socket_then_timeout.log", ["nccl_socket_connect_failed", "nccl_collective_timeout"]),
    ("gloo_c10d_management_ip.log", ["gloo_interface"]),
    ("clean_two_node_startup.log", []),
]


@pytest.mark.parametrize(("name", "expected"), WRITTEN_CASES)
def test_written_logs(name, expected):
    assert ids(diagnose_paths([str(WRITTEN / name)])) == expected


def test_kv_cache_wrapped_message_keeps_its_figures():
    result = diagnose_paths([str(WRITTEN / "kv_cache_max_len_wrapped.log")])
    summary = result["findings"][0]["summary"]
    assert "40960" in summary
    assert "5.62 GiB needed, 4.50 GiB available" in summary
    assert "`sparkops_max_model_len: 32768`" in result["findings"][0]["fix"]


def test_several_paths_keep_their_own_line_numbers():
    paths = [
        str(WRITTEN / "clean_two_node_startup.log"),
        str(REAL / "40_nccl_ibv_modify_qp_roce_gid_nccl-2013.txt"),
    ]
    result = diagnose_paths(paths)
    assert result["paths"] == paths
    evidence = finding(result, "nccl_ib_error")["evidence"]
    assert evidence[0]["path"] == paths[1]
    assert evidence[0]["line"] == 2


# --- property: prefixes and colours change nothing ------------------------------

KNOWN = [texts[0] for texts in WORDINGS.values()] + [texts[-1] for texts in WORDINGS.values()]

_names = st.sampled_from(
    ["EngineCore_DP0", "Worker_TP0_EP0", "RayWorkerWrapper", "VllmWorker rank=3", "APIServer", "EngineCore"]
)
_ips = st.tuples(*[st.integers(0, 255)] * 4).map(lambda parts: ".".join(map(str, parts)))
_process = st.one_of(
    st.builds(lambda name, pid: f"({name} pid={pid}) ", _names, st.integers(1, 99999)),
    st.builds(lambda name, pid, ip: f"({name} pid={pid}, ip={ip}) ", _names, st.integers(1, 99999), _ips),
    st.sampled_from(["(raylet) ", "(pid=gcs_server) ", "(autoscaler +1m3s) "]),
)
_header = st.sampled_from(
    [
        "INFO 04-09 01:15:03 [core.py:708] ",
        "ERROR 10-25 13:08:43 [core.py:708] ",
        "2026-04-09T01:15:02.553211Z ",
        "Apr 09 01:15:02 spark-1 vllm[2211]: ",
        "E       ",
        "vllm-head-1  | ",
    ]
)
_ansi = st.sampled_from(["", "\x1b[0m", "\x1b[36m", "\x1b[1;31m", "\x1b[2K", "\x1b[33m\x1b[1m"])
_prefix = st.lists(st.one_of(_process, _header, _ansi), max_size=5).map("".join)


@settings(max_examples=300, deadline=None)
@given(line=st.sampled_from(KNOWN), prefix=_prefix, before=_ansi, after=_ansi)
def test_prefixes_and_ansi_change_no_finding(line, prefix, before, after):
    if line.startswith("Apr 09") and "Apr 09" in prefix:
        return
    plain = diagnose_text(line)
    noisy = diagnose_text(f"{prefix}{before}{line}{after}")
    assert [(item["id"], item["severity"]) for item in noisy["findings"]] == [
        (item["id"], item["severity"]) for item in plain["findings"]
    ]
    assert plain["findings"]


@settings(max_examples=100, deadline=None)
@given(line=st.sampled_from(KNOWN), prefix=_prefix, repeat=st.integers(2, 99))
def test_ray_dedup_suffix_changes_no_finding(line, prefix, repeat):
    if line.startswith("Apr 09") and "Apr 09" in prefix:
        return
    plain = ids(diagnose_text(line))
    assert ids(diagnose_text(f"{prefix}{line} [repeated {repeat}x across cluster]")) == plain


# --- streaming: bounded state ------------------------------------------------


def _noisy_log(lines):
    # Model loading, KV cache lines and warnings, without a graph capture to fall into.
    text = (REAL / "28_vllm_v0.10.2_full_memory_sequence_8xL40S_TP8EP.txt").read_text(encoding="utf-8")
    noise = [line for line in text.splitlines() if "Capturing" not in line]
    for number in range(lines):
        yield noise[number % len(noise)]
        if number % 1000 == 0:
            yield "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB."


def test_evidence_is_capped_but_counted():
    result = diagnose_lines(_noisy_log(20_000))
    oom = finding(result, "cuda_oom")
    assert len(oom["evidence"]) <= MAX_EVIDENCE
    assert "(20 log lines)" in oom["summary"]


def test_memory_does_not_grow_with_the_log():
    def peak(lines):
        tracemalloc.start()
        scanner = Scanner()
        scanner.start_path(None)
        scanner.feed_lines(_noisy_log(lines))
        scanner.finish()
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, large = peak(2_000), peak(20_000)
    assert large < small * 1.5 + 256 * 1024


# --- the file interface --------------------------------------------------------


def test_format_report_lists_hidden_wrappers():
    report = format_report(diagnose_paths([str(WRITTEN / "ray_oom_during_graph_capture.log")]))
    assert report.splitlines()[0] == "1. [ERROR] ray_oom_kill"
    assert "(hidden: engine_core_init_failed, explained by ray_oom_kill)" in report
    assert Path(WRITTEN / "ray_oom_during_graph_capture.log").name in report


def test_remote_error_after_a_ray_oom_kill_comes_second():
    log = "\n".join(
        [
            "spark-2:588:1021 [0] NCCL WARN ncclRemoteError: A call failed possibly due to a network error "
            "or a "
            "remote process exiting prematurely.",
            "Memory on the node (IP: 192.168.200.12, ID: 4c1e) where the task (task ID: ff) was running was "
            "113.78GB / 119.70GB (0.950501), which exceeds the memory usage threshold of 0.95.",
        ]
    )
    result = diagnose_text(log, SPARKS)
    assert [(item["id"], item["severity"]) for item in result["findings"]] == [
        ("ray_oom_kill", "error"),
        ("nccl_collective_timeout", "warning"),
    ]
    assert "spark-1" in result["findings"][0]["summary"]


def test_context_cluster_plan_names_the_tightest_node_and_no_forced_value_as_advice():
    """The deploy's cluster plan (preflight_memory_plan) keeps peak/limit per node; a forced value is no advice."""
    context = {
        "memory_plan": {
            "gpu_memory_utilization": 0.99,
            "utilization_source": "given",
            "fits": False,
            "nodes": {
                "spark-1": {
                    "fits": False,
                    "peak_gib": 120.4,
                    "limit_gib": 113.7,
                    "recommended_gpu_memory_utilization": 0.82,
                },
                "spark-2": {
                    "fits": False,
                    "peak_gib": 118.0,
                    "limit_gib": 113.7,
                    "recommended_gpu_memory_utilization": 0.84,
                },
            },
        },
    }
    result = diagnose_paths([str(WRITTEN / "ray_oom_during_graph_capture.log")], context)
    fix = result["findings"][0]["fix"]
    assert "peak 120.4 GiB over the limit 113.7 GiB on spark-1" in fix
    assert "recommends gpu_memory_utilization 0.82" in fix
    assert "None" not in fix and "0.99" not in fix
