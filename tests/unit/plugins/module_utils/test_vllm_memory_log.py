# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The vLLM memory-line parser against real logs (tests/fixtures/real) and written variants."""

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._vllm_memory_log import (
    measured_from_log,
    parse_memory_lines,
)
from conftest import FIXTURES

REAL = FIXTURES / "real"


def read(name):
    return (REAL / name).read_text(encoding="utf-8")


def test_fixture_28_v0_10_2_full_sequence():
    parsed = parse_memory_lines(read("28_vllm_v0.10.2_full_memory_sequence_8xL40S_TP8EP.txt"))
    # "Actual usage is 27.72 GiB for weight, ..." beats "Model loading took 27.7183 GiB" (max per term).
    assert parsed["weights_gib"] == 27.72
    assert parsed["activation_gib"] == 1.4
    assert parsed["non_torch_gib"] == 0.21
    assert parsed["cuda_graph_gib"] == 3.45
    # Eight ranks logged 10.64..10.68; the tightest rank decides.
    assert parsed["kv_cache_gib"] == 10.64
    assert parsed["kv_cache_tokens"] == 237392
    assert parsed["memory_free_gib"] == 43.93
    assert parsed["memory_total_gib"] == 44.42
    assert parsed["gpu_memory_utilization"] == 0.9
    assert "cuda_graph_memory_profiled" not in parsed


def test_fixture_28_model_loading_lines_alone():
    text = read("28_vllm_v0.10.2_full_memory_sequence_8xL40S_TP8EP.txt")
    excerpt1 = text.split("--- excerpt 2")[0]
    assert parse_memory_lines(excerpt1)["weights_gib"] == 27.7183


def test_fixture_15_v0_21_estimate_and_profiling_flag():
    parsed = parse_memory_lines(read("15_vllm_kv_cache_lines_v0.21_lmcache-3326.txt"))
    assert parsed["cuda_graph_gib"] == 0.26
    assert parsed["kv_cache_gib"] == 111.99
    assert parsed["kv_cache_tokens"] == 229344
    assert parsed["cuda_graph_memory_profiled"] is True


def test_fixture_10_startup_free_memory_line():
    parsed = parse_memory_lines(read("10_vllm_free_memory_less_than_desired_v0.9.1_issue20305.txt"))
    assert parsed["memory_free_gib"] == 31.44
    assert parsed["memory_total_gib"] == 47.38
    assert parsed["gpu_memory_utilization"] == 0.95
    assert parsed["lines_matched"] == 1


@pytest.mark.parametrize(
    "name",
    [
        "20_vllm_cudagraph_capture_oom_issue19186.txt",
        "21_vllm_no_available_memory_cache_blocks_and_engine_init_failed_issue27508.txt",
    ],
)
def test_failure_logs_without_memory_lines_give_nothing(name):
    assert parse_memory_lines(read(name)) == {"lines_matched": 0}


