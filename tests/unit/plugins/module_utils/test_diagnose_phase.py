# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The startup phase of a memory kill (issue 16 point 5): weight loading apart from graph capture.

The lines are real wordings, each table naming its source; the phase comes from the loading
and capture lines above the kill in the same log.
"""

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose import (
    FINDING_IDS,
    diagnose_paths,
    diagnose_text,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose.precedence import PHASE_FINDINGS
from conftest import FIXTURES

REAL = FIXTURES / "real"
WRITTEN = FIXTURES / "diagnose"

# Source: tests/fixtures/diagnose/corpus_v1/25_vllm_model_loading_took_GiB_memory_newest_wording.txt
# (a captured vLLM startup log, 2026; verbatim). The bar prints on its own line under a bare prefix.
BAR_PREFIX = "(EngineCore pid=2207) "
SHARDS_DONE = "Loading safetensors checkpoint shards: 100% Completed | 15/15 [00:02<00:00,  6.63it/s]"
# Source: vllm-project/vllm issue #16692 (v0.8.4, Ray over two nodes): the bar's first print opens the load.
SHARDS = "Loading safetensors checkpoint shards:   0% Completed | 0/163 [00:00<?, ?it/s]"
SHARDS_MID = "Loading safetensors checkpoint shards:   7% Completed | 11/163 [00:03<00:52,  2.88it/s]"
WEIGHTS_TOOK = (
    "(EngineCore pid=2207) INFO 05-21 15:45:46 [default_loader.py:397] Loading weights took 2.33 seconds"
)
MODEL_TOOK = (
    "(EngineCore pid=2207) INFO 05-21 15:45:47 [gpu_model_runner.py:4959] Model loading took 7.75 GiB memory "
    "and 3.151355 seconds"
)
# The wording without "memory" (vLLM 0.10-0.17 builds), as in tests/fixtures/diagnose/
# ray_oom_during_graph_capture.log; the remote-worker lines below put these real wordings under
# the prefix of a remote Ray worker (a written interleaving).
MODEL_TOOK_0_17 = (
    "INFO 04-09 01:14:05 [gpu_model_runner.py:2392] Model loading took 58.9012 GiB and 705.271 seconds"
)
# Source: tests/fixtures/real/30_ray_oom_killer_message_ray-28776.txt (ray-project/ray issue #28776).
RAY_KILL = (
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 172.31.69.247, ID: 5bf8d24f68a4b2f966b34cb94a41d1a312f406dc9081063ea7dd661b) where "
    "the task was running was 54.86GB / 57.60GB (0.952354), which exceeds the memory usage threshold of 0.95."
)
# Source: tests/fixtures/diagnose/ray_oom_during_graph_capture.log (the capture bar of vLLM 0.10+,
# vllm/v1/worker/gpu_model_runner.py capture_model: "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE)").
CAPTURE = (
    "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  37%|███▋      | 25/67 [00:19<00:31,  1.33it/s]"
)
# Source: vllm-project/vllm issue #7057 (v0.5.3.post1, Ray, two hosts): the prefix of a remote Ray worker.
WORKER = "(RayWorkerWrapper pid=4329, ip=192.168.200.191) "


def _ray_oom(text):
    result = diagnose_text(text)
    return next(item for item in result["findings"] if item["id"] == "ray_oom_kill")


PHASE_CASES = [
    # kill after loading lines only: the load was still open
    ("shards_only", [BAR_PREFIX, SHARDS, RAY_KILL], "weight_loading"),
    # "Loading weights took" comes before process_weights_after_loading: still loading
    ("weights_took", [BAR_PREFIX, SHARDS, WEIGHTS_TOOK, RAY_KILL], "weight_loading"),
    # "Model loading took" closed the load; nothing says what came next
    ("load_closed", [BAR_PREFIX, SHARDS, BAR_PREFIX, SHARDS_DONE, WEIGHTS_TOOK, MODEL_TOOK, RAY_KILL], None),
    # a later print of the bar alone is no marker (only its first print is, to keep the prefilter fast)
    ("bar_later_print_only", [BAR_PREFIX, SHARDS_MID, RAY_KILL], None),
    # kill after capture lines
    ("capture", [BAR_PREFIX, SHARDS, MODEL_TOOK, CAPTURE, RAY_KILL], "graph_capture"),
    # no phase lines at all
    ("none", [RAY_KILL], None),
    # interleaved Ray-prefixed lines: the remote worker finished, the head rank still loads
    (
        "remote_done_head_loading",
        [
            WORKER + WEIGHTS_TOOK.removeprefix("(EngineCore pid=2207) "),
            BAR_PREFIX,
            SHARDS_MID,
            WORKER
            + "INFO 08-02 01:40:12 gpu_model_runner.py:2392] Model loading took 58.9012 GiB and 705.271 seconds",
            WEIGHTS_TOOK,
            RAY_KILL,
        ],
        "weight_loading",
    ),
    # interleaved: both ranks printed "Model loading took" before the kill
    (
        "both_done",
        [
            WORKER + WEIGHTS_TOOK.removeprefix("(EngineCore pid=2207) "),
            BAR_PREFIX,
            SHARDS,
            MODEL_TOOK,
            WORKER
            + "INFO 08-02 01:40:12 gpu_model_runner.py:2392] Model loading took 58.9012 GiB and 705.271 seconds",
            RAY_KILL,
        ],
        None,
    ),
    # interleaved: the remote worker captures while the head's lines still show loading
    ("remote_capture", [BAR_PREFIX, SHARDS, WORKER + CAPTURE, RAY_KILL], "graph_capture"),
]


@pytest.mark.parametrize(("name", "lines", "phase"), PHASE_CASES, ids=[case[0] for case in PHASE_CASES])
def test_ray_oom_phase(name, lines, phase):
    found = _ray_oom("\n".join(lines) + "\n")
    assert found.get("phase") == phase
    if phase == "weight_loading":
        assert "while the weights were loading" in found["summary"]
        assert "load_reserve_gib" in found["fix"]
        assert "barely changes that peak" in found["fix"]
        assert "does not help either" in found["fix"]
        assert "during CUDA graph capture" not in found["summary"]
    else:
        assert "load_reserve_gib" not in found["fix"]
        assert "sparkops_gpu_memory_utilization" in found["fix"]
        assert "When the kill came during CUDA graph capture" in found["fix"]
    if phase == "graph_capture":
        assert "during CUDA graph capture" in found["summary"]
    if phase is None:
        assert "phase" not in found
        assert "while the weights were loading" not in found["summary"]


def test_the_real_loading_kill_is_weight_loading():
    """Two DGX Sparks, TP=2: Ray's monitor killed the worker mid-shards (MiaAI-Lab PR #2)."""
    result = diagnose_paths([str(WRITTEN / "ray_oom_during_weight_loading.log")])
    assert [item["id"] for item in result["findings"]] == ["ray_oom_kill"]
    found = result["findings"][0]
    assert found["phase"] == "weight_loading"
    assert "PR #45179" in found["summary"]
    assert "sparkops_ray_memory_monitor: false" in found["fix"]
    assert "`sparkops_cuda_graphs: false` (--enforce-eager) does not help" in found["fix"]


