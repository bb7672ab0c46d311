# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The log line normaliser: prefixes, ANSI codes, carriage returns, Ray's dedup suffix."""

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._log_lines import (
    clean_physical,
    iter_log_lines,
    iter_path_lines,
    normalize,
    strip_ansi,
)

# (physical line, text, host, source, level, repeated)
CASES = [
    (
        "(EngineCore_DP0 pid=1) (RayWorkerWrapper pid=2, ip=10.0.0.2) ERROR 10-25 13:08:43 [core.py:708] "
        "boom",
        "boom",
        "10.0.0.2",
        "RayWorkerWrapper pid=2, ip=10.0.0.2",
        "ERROR",
        1,
    ),
    (
        "\x1b[36m(raylet, ip=192.168.200.13)\x1b[0m [2024-08-07 10:14:35,261 I 727164 727164] "
        "global_state_accessor.cc:432: hello [repeated 3x across cluster] (Ray deduplicates logs by default. "
        "Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io/x for more options.)",
        "global_state_accessor.cc:432: hello",
        "192.168.200.13",
        "raylet, ip=192.168.200.13",
        "INFO",
        3,
    ),
    (
        "h100-15:139:1092 [7] socket.c:485 NCCL WARN socketStartConnect: Connect",
        "socket.c:485 NCCL WARN socketStartConnect: Connect",
        "h100-15",
        None,
        None,
        1,
    ),
    (
        "Jul 01 22:55:07 gpu kernel: NVRM: GPU 0000:01:00.0: rm_init_adapter failed",
        "NVRM: GPU 0000:01:00.0: rm_init_adapter failed",
        "gpu",
        None,
        None,
        1,
    ),
    (
        "E       (Worker_TP2_EP2 pid=2080) (Worker_TP6_EP6 pid=2084) WARNING 09-24 20:53:34 "
        "[fused_moe.py:727] Using",
        "Using",
        None,
        "Worker_TP6_EP6 pid=2084",
        "WARNING",
        1,
    ),
    (
        "2025-04-09T00:47:22.123456789Z (VllmWorker rank=3 pid=1090) INFO 06-05 06:18:13 [x.py:1] ready",
        "ready",
        None,
        "VllmWorker rank=3 pid=1090",
        "INFO",
        1,
    ),
    (
        "vllm-head-1  | (APIServer pid=7) INFO 06-05 06:18:13 [x.py:1] up",
        "up",
        None,
        "APIServer pid=7",
        "INFO",
        1,
    ),
    # A parenthesis that is data, not a prefix, stays.
    ("(0.95, 45.01 GiB) is what was asked", "(0.95, 45.01 GiB) is what was asked", None, None, None, 1),
    ("(Worker_TP0_EP0 pid=2078) ", "", None, "Worker_TP0_EP0 pid=2078", None, 1),
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{index}" for index in range(len(CASES))])
def test_normalize(case):
    raw, *expected = case
    assert normalize(clean_physical(raw))[:5] == tuple(expected)


def test_traceback_indentation_survives_the_prefix():
    text, *_ = normalize('(APIServer pid=223598)   File "/opt/x.py", line 785, in wait_for_engine_startup')
    assert text == '  File "/opt/x.py", line 785, in wait_for_engine_startup'


def test_headed_only_for_records():
    assert normalize("(APIServer pid=1) x")[5] is True
    assert normalize("INFO 09-24 20:50:57 [gpu_worker.py:298] x")[5] is True
    assert normalize("eshold of 0.95. Ray killed this worker")[5] is False


def test_carriage_return_keeps_what_the_terminal_shows():
    raw = "Capturing CUDA graphs:  10%|#  | 7/67\rCapturing CUDA graphs: 100%|###| 67/67\r\n"
    assert clean_physical(raw) == "Capturing CUDA graphs: 100%|###| 67/67"


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("\x1b[1;31mERROR\x1b[0m boom", "ERROR boom"),
        ("\x1b]8;;https://x\x07link\x1b]8;;\x07", "link"),
        ("\x1b[2K\x1b[1Gdone", "done"),
        ("plain", "plain"),
    ],
)
def test_strip_ansi(raw, clean):
    assert strip_ansi(raw) == clean


def test_iter_log_lines_numbers_physical_lines():
    lines = list(iter_log_lines(["a\n", "(raylet, ip=10.0.0.9) b\n", "c"]))
    assert [(line.number, line.text, line.host) for line in lines] == [
        (1, "a", None),
        (2, "b", "10.0.0.9"),
        (3, "c", None),
    ]


def test_iter_path_lines_splits_on_newline_only(tmp_path):
    log = tmp_path / "x.log"
    log.write_bytes(b"one\rone-redrawn\ntwo \xff\n")
    lines = list(iter_path_lines(str(log)))
    assert len(lines) == 2
    assert clean_physical(lines[0]) == "one-redrawn"
    assert "\ufffd" in lines[1]
