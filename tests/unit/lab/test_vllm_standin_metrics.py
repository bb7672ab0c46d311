"""The stand-in vLLM's /metrics, its freeze switch and its activity on the simulated GPU.

/metrics carries vLLM's own series for the version the stand-in stands in for (names,
types, HELP, labels and buckets from vllm/v1/metrics/loggers.py; lab/vllm/README.md,
"Metrics"), driven by the requests it really serves. The freeze switch reproduces an
engine that is wedged while /health answers 200 (eugr/spark-vllm-docker#260). The
stand-in runs without Ray (``uni``), as in test_vllm_standin.py, and every wait is bounded.
"""
# The stand-in's fixtures (env, model_dir, serve) come from test_vllm_standin; a test
# naming one as its argument is not a redefinition.
# ruff: noqa: F811

from __future__ import annotations

import http.client
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_vllm_standin import ROOT, env, load_standin, model_dir, serve  # noqa: F401 - fixtures

SIMULATOR = ROOT / "lab" / "nvidia-smi"
WAIT_S = 15  # the bound on every wait below; none of them is a timing assertion
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text: str) -> dict:
    """{"types": {family: type}, "helps": {family: text}, "samples": {(name, labels): value}}."""
    types, helps, samples = {}, {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line[7:].split(" ", 1)
            types[name] = kind
        elif line.startswith("# HELP "):
            name, text_ = line[7:].split(" ", 1)
            helps[name] = text_
        elif line:
            match = SAMPLE.match(line)
            assert match, line
            labels = tuple(sorted(LABEL.findall(match.group(2) or "")))
            samples[(match.group(1), labels)] = float(match.group(3))
    return {"types": types, "helps": helps, "samples": samples}


def scrape(server, path: str = "/metrics") -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read().decode("utf-8")
    conn.close()
    return response.status, response.getheader("content-type"), body


def metrics(server) -> dict:
    status, _ctype, body = scrape(server)
    assert status == 200
    return parse_exposition(body)


def value(parsed: dict, name: str, **labels: str) -> float:
    key = (name, tuple(sorted({"model_name": "tiny", "engine": "0", **labels}.items())))
    return parsed["samples"][key]


def wait_for(predicate, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"not within {WAIT_S} s: {what}")


def chat(server, content: str, max_tokens: int = 16, key: str | None = None):
    body = {"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
    return server.request("POST", "/v1/chat/completions", body, key=key)


def record_of(env: dict, server) -> dict:
    return json.loads((Path(env["SPARKOPS_LAB_GPU_APPS_DIR"]) / f"{server.proc.pid}.json").read_text())


def smi_power_utilization(env: dict, tmp_path: Path) -> tuple[float, int]:
    out = subprocess.run(
        [
            sys.executable,
            str(SIMULATOR),
            "--query-gpu=power.draw,utilization.gpu",
            "--format=csv,noheader,nounits",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=dict(env, SPARKOPS_LAB_GPU_STATE=str(tmp_path / "no-state.json")),
    ).stdout
    power, utilization = out.strip().split(", ")
    return float(power), int(utilization)


# --- the exposition -------------------------------------------------------------------------


def test_the_exposition_is_prometheus_text_that_promtool_reads(serve):
    # scripts/setup installs Debian's prometheus, which ships promtool: missing, this fails.
    assert shutil.which("promtool"), "promtool is not installed: run scripts/setup"
    server = serve("--served-model-name", "tiny")
    assert chat(server, "Scrape me after this one")[0] == 200
    status, ctype, body = scrape(server)
    assert status == 200
    assert ctype == "text/plain; version=0.0.4; charset=utf-8"
    done = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, text=True, check=False
    )
    # 0: clean; 3: lint findings only. vLLM's names hold colons, which promtool's linter
    # reserves for recording rules: real vLLM pages draw the same finding. 1 would be a
    # parse error.
    problems = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode in (0, 3), done.stdout + done.stderr
    assert all(line.endswith("metric names should not contain ':'") for line in problems), problems
    assert server.stop() == 0


def test_vllm_0_17_series_names_types_and_labels(serve):
    server = serve("--served-model-name", "tiny", "other-name")
    parsed = metrics(server)
    assert parsed["types"] == {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:engine_sleep_state": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:num_preemptions_total": "counter",
        "vllm:num_preemptions_created": "gauge",
        "vllm:prompt_tokens_total": "counter",
        "vllm:prompt_tokens_created": "gauge",
        "vllm:generation_tokens_total": "counter",
        "vllm:generation_tokens_created": "gauge",
        "vllm:request_success_total": "counter",
        "vllm:request_success_created": "gauge",
        **{
            name: kind
            for family in (
                "request_prompt_tokens",
                "request_generation_tokens",
                "time_to_first_token_seconds",
                "inter_token_latency_seconds",
                "request_time_per_output_token_seconds",
                "e2e_request_latency_seconds",
                "request_queue_time_seconds",
                "request_inference_time_seconds",
                "request_prefill_time_seconds",
                "request_decode_time_seconds",
            )
            for name, kind in ((f"vllm:{family}", "histogram"), (f"vllm:{family}_created", "gauge"))
        },
    }
    assert parsed["helps"]["vllm:kv_cache_usage_perc"] == "KV-cache usage. 1 means 100 percent usage."
    assert parsed["helps"]["vllm:request_success_total"] == "Count of successfully processed requests."
    # model_name is the first served name (vLLM's get_served_model_name), engine the index 0.
    assert {dict(labels)["model_name"] for _name, labels in parsed["samples"]} == {"tiny"}
    assert {dict(labels)["engine"] for _name, labels in parsed["samples"]} == {"0"}
    reasons = [
        dict(labels)["finished_reason"]
        for name, labels in parsed["samples"]
        if name == "vllm:request_success_total"
    ]
    assert sorted(reasons) == sorted(["stop", "length", "abort", "error", "repetition"])
    ttft = sorted(
        float(dict(labels)["le"])
        for name, labels in parsed["samples"]
        if name == "vllm:time_to_first_token_seconds_bucket"
    )
    assert ttft[:3] == [0.001, 0.005, 0.01]
    assert ttft[-2:] == [2560.0, float("inf")]
    tokens = sorted(
        float(dict(labels)["le"])
        for name, labels in parsed["samples"]
        if name == "vllm:request_prompt_tokens_bucket"
    )
    assert tokens == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, float("inf")]  # 1-2-5 up to 4096
    assert value(parsed, "vllm:engine_sleep_state", sleep_state="awake") == 1.0
    assert server.stop() == 0


@pytest.mark.parametrize(
    ("version", "present", "absent", "reasons"),
    [
        (
            "0.10.2",
            {"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"},
            {"vllm:engine_sleep_state", "vllm:request_time_per_output_token_seconds"},
            ("stop", "length", "abort"),
        ),
        (
            "0.11.0",
            {"vllm:time_per_output_token_seconds", "vllm:request_time_per_output_token_seconds"},
            {"vllm:gpu_cache_usage_perc", "vllm:engine_sleep_state"},
            ("stop", "length", "abort"),
        ),
        (
            "0.12.0",
            {"vllm:engine_sleep_state", "vllm:inter_token_latency_seconds"},
            {"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"},
            ("stop", "length", "abort"),
        ),
        (
            "0.17.1",
            {"vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds"},
            {"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds"},
            ("stop", "length", "abort", "error", "repetition"),
        ),
    ],
)
def test_series_follow_the_version(version, present, absent, reasons):
    standin = load_standin()
    names = {family["name"] for family in standin.metric_catalogue(version, 4096)}
    assert present <= names
    assert not absent & names
    assert standin.finish_reasons(version) == reasons


def test_metrics_needs_no_api_key_as_in_vllm(serve):
    server = serve("--served-model-name", "tiny", "--api-key", "sk-lab-metrics")
    assert scrape(server)[0] == 200  # outside /v1: vLLM's AuthenticationMiddleware lets it through
    assert server.request("GET", "/v1/models")[0] == 401
    assert server.stop() == 0


def test_disable_log_stats_leaves_no_vllm_series(serve):
    server = serve("--served-model-name", "tiny", "--disable-log-stats")
    assert chat(server, "counted nowhere")[0] == 200
    status, _ctype, body = scrape(server)
    assert (status, body) == (200, "")
    assert server.stop() == 0


# --- driven by the requests served ----------------------------------------------------------


def test_counters_and_histograms_follow_the_requests_served(serve):
    server = serve("--served-model-name", "tiny")
    before = metrics(server)
    prompts = ["one two three", "a much longer prompt with quite a few more words in it", "x"]
    usages, finishes = [], []
    for index, prompt in enumerate(prompts):
        status, reply = chat(server, prompt, max_tokens=4 + index)
        assert status == 200
        usages.append(reply["usage"])
        finishes.append(reply["choices"][0]["finish_reason"])
    status, reply = server.request("POST", "/v1/completions", {"model": "tiny", "prompt": "seven eight"})
    assert status == 200
    usages.append(reply["usage"])
    finishes.append(reply["choices"][0]["finish_reason"])
    assert (
        server.request("POST", "/v1/completions", {"model": "absent", "prompt": "x"})[0] == 404
    )  # not served
    after = metrics(server)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("vllm:prompt_tokens_total") == sum(u["prompt_tokens"] for u in usages)
    assert delta("vllm:generation_tokens_total") == sum(u["completion_tokens"] for u in usages)
    for reason in ("stop", "length"):
        assert delta("vllm:request_success_total", finished_reason=reason) == finishes.count(reason)
    assert delta("vllm:num_preemptions_total") == 0
    served = len(usages)
    for family in (
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_prompt_tokens",
    ):
        assert delta(f"{family}_count") == served, family
    assert delta("vllm:inter_token_latency_seconds_count") == sum(u["completion_tokens"] - 1 for u in usages)
    assert delta("vllm:request_prompt_tokens_sum") == sum(u["prompt_tokens"] for u in usages)
    assert delta("vllm:request_generation_tokens_sum") == sum(u["completion_tokens"] for u in usages)
    assert delta("vllm:e2e_request_latency_seconds_sum") >= delta("vllm:time_to_first_token_seconds_sum") > 0
    assert value(after, "vllm:num_requests_running") == 0
    assert value(after, "vllm:num_requests_waiting") == 0
    assert value(after, "vllm:kv_cache_usage_perc") == 0
    assert server.stop() == 0


def test_histograms_are_cumulative_and_consistent(serve):
    server = serve("--served-model-name", "tiny")
    for prompt in ("alpha beta", "gamma delta epsilon zeta", "eta"):
        assert chat(server, prompt)[0] == 200
    parsed = metrics(server)
    families = [name for name, kind in parsed["types"].items() if kind == "histogram"]
    assert len(families) == 10
    for family in families:
        buckets = sorted(
            (float(dict(labels)["le"]), count)
            for (name, labels), count in parsed["samples"].items()
            if name == f"{family}_bucket"
        )
        counts = [count for _le, count in buckets]
        assert counts == sorted(counts), family  # cumulative
        assert buckets[-1][0] == float("inf")
        assert buckets[-1][1] == value(parsed, f"{family}_count"), family
        assert value(parsed, f"{family}_sum") >= 0, family
    assert value(parsed, "vllm:e2e_request_latency_seconds_count") == 3
    assert server.stop() == 0


def test_running_kv_usage_and_gpu_activity_while_generating(serve, env, tmp_path):
    # 40 words and 0.1 s per decode step: about four seconds of generation to look at.
    server = serve("--served-model-name", "tiny", environ=env | {"SPARKOPS_LAB_VLLM_TOKEN_S": "0.1"})
    assert smi_power_utilization(env, tmp_path) == (11.0, 0)  # serving, idle
    prompt = " ".join(f"word{i}" for i in range(40))
    replies = []
    worker = threading.Thread(target=lambda: replies.append(chat(server, prompt, max_tokens=64)))
    worker.start()
    wait_for(lambda: value(metrics(server), "vllm:generation_tokens_total") > 0, "the first token")
    parsed = metrics(server)
    assert value(parsed, "vllm:num_requests_running") == 1
    assert value(parsed, "vllm:kv_cache_usage_perc") > 0
    wait_for(lambda: record_of(env, server)["generating"], "the record says generating")
    power, utilization = smi_power_utilization(env, tmp_path)
    assert power > 30 and utilization > 50
    worker.join(WAIT_S)
    assert replies and replies[0][0] == 200
    wait_for(lambda: record_of(env, server)["generating"] is False, "the record says idle")
    assert smi_power_utilization(env, tmp_path) == (11.0, 0)
    assert value(metrics(server), "vllm:kv_cache_usage_perc") == 0
    assert server.stop() == 0


# --- the freeze switch --------------------------------------------------------------------------


def test_a_frozen_engine_holds_tokens_flat_while_health_is_200(serve, env, tmp_path):
    freeze = Path(env["SPARKOPS_LAB_VLLM_FREEZE_FILE"])
    server = serve("--served-model-name", "tiny")
    assert chat(server, "before the freeze")[0] == 200
    freeze.touch()
    wait_for(lambda: "engine frozen by" in server.output, "the freeze is logged")
    tokens = value(metrics(server), "vllm:generation_tokens_total")

    replies = []
    worker = threading.Thread(target=lambda: replies.append(chat(server, "stuck in the wedge")))
    worker.start()
    wait_for(lambda: value(metrics(server), "vllm:num_requests_running") == 1, "the request runs")
    assert server.request("GET", "/health")[0] == 200
    for _ in range(3):  # several scrapes while it runs: nothing is produced
        parsed = metrics(server)
        assert value(parsed, "vllm:generation_tokens_total") == tokens
        assert value(parsed, "vllm:num_requests_running") == 1
        time.sleep(0.1)
    assert record_of(env, server)["generating"] is False
    assert smi_power_utilization(env, tmp_path) == (11.0, 0)  # frozen: idle power, 0 %
    assert worker.is_alive() and not replies

    freeze.unlink()
    worker.join(WAIT_S)
    assert replies and replies[0][0] == 200
    after = metrics(server)
    assert (
        value(after, "vllm:generation_tokens_total") == tokens + replies[0][1]["usage"]["completion_tokens"]
    )
    assert value(after, "vllm:num_requests_running") == 0
    assert "engine unfrozen" in server.output
    assert server.stop() == 0


def test_a_client_leaving_a_frozen_engine_frees_its_slot_uncounted(serve, env):
    freeze = Path(env["SPARKOPS_LAB_VLLM_FREEZE_FILE"])
    server = serve("--served-model-name", "tiny")
    freeze.touch()
    wait_for(lambda: "engine frozen by" in server.output, "the freeze is logged")
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "gone"}]}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: lab\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        wait_for(lambda: value(metrics(server), "vllm:num_requests_running") == 1, "the request runs")
    wait_for(lambda: value(metrics(server), "vllm:num_requests_running") == 0, "the slot is freed")
    parsed = metrics(server)
    assert value(parsed, "vllm:e2e_request_latency_seconds_count") == 0  # an abort is not a finished request
    assert value(parsed, "vllm:generation_tokens_total") == 0
    freeze.unlink()
    assert server.stop() == 0


def test_a_freeze_outlasting_its_bound_drops_the_request(serve, env):
    freeze = Path(env["SPARKOPS_LAB_VLLM_FREEZE_FILE"])
    server = serve("--served-model-name", "tiny", environ=env | {"SPARKOPS_LAB_VLLM_FREEZE_MAX_S": "0.5"})
    freeze.touch()
    wait_for(lambda: "engine frozen by" in server.output, "the freeze is logged")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        chat(server, "waits, then is dropped")
    assert value(metrics(server), "vllm:num_requests_running") == 0
    assert server.request("GET", "/health")[0] == 200
    assert server.stop() == 0


def test_start_removes_a_left_over_freeze_file(serve, env):
    freeze = Path(env["SPARKOPS_LAB_VLLM_FREEZE_FILE"])
    freeze.touch()
    server = serve("--served-model-name", "tiny")
    assert not freeze.exists()
    assert f"removed the freeze file {freeze}" in server.output
    assert chat(server, "a restart clears the wedge")[0] == 200
    assert server.stop() == 0