def test_the_written_capture_kill_and_the_real_kills_keep_their_phase():
    capture = diagnose_paths([str(WRITTEN / "ray_oom_during_graph_capture.log")])["findings"][0]
    assert (capture["id"], capture["phase"]) == ("ray_oom_kill", "graph_capture")
    plain = diagnose_paths([str(REAL / "30_ray_oom_killer_message_ray-28776.txt")])["findings"][0]
    assert plain["id"] == "ray_oom_kill"
    assert "phase" not in plain
    graph = diagnose_paths([str(REAL / "20_vllm_cudagraph_capture_oom_issue19186.txt")])["findings"][0]
    assert (graph["id"], graph["phase"]) == ("cuda_graph_capture_oom", "graph_capture")


# Source: vllm-project/vllm issue #21864 ("GPU OOM when processing AWQ Marlin weights with UVA CPU
# Offload", vLLM 0.10, verbatim frames) and the OOM line of issue #31273 ("OOM during weight loading
# on H20 ... v0.13.0", verbatim): vLLM prints the frames before the exception.
POST_PROCESSING_TRACEBACK = """\
(VllmWorker rank=1 pid=2872031) ERROR 07-29 14:45:45 [multiproc_executor.py:557]   File "/mnt/hot/dev/personal/vllm/vllm/model_executor/model_loader/base_loader.py", line 50, in load_model
(VllmWorker rank=1 pid=2872031) ERROR 07-29 14:45:45 [multiproc_executor.py:557]     process_weights_after_loading(model, model_config, target_device)
(VllmWorker rank=1 pid=2872031) ERROR 07-29 14:45:45 [multiproc_executor.py:557]   File "/mnt/hot/dev/personal/vllm/vllm/model_executor/model_loader/utils.py", line 112, in process_weights_after_loading
(EngineCore_DP0 pid=556790) ERROR 12-24 08:50:35 [core.py:866] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 80.00 MiB. GPU 0 has a total capacity of 139.72 GiB of which 60.69 MiB is free.
"""
# Ray's format prints the exception first and the traceback after it.
RAY_ORDER_TRACEBACK = "\n".join(
    [POST_PROCESSING_TRACEBACK.splitlines()[-1], *POST_PROCESSING_TRACEBACK.splitlines()[:-1]]
)