WRITTEN = [
    (
        "\x1b[36m(EngineCore_DP0 pid=1)\x1b[0m (RayWorkerWrapper pid=2, ip=192.168.200.2) "
        "INFO 03-12 10:00:00 [gpu_model_runner.py:2392] "
        "Model loading took 55.4100 GiB memory and 612.3 seconds",
        {"weights_gib": 55.41},
    ),
    (
        "INFO 07-02 17:08:01 [model_runner.py:1146] Model loading took 8.6253 GB and 7.670299 seconds",
        {"weights_gib": 8.6253},
    ),
    (
        "INFO 12-22 10:55:34 model_runner.py:1097] Loading model weights took 8.5107 GB",
        {"weights_gib": 8.5107},
    ),
    (
        "INFO 03-14 09:13:07 [gpu_worker.py:227] Memory profiling takes 11.85 seconds\n"
        "the current vLLM instance can use total_gpu_memory (79.11GiB) x "
        "gpu_memory_utilization (0.90) = 71.20GiB\n"
        "model weights take 14.99GiB; non_torch_memory takes 0.35GiB; "
        "PyTorch activation peak memory takes 1.24GiB;\n"
        "the rest of the memory reserved for KV Cache is 54.62GiB.",
        {
            "weights_gib": 14.99,
            "non_torch_gib": 0.35,
            "activation_gib": 1.24,
            "kv_cache_gib": 54.62,
            "memory_total_gib": 79.11,
            "gpu_memory_utilization": 0.9,
        },
    ),
    (
        "(RayWorkerWrapper pid=3918397) \x1b[1;32mINFO\x1b[0m 03-29 01:24:36 worker.py:272] "
        "model weights take 15.63GiB; non_torch_memory takes 0.81GiB; PyTorch activation peak "
        "memory takes 3.52GiB; the rest of the memory reserved for KV Cache is 11.57GiB.",
        {"weights_gib": 15.63, "non_torch_gib": 0.81, "activation_gib": 3.52, "kv_cache_gib": 11.57},
    ),
    (
        "(EngineCore pid=404) (Worker_TP1 pid=7) INFO 05-19 02:17:43 [gpu_worker.py:440] "
        "Actual usage is 55.41 GiB for weight, 2.1 GiB for peak activation, 2.9 GiB for "
        "non-torch memory, and 0.74 GiB for CUDAGraph memory.",
        {"weights_gib": 55.41, "activation_gib": 2.1, "non_torch_gib": 2.9, "cuda_graph_gib": 0.74},
    ),
    (
        "(Worker_TP0 pid=9) INFO 01-01 00:00:00 [gpu_worker.py:391] Actual usage is 7.1 GiB for weight, "
        "0.9 GiB for peak activation, 0.1 GiB for non-torch memory.",
        {"weights_gib": 7.1, "activation_gib": 0.9, "non_torch_gib": 0.1},
    ),
    (
        "\x1b[32m(Worker pid=3)\x1b[0m INFO [gpu_model_runner.py:3118] "
        "Graph capturing finished in 12 secs, took 0.74 GiB",
        {"cuda_graph_gib": 0.74},
    ),
    (
        "(EngineCore_DP0 pid=1) INFO [kv_cache_utils.py:864] GPU KV cache size: 1,234,560 tokens",
        {"kv_cache_tokens": 1234560},
    ),
]


@pytest.mark.parametrize(("line", "expected"), WRITTEN)
def test_written_variants(line, expected):
    parsed = parse_memory_lines(line)
    for key, value in expected.items():
        assert parsed[key] == value, key
    assert parsed["lines_matched"] >= 1


def test_lines_list_and_bytes_give_the_same_result():
    text = read("28_vllm_v0.10.2_full_memory_sequence_8xL40S_TP8EP.txt")
    assert parse_memory_lines(text.splitlines()) == parse_memory_lines(text)
    assert parse_memory_lines(text.encode()) == parse_memory_lines(text)


def test_ranks_combine_conservatively():
    text = (
        "(Worker_TP0 pid=1) INFO Available KV cache memory: 49.50 GiB\n"
        "(Worker_TP1 pid=2) INFO Available KV cache memory: 49.12 GiB\n"
        "(Worker_TP0 pid=1) INFO Graph capturing finished in 30 secs, took 1.10 GiB\n"
        "(Worker_TP1 pid=2) INFO Graph capturing finished in 31 secs, took 1.30 GiB\n"
    )
    parsed = parse_memory_lines(text)
    assert parsed["kv_cache_gib"] == 49.12
    assert parsed["cuda_graph_gib"] == 1.3
    assert parsed["lines_matched"] == 4


def test_measured_from_log_keeps_only_the_plan_terms():
    measured = measured_from_log(read("28_vllm_v0.10.2_full_memory_sequence_8xL40S_TP8EP.txt"))
    assert measured == {
        "weights_gib": 27.72,
        "activation_gib": 1.4,
        "non_torch_gib": 0.21,
        "cuda_graph_gib": 3.45,
    }


def test_empty_input():
    assert parse_memory_lines("") == {"lines_matched": 0}
    assert parse_memory_lines(None) == {"lines_matched": 0}
