# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The bench's figures, from llama-benchy's own output, as JSON, a Markdown table and a chart.

llama-benchy (0.4.0) runs once per concurrency level (roles/bench) and writes two files:

- ``--emit-progress FILE``: JSON lines (schema ``llama-benchy-progress.v1``), one event per
  request start, first token, token chunk and end, each with its wall-clock ``ts``; a
  ``request_end`` carries the request's output tokens (``total_tokens``), its prompt tokens
  (the server's usage) and its ``error`` (empty when it succeeded);
- ``--save-result FILE --format json``: its summary (version, model, and per test the mean
  and raw values of its throughputs and times).

The percentiles come from the events, per request: time to first token is the request's
``request_first_token.ttft_s``; inter-token latency is the gap between two consecutive
token chunks of one request over the tokens the later chunk carries (all gaps of all
requests of the level pooled). Throughput is counted per batch (a run of ``concurrency``
requests sent at once): tokens over the batch's span, first start to last end, and the mean
over the level's batches. Total tokens count the prompt's (the server's usage) and the
output's. llama-benchy's own generation throughput is kept beside ours as a cross-check.

A line that is not JSON, or an event of an unknown type, is counted as a warning, never a
crash: the tool's schema may grow.
"""

from __future__ import annotations

import json
import math
from itertools import pairwise
from collections.abc import Iterable, Sequence
from typing import Any

PROGRESS_SCHEMA = "llama-benchy-progress.v1"
ERROR_SAMPLES = 3  # distinct error messages kept per level
ERROR_CHARS = 300


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), linear between closest ranks (numpy's default); None when empty."""
    data = sorted(values)
    if not data:
        return None
    rank = (len(data) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return data[low] + (data[high] - data[low]) * (rank - low)


def parse_progress(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The requests of one progress file, in start order, and the warnings it raised."""
    requests: list[dict[str, Any]] = []
    open_requests: dict[Any, dict[str, Any]] = {}
    warnings: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            warnings.append(f"line {number}: not JSON: {line[:80]!r}")
            continue
        if not isinstance(event, dict):
            warnings.append(f"line {number}: not an event object")
            continue
        kind, rid = event.get("type"), event.get("request_id")
        if kind == "header" and event.get("schema") != PROGRESS_SCHEMA:
            warnings.append(f"line {number}: schema {event.get('schema')!r}, read as {PROGRESS_SCHEMA}")
        if kind == "request_start":
            request = {
                "concurrency": int(event.get("concurrency") or 0),
                "batch": event.get("run_index"),
                "prompt_size": event.get("prompt_size"),
                "response_size": event.get("response_size"),
                "start": float(event["ts"]),
                "ttft_s": None,
                "end": None,
                "output_tokens": 0,
                "prompt_tokens": 0,
                "error": None,
                "chunks": [],
            }
            requests.append(request)
            open_requests[rid] = request
        elif kind in ("request_first_token", "tokens", "request_end"):
            request = open_requests.get(rid)
            if request is None:
                warnings.append(f"line {number}: {kind} of request {rid!r} that did not start")
                continue
            if kind == "request_first_token":
                request["ttft_s"] = float(event["ttft_s"])
            elif kind == "tokens":
                request["chunks"].append((float(event["ts"]), int(event.get("count") or 0)))
            else:
                request["end"] = float(event["ts"])
                request["output_tokens"] = int(event.get("total_tokens") or 0)
                request["prompt_tokens"] = int(event.get("prompt_tokens") or 0)
                request["error"] = event.get("error") or None
                del open_requests[rid]
        elif kind not in ("header", "latency_measured", "request_first_response", "bench_complete"):
            warnings.append(f"line {number}: unknown event type {kind!r}")
    for request in open_requests.values():
        request["error"] = request["error"] or "the request never ended (llama-benchy stopped)"
    return requests, warnings


def inter_token_gaps(chunks: Sequence[tuple[float, int]]) -> list[float]:
    """Seconds per token between consecutive chunks of one request (a chunk may carry several)."""
    gaps = []
    for (before, _), (after, count) in pairwise(chunks):
        if count > 0:
            gaps.append(max(0.0, after - before) / count)
    return gaps


def _batch_rates(requests: Sequence[dict[str, Any]]) -> tuple[float | None, float | None]:
    """Mean over the batches of (output tokens/s, total tokens/s); None when no batch produced."""
    batches: dict[Any, list[dict[str, Any]]] = {}
    for request in requests:
        batches.setdefault(request["batch"], []).append(request)
    output_rates, total_rates = [], []
    for members in batches.values():
        ended = [r for r in members if r["end"] is not None]
        if not ended:
            continue
        span = max(r["end"] for r in ended) - min(r["start"] for r in members)
        done = [r for r in ended if not r["error"]]
        if span <= 0 or not done:
            continue
        output = sum(r["output_tokens"] for r in done)
        output_rates.append(output / span)
        total_rates.append((output + sum(r["prompt_tokens"] for r in done)) / span)
    if not output_rates:
        return None, None
    return sum(output_rates) / len(output_rates), sum(total_rates) / len(total_rates)


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000.0, 3)


def _rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def level_summary(requests: Sequence[dict[str, Any]], result: dict[str, Any] | None) -> dict[str, Any]:
    """One concurrency level's figures (its requests from one llama-benchy run)."""
    done = [r for r in requests if not r["error"]]
    failed = [r for r in requests if r["error"]]
    output_tps, total_tps = _batch_rates(requests)
    ttft = [r["ttft_s"] for r in done if r["ttft_s"] is not None]
    itl = [gap for r in done for gap in inter_token_gaps(r["chunks"])]
    messages: list[str] = []
    for request in failed:
        message = str(request["error"])[:ERROR_CHARS]
        if message not in messages and len(messages) < ERROR_SAMPLES:
            messages.append(message)
    tool_tps = None
    bench = _benchmark(result)
    if bench and isinstance(bench.get("tg_throughput"), dict):
        tool_tps = bench["tg_throughput"].get("mean")
    concurrency = requests[0]["concurrency"] if requests else (bench or {}).get("concurrency", 0)
    return {
        "concurrency": concurrency,
        "prompt_tokens_asked": requests[0]["prompt_size"] if requests else (bench or {}).get("prompt_size"),
        "output_tokens_asked": requests[0]["response_size"]
        if requests
        else (bench or {}).get("response_size"),
        "requests": len(requests),
        "errors": len(failed),
        "error_samples": messages,
        "output_tokens_per_s": _rounded(output_tps),
        "total_tokens_per_s": _rounded(total_tps),
        "llama_benchy_output_tokens_per_s": _rounded(tool_tps),
        "ttft_ms": {"p50": _ms(percentile(ttft, 50)), "p95": _ms(percentile(ttft, 95)), "samples": len(ttft)},
        "itl_ms": {"p50": _ms(percentile(itl, 50)), "p95": _ms(percentile(itl, 95)), "samples": len(itl)},
        "output_tokens": sum(r["output_tokens"] for r in done),
    }


def _benchmark(result: dict[str, Any] | None) -> dict[str, Any] | None:
    benchmarks = (result or {}).get("benchmarks") or []
    return benchmarks[0] if benchmarks and isinstance(benchmarks[0], dict) else None


def summarize(
    runs: Iterable[tuple[str, str]],
    *,
    endpoint: str,
    model: str,
    simulated: bool,
) -> dict[str, Any]:
    """The report of a bench: runs are (progress JSONL text, result JSON text), one per level."""
    levels, warnings, version = [], [], None
    for progress_text, result_text in runs:
        requests, lines = parse_progress(progress_text)
        warnings.extend(lines)
        try:
            result = json.loads(result_text) if result_text.strip() else None
        except json.JSONDecodeError as exc:
            warnings.append(f"llama-benchy's result is not JSON: {exc}")
            result = None
        version = version or (result or {}).get("version")
        levels.append(level_summary(requests, result))
    levels.sort(key=lambda level: level["concurrency"])
    problems = []
    for level in levels:
        if level["requests"] == 0:
            problems.append(f"concurrency {level['concurrency']}: no request was sent")
        elif level["errors"]:
            problems.append(
                f"concurrency {level['concurrency']}: {level['errors']} of {level['requests']} request(s) failed: "
                + "; ".join(level["error_samples"])
            )
    return {
        "ok": not problems,
        "tool": f"llama-benchy {version}" if version else "llama-benchy",
        "endpoint": endpoint,
        "model": model,
        "simulated": simulated,
        "source": (
            "the lab's vLLM stand-in (lab/vllm/vllm): simulated figures, not a GPU's"
            if simulated
            else "the deployed vLLM"
        ),
        "levels": levels,
        "problems": problems,
        "warnings": warnings,
    }


def _cell(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown table, with where its figures come from."""
    lines = [
        f"# Bench: {report['model']} at {report['endpoint']}",
        "",
        f"Figures of {report['source']}; measured with {report['tool']}.",
        "",
        "| Concurrency | Requests | Errors | Output tok/s | Total tok/s | TTFT p50 ms | TTFT p95 ms "
        "| ITL p50 ms | ITL p95 ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for level in report["levels"]:
        cells = [
            level["concurrency"],
            level["requests"],
            level["errors"],
            level["output_tokens_per_s"],
            level["total_tokens_per_s"],
            level["ttft_ms"]["p50"],
            level["ttft_ms"]["p95"],
            level["itl_ms"]["p50"],
            level["itl_ms"]["p95"],
        ]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    if report["levels"]:
        first = report["levels"][0]
        lines += [
            "",
            f"Prompt {first['prompt_tokens_asked']} tokens, output {first['output_tokens_asked']} tokens per request.",
        ]
    for problem in report["problems"]:
        lines.append(f"- Problem: {problem}")
    return "\n".join(lines) + "\n"


def render_chart(report: dict[str, Any], path: str) -> None:
    """A PNG: throughput against concurrency (left), latency percentiles against concurrency (right)."""
    import matplotlib  # noqa: PLC0415 (only the bench needs it)

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: PLC0415

    levels = report["levels"]
    xs = [level["concurrency"] for level in levels]
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(11, 4.5), constrained_layout=True)
    for key, label in (("output_tokens_per_s", "output"), ("total_tokens_per_s", "total (prompt + output)")):
        left.plot(
            xs, [level[key] if level[key] is not None else math.nan for level in levels], "o-", label=label
        )
    left.set(title="Throughput", xlabel="concurrent requests", ylabel="tokens per second", xticks=xs)
    left.set_ylim(bottom=0)
    left.grid(alpha=0.3)
    left.legend()
    for key, name in (("ttft_ms", "TTFT"), ("itl_ms", "ITL")):
        for q, style in (("p50", "o-"), ("p95", "s--")):
            values = [level[key][q] if level[key][q] is not None else math.nan for level in levels]
            right.plot(xs, values, style, label=f"{name} {q}")
    right.set(title="Latency", xlabel="concurrent requests", ylabel="milliseconds (log scale)", xticks=xs)
    right.set_yscale("log")
    right.grid(alpha=0.3, which="both")
    right.legend()
    title = f"{report['model']}: {report['tool']}"
    if report["simulated"]:
        title += "\nlab stand-in figures (lab/vllm/vllm), not a GPU's"
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