@pytest.mark.parametrize(
    "text", [POST_PROCESSING_TRACEBACK, RAY_ORDER_TRACEBACK], ids=["vllm_order", "ray_order"]
)
def test_cuda_oom_in_weight_post_processing(text):
    result = diagnose_text(text)
    found = next(item for item in result["findings"] if item["id"] == "cuda_oom")
    assert found["phase"] == "weight_loading"
    assert "while the weights were loading" in found["summary"]
    assert "load_reserve_gib" in found["fix"]
    assert "sparkops_tensor_parallel_size" in found["fix"]


def test_cuda_oom_without_phase_keeps_its_fix():
    line = POST_PROCESSING_TRACEBACK.splitlines()[-1]
    found = diagnose_text(line + "\n")["findings"][0]
    assert found["id"] == "cuda_oom"
    assert "phase" not in found
    assert "load_reserve_gib" not in found["fix"]


def test_the_plan_quotes_the_load_time_peak():
    plan = {
        "nodes": {
            "spark-1": {"load_peak_gib": 104.2, "peak_gib": 110.0, "limit_gib": 108.1},
            "spark-2": {"load_peak_gib": 99.0, "peak_gib": 109.0, "limit_gib": 108.1},
        }
    }
    result = diagnose_paths([str(WRITTEN / "ray_oom_during_weight_loading.log")], {"memory_plan": plan})
    fix = result["findings"][0]["fix"]
    assert "load-time peak at 104.2 GiB against the limit 108.1 GiB on spark-1" in fix
    assert "recommends gpu_memory_utilization" not in fix


def test_a_new_file_starts_with_no_load_open(tmp_path):
    """The phase comes from the same log: loading lines in one file do not date a kill in the next."""
    loading = tmp_path / "serve.log"
    loading.write_text(f"{BAR_PREFIX}\n{SHARDS}\n", encoding="utf-8")
    kill = tmp_path / "raylet.log"
    kill.write_text(RAY_KILL + "\n", encoding="utf-8")
    found = diagnose_paths([str(loading), str(kill)])["findings"][0]
    assert found["id"] == "ray_oom_kill"
    assert "phase" not in found
    both = tmp_path / "both.log"
    both.write_text(loading.read_text(encoding="utf-8") + kill.read_text(encoding="utf-8"), encoding="utf-8")
    assert diagnose_paths([str(both)])["findings"][0]["phase"] == "weight_loading"


def test_phase_findings_are_finding_ids():
    assert set(FINDING_IDS) >= PHASE_FINDINGS


# Source: tests/fixtures/diagnose/uma_nvrm_no_memory_gb10_vllm-41834.log (vllm-project/vllm PR #41834,
# dmesg of a DGX Spark): the driver's line, here in one merged log after vLLM's loading lines.
NVRM = (
    "[81033.194223] NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051) "
    "returned from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359"
)


@pytest.mark.parametrize(
    ("lines", "phase"),
    [([BAR_PREFIX, SHARDS, NVRM, NVRM], "weight_loading"), ([NVRM, NVRM], None)],
    ids=["after_loading_lines", "alone"],
)
def test_driver_out_of_memory_phase(lines, phase):
    result = diagnose_text("\n".join(lines) + "\n")
    found = next(item for item in result["findings"] if item["id"] == "uma_driver_out_of_memory")
    assert found.get("phase") == phase
    assert ("load_reserve_gib" in found["fix"]) is (phase == "weight_loading")
    assert "drop_caches" in found["fix"]
