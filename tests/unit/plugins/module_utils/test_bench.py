"""The bench's figures from llama-benchy's real output (tests/fixtures/llama_benchy/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._bench import (
    inter_token_gaps,
    markdown,
    parse_progress,
    percentile,
    render_chart,
    summarize,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "llama_benchy"


def run(name: str) -> tuple[str, str]:
    return (FIXTURES / f"{name}.jsonl").read_text(), (FIXTURES / f"{name}.json").read_text()


def standin_report() -> dict:
    return summarize(
        [run("standin_c8"), run("standin_c1"), run("standin_c4")],
        endpoint="http://127.0.0.1:18431",
        model="lab-model",
        simulated=True,
    )


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 50, None),
        ([3.0], 95, 3.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([4.0, 1.0, 3.0, 2.0], 95, 3.85),  # numpy.percentile's default (linear)
        ([1.0, 2.0], 0, 1.0),
    ],
)
def test_percentile(values, q, expected):
    assert (
        percentile(values, q) == pytest.approx(expected)
        if expected is not None
        else percentile(values, q) is None
    )


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([], []),
        ([(1.0, 1)], []),
        ([(1.0, 1), (1.01, 1), (1.03, 1)], [0.01, 0.02]),
        ([(1.0, 1), (1.04, 4)], [0.01]),  # a chunk with four tokens: four gaps of 10 ms
        ([(1.0, 1), (1.04, 0)], []),  # an empty chunk carries no token
    ],
)
def test_inter_token_gaps(chunks, expected):
    assert inter_token_gaps(chunks) == pytest.approx(expected)


# The stand-in's own timing: 10 ms per decode step, so the inter-token latency is ~10 ms at
# every level; the levels come back sorted whatever the order of the runs.
@pytest.mark.parametrize(
    ("concurrency", "requests"),
    [(1, 1), (4, 4), (8, 8)],
)
def test_standin_levels(concurrency, requests):
    level = next(level for level in standin_report()["levels"] if level["concurrency"] == concurrency)
    assert level["requests"] == requests and level["errors"] == 0
    assert level["output_tokens"] == 16 * requests
    assert 8.0 <= level["itl_ms"]["p50"] <= 15.0
    assert level["itl_ms"]["p50"] <= level["itl_ms"]["p95"]
    assert level["ttft_ms"]["p50"] <= level["ttft_ms"]["p95"]
    assert level["ttft_ms"]["samples"] == requests
    assert level["itl_ms"]["samples"] == 15 * requests
    # Total counts the prompt too; ours and llama-benchy's output rates agree within 15 %.
    assert level["total_tokens_per_s"] > level["output_tokens_per_s"] > 0
    assert level["output_tokens_per_s"] == pytest.approx(level["llama_benchy_output_tokens_per_s"], rel=0.15)


def test_standin_report_says_where_its_figures_come_from():
    report = standin_report()
    assert report["ok"] and report["problems"] == [] and report["warnings"] == []
    assert [level["concurrency"] for level in report["levels"]] == [1, 4, 8]
    assert report["tool"] == "llama-benchy 0.4.0"
    assert "not a GPU's" in report["source"]
    table = markdown(report)
    assert "not a GPU's" in table
    assert table.count("\n| ") == 4  # the header and one row per level
    assert "| 8 | 8 | 0 |" in table


def test_refused_requests_are_errors_and_the_report_fails():
    report = summarize([run("standin_too_long_c2")], endpoint="http://x:8000", model="m", simulated=False)
    level = report["levels"][0]
    assert (level["requests"], level["errors"]) == (2, 2)
    assert level["output_tokens_per_s"] is None and level["ttft_ms"]["p50"] is None
    assert "maximum context length is 4096 tokens" in level["error_samples"][0]
    assert not report["ok"]
    assert report["problems"][0].startswith("concurrency 2: 2 of 2 request(s) failed")
    assert report["source"] == "the deployed vLLM"
    assert "- Problem: concurrency 2" in markdown(report)


def test_odd_lines_are_warnings_not_crashes():
    progress = "\n".join(
        [
            "not json",
            json.dumps({"schema": "llama-benchy-progress.v2", "type": "header", "ts": 1}),
            json.dumps({"type": "tokens", "request_id": 9, "ts": 1, "count": 1}),
            json.dumps(
                {"type": "request_start", "request_id": 0, "ts": 1.0, "concurrency": 1, "run_index": 1}
            ),
            json.dumps({"type": "mystery", "ts": 2}),
        ]
    )
    requests, warnings = parse_progress(progress)
    assert len(warnings) == 4
    # A request that never ended is an error, not a success with no figures.
    assert requests[0]["error"].startswith("the request never ended")
    report = summarize([(progress, "{broken")], endpoint="e", model="m", simulated=False)
    assert not report["ok"] and len(report["warnings"]) == 5


def test_no_fixture_holds_an_api_key():
    for path in [*FIXTURES.glob("*.json"), *FIXTURES.glob("*.jsonl")]:
        text = path.read_text()
        assert "lab-secret" not in text and "Bearer" not in text and "api_key" not in text.lower()


def test_chart_is_a_png(tmp_path):
    path = tmp_path / "bench.png"
    render_chart(standin_report(), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
