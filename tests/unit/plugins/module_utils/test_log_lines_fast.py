# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The normaliser's shortcuts change nothing.

``normalize`` tries a prefix pattern only where its first character could start it
and stops as soon as no pattern can match; ``strip_ansi_bytes`` cleans many lines at
once. Both are compared with the plain computation: the peeling loop as first
written (kept here as the reference) and :func:`strip_ansi` line by line.
"""

from ansible_collections.sparkops.vllm.plugins.module_utils import _log_lines as log_lines
from ansible_collections.sparkops.vllm.plugins.module_utils._log_lines import (
    normalize,
    strip_ansi,
    strip_ansi_bytes,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def _reference_normalize(line):
    """Every pattern tried in every round, as the normaliser was first written."""
    host = source = level = None
    headed = False
    repeated = 1
    match = log_lines._REPEATED_RE.search(line)
    if match:
        repeated = int(match.group("n"))
        line = line[: match.start()]
    text = line
    for _ in range(16):
        before = text
        stripped = text.lstrip()
        for pattern in log_lines._OUTER_PATTERNS:
            match = pattern.match(stripped)
            if match:
                stripped = stripped[match.end() :]
        match = log_lines._SYSLOG_RE.match(stripped)
        if match:
            host = host or match.group("host")
            stripped = stripped[match.end() :]
            headed = True
        match = log_lines._PROC_PREFIX_RE.match(stripped)
        if match:
            source = match.group("body")
            ip_match = log_lines._IP_IN_PREFIX_RE.search(source)
            if ip_match:
                host = ip_match.group("ip")
            stripped = stripped[match.end() :]
            headed = True
        match = log_lines._VLLM_HEADER_RE.match(stripped)
        if match:
            level = log_lines._LEVELS.get(match.group("level"), match.group("level"))
            stripped = stripped[match.end() :]
            headed = True
        match = log_lines._RAY_CPP_HEADER_RE.match(stripped)
        if match:
            level = log_lines._LEVELS.get(match.group("level"), match.group("level"))
            stripped = stripped[match.end() :]
            headed = True
        match = log_lines._NCCL_HEADER_RE.match(stripped)
        if match:
            host = host or match.group("host")
            stripped = stripped[match.end() :]
            headed = True
        text = stripped if stripped != text.lstrip() else text
        if text == before:
            break
    return text.rstrip(), host, source, level, repeated, headed


_piece = st.sampled_from(
    [
        "E   ",
        "E       ",
        "2026-04-09T01:15:02.553211Z ",
        "2026-04-09 01:15:02,1+02:00 ",
        "[2025-04-21 07:28:41 TP0] ",
        "vllm-head-1  | ",
        "a | ",
        "Jul 01 22:55:07 spark-1 kernel: ",
        "2026-04-09T01:15:02 spark-1 bash[12]: ",
        "(EngineCore_DP0 pid=1) ",
        "(RayWorkerWrapper pid=2, ip=10.0.0.2) ",
        "(raylet, ip=192.168.200.13) ",
        "(pid=123) ",
        "(autoscaler +1m3s) ",
        "(0.95, 45.01 GiB) ",
        "INFO 09-24 20:50:57 [gpu_worker.py:298] ",
        "WARN 09-24-2025 20:50:57.123 ",
        "DEBUG 09-24 20:50:57 ",
        "[2024-08-07 10:14:35,261 I 727164 727164] ",
        "h100-15:139:1092 [7] ",
        "\u0663\u0663\u0663\u0663-01-01T00:00:00 ",
        "\u00e9t\u00e9 | ",
        "  ",
        "\t",
        "Model loading took 27.7 GiB",
        "CUDA out of memory.",
        " [repeated 3x across cluster]",
        " [repeated 2x across cluster] (Ray deduplicates logs by default. Set X.)",
        "|",
        "[",
        "(",
        "E",
        "1",
        "",
    ]
)


@settings(max_examples=1500, deadline=None)
@given(pieces=st.lists(_piece, max_size=8), tail=st.text(max_size=12))
def test_normalize_matches_the_plain_loop(pieces, tail):
    line = "".join(pieces) + tail
    assert normalize(line) == _reference_normalize(line)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(
        alphabet=st.sampled_from(
            ["\x1b", "[", "]", "0", "m", ";", "\x07", "\\", "a", "\n", "\r", "\u00e9", "P"]
        )
    )
)
def test_strip_ansi_bytes_cleans_each_line_as_strip_ansi(text):
    data = text.encode("utf-8")
    expected = [strip_ansi(line).encode("utf-8") for line in text.split("\n")]
    assert strip_ansi_bytes(data).split(b"\n") == expected
