# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Parse vLLM's memory-accounting log lines into the memory plan's ``measured`` shape.

vLLM reports how it spent its memory claim in a handful of lines whose wording changed
between releases. Every pattern here is searched (never anchored), because real lines
carry nested process prefixes such as ``(EngineCore_DP0 pid=1) (RayWorkerWrapper pid=2,
ip=10.0.0.2)``, a level/date/source header like ``INFO 03-12 10:00:00
[gpu_worker.py:123]``, and sometimes ANSI colours.

Units: vLLM divides every figure by 2**30 before printing it, also where the label says
``GB`` (``Model loading took 8.6253 GB`` in 0.6-era releases), so every value is read as
GiB.

Several ranks print the same line. The result is conservative per term: the largest
usage figure (weights, activation, non-torch, CUDA graphs) and the smallest KV cache of
all ranks, because the cluster's budget is decided by its tightest rank.
"""

from __future__ import annotations

import re

ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")

_NUM = r"(-?\d+(?:\.\d+)?)"
_UNIT = r"\s*(?:GiB|GB)"

# (result key, pattern, how several ranks combine: max or min)
_USAGE_PATTERNS = (
    # v0.10+ "Actual usage is ..." (gpu_worker.py, printed after graph capture)
    (
        "actual_usage",
        re.compile(
            r"Actual usage is\s+"
            + _NUM
            + _UNIT
            + r" for weight,\s*"
            + _NUM
            + _UNIT
            + r" for peak activation,\s*"
            + _NUM
            + _UNIT
            + r" for non-torch memory"
            r"(?:,\s*and\s+" + _NUM + _UNIT + r" for CUDAGraph memory)?",
            re.IGNORECASE,
        ),
    ),
)

_SINGLE_PATTERNS = (
    # "Model loading took 27.7183 GiB and 286.02 seconds" (v0.8+),
    # "Model loading took 14.99 GiB memory and 10.5 seconds" (v0.11+),
    # "Model loading took 8.6253 GB and 7.67 seconds", "Loading model weights took 8.51 GB" (v0.6/0.7)
    ("weights_gib", max, re.compile(r"(?:Model loading|Loading model weights) took\s+" + _NUM + _UNIT)),
    # V0/early V1 profiling summary, one message over one or several lines.
    ("weights_gib", max, re.compile(r"model weights take\s+" + _NUM + _UNIT)),
    ("non_torch_gib", max, re.compile(r"non_torch_memory takes\s+" + _NUM + _UNIT)),
    ("activation_gib", max, re.compile(r"PyTorch activation peak memory takes\s+" + _NUM + _UNIT)),
    ("kv_cache_gib", min, re.compile(r"the rest of the memory reserved for KV Cache is\s+" + _NUM + _UNIT)),
    ("kv_cache_gib", min, re.compile(r"Available KV cache memory:\s*" + _NUM + _UNIT)),
    # "Graph capturing finished in 53 secs, took 3.45 GiB" (capture outside the claim)
    (
        "cuda_graph_gib",
        max,
        re.compile(r"Graph capturing finished in\s+[\d.]+\s*secs?,\s*took\s+" + _NUM + _UNIT),
    ),
    # v0.21+ "Estimated CUDA graph memory: 0.26 GiB total" (profiled into the claim)
    ("cuda_graph_gib", max, re.compile(r"Estimated CUDA graph memory:\s*" + _NUM + _UNIT)),
    ("kv_cache_tokens", min, re.compile(r"GPU KV cache size:\s*([\d,]+)\s*tokens")),
)

# "Free memory on device (43.93/44.42 GiB) on startup. Desired GPU memory utilization is (0.9, 39.98 GiB)"
# and the v0.9 failure "... is less than desired GPU memory utilization (0.95, 45.01 GiB)".
_FREE_TOTAL_RE = re.compile(
    r"Free memory on device(?: [^(]*)?\(\s*" + _NUM + r"\s*/\s*" + _NUM + _UNIT + r"\s*\)"
)
_DESIRED_RE = re.compile(
    r"desired GPU memory utilization(?: is)?\s*\(\s*" + _NUM + r"\s*,\s*" + _NUM + _UNIT, re.I
)
# "total_gpu_memory (79.22GiB) x gpu_memory_utilization (0.90) = 71.29GiB"
_TOTAL_X_UTIL_RE = re.compile(
    r"total_gpu_memory\s*\(\s*"
    + _NUM
    + _UNIT
    + r"\s*\)\s*x\s*gpu_memory_utilization\s*\(\s*"
    + _NUM
    + r"\s*\)"
)
_GRAPH_PROFILED_RE = re.compile(r"CUDA graph memory profiling is enabled", re.IGNORECASE)

MEASURED_KEYS = ("weights_gib", "activation_gib", "non_torch_gib", "cuda_graph_gib")


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text)


def _as_text(lines_or_text) -> str:
    if lines_or_text is None:
        return ""
    if isinstance(lines_or_text, bytes):
        return lines_or_text.decode("utf-8", errors="replace")
    if isinstance(lines_or_text, str):
        return lines_or_text
    return "\n".join(
        line.decode("utf-8", errors="replace") if isinstance(line, bytes) else str(line)
        for line in lines_or_text
    )


def _merge(result: dict, key: str, value, combine) -> None:
    result[key] = value if key not in result else combine(result[key], value)


def parse_memory_lines(lines_or_text) -> dict:
    """Return what vLLM logged about its memory, in the plan's ``measured`` shape.

    Accepts a string, bytes, or an iterable of lines. Only keys that were found are
    present. Keys: ``weights_gib``, ``activation_gib``, ``non_torch_gib``,
    ``cuda_graph_gib`` (the ``measured`` input of the plan), plus ``kv_cache_gib``,
    ``kv_cache_tokens``, ``memory_total_gib``, ``memory_free_gib`` (free memory vLLM
    saw at startup), ``gpu_memory_utilization``, ``cuda_graph_memory_profiled`` (only
    when the log says so) and ``lines_matched`` (always present).
    """
    text = strip_ansi(_as_text(lines_or_text))
    result: dict = {}
    matched_lines: set[int] = set()

    # Line starts, so that every match can be attributed to one line for lines_matched.
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]

    def line_of(pos: int) -> int:
        lo, hi = 0, len(starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo

    for _name, pattern in _USAGE_PATTERNS:
        for m in pattern.finditer(text):
            matched_lines.add(line_of(m.start()))
            _merge(result, "weights_gib", float(m.group(1)), max)
            _merge(result, "activation_gib", float(m.group(2)), max)
            _merge(result, "non_torch_gib", float(m.group(3)), max)
            if m.group(4) is not None:
                _merge(result, "cuda_graph_gib", float(m.group(4)), max)

    for key, combine, pattern in _SINGLE_PATTERNS:
        for m in pattern.finditer(text):
            matched_lines.add(line_of(m.start()))
            raw = m.group(1)
            value = int(raw.replace(",", "")) if key == "kv_cache_tokens" else float(raw)
            _merge(result, key, value, combine)

    for m in _FREE_TOTAL_RE.finditer(text):
        matched_lines.add(line_of(m.start()))
        _merge(result, "memory_free_gib", float(m.group(1)), min)
        _merge(result, "memory_total_gib", float(m.group(2)), min)
    for m in _DESIRED_RE.finditer(text):
        matched_lines.add(line_of(m.start()))
        result["gpu_memory_utilization"] = float(m.group(1))
    for m in _TOTAL_X_UTIL_RE.finditer(text):
        matched_lines.add(line_of(m.start()))
        _merge(result, "memory_total_gib", float(m.group(1)), min)
        result["gpu_memory_utilization"] = float(m.group(2))
    for m in _GRAPH_PROFILED_RE.finditer(text):
        matched_lines.add(line_of(m.start()))
        result["cuda_graph_memory_profiled"] = True

    result["lines_matched"] = len(matched_lines)
    return result


def measured_from_log(lines_or_text) -> dict:
    """Only the four ``measured`` terms of the plan, from a log."""
    parsed = parse_memory_lines(lines_or_text)
    return {key: parsed[key] for key in MEASURED_KEYS if key in parsed}
