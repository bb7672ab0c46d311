"""The lab's stand-in ``vllm`` (lab/vllm/vllm), run as a subprocess without Ray.

The stand-in never imports the product's planner; these tests check it against its own
documented simulation (lab/vllm/README.md, "Memory model") and against the product's
log readers: ``parse_memory_lines`` must read its memory lines and ``diagnose`` must
name the root cause of its failures. Every server binds 127.0.0.1 on a free port, and
every wait is bounded.
"""

from __future__ import annotations

import http.client
import importlib.machinery
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _correctness as probe
from ansible_collections.sparkops.vllm.plugins.module_utils._diagnose import diagnose_text
from ansible_collections.sparkops.vllm.plugins.module_utils._vllm_memory_log import parse_memory_lines

ROOT = Path(__file__).resolve().parents[3]
STANDIN = ROOT / "lab" / "vllm" / "vllm"
GIB = 1 << 30
START_TIMEOUT = 30
STOP_TIMEOUT = 15

# A small model: 4 layers, 2 KV heads of 64, bf16 -> 4 x 2 x 2 x 64 x 2 = 2048 bytes/token.
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_size": 256,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 4096,
}
BYTES_PER_TOKEN = 4 * 2 * 2 * 64 * 2
WEIGHTS = 3 * GIB
TOTAL_KIB = 64 * 1024 * 1024  # 64 GiB


def write_meminfo(path: Path, total_kib: int, free_kib: int, available_kib: int | None = None) -> Path:
    """A meminfo; MemAvailable is MemFree plus the 21 MiB of buffers and cache unless given."""
    path.write_text(
        f"MemTotal:       {total_kib} kB\n"
        f"MemFree:        {free_kib} kB\n"
        f"MemAvailable:   {free_kib + 21504 if available_kib is None else available_kib} kB\n"
        "Buffers:            1024 kB\n"
        "Cached:            20480 kB\n"
    )
    return path


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CONFIG))
    with (model / "model.safetensors").open("wb") as handle:
        handle.truncate(WEIGHTS)  # sparse: the size counts, no disk is used
    (model / "training_args.bin").write_bytes(b"x" * 4096)  # never counted as weights
    return model


@pytest.fixture
def env(tmp_path: Path) -> dict:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "VLLM_API_KEY",
            "VLLM_HOST_IP",
            "NCCL_SOCKET_IFNAME",
            "GLOO_SOCKET_IFNAME",
            "HF_HOME",
            "HF_HUB_CACHE",
            "SPARKOPS_LAB_VLLM_VERSION",
            "SPARKOPS_LAB_VLLM_TOKEN_S",
            "SPARKOPS_LAB_VLLM_FREEZE_MAX_S",
            "SPARKOPS_LAB_VLLM_FAIL_HEALTH",
            "SPARKOPS_LAB_VLLM_GARBLE_CONCURRENCY",
        )
    }
    clean["SPARKOPS_LAB_MEMINFO"] = str(
        write_meminfo(tmp_path / "meminfo", TOTAL_KIB, TOTAL_KIB - 1024 * 1024)
    )
    clean["PYTHONUNBUFFERED"] = "1"
    # The ranks' records for the simulated GPU (lab/nvidia-smi) stay in the test's directory.
    clean["SPARKOPS_LAB_GPU_APPS_DIR"] = str(tmp_path / "gpu-apps")
    # The freeze switch stays in the test's directory too (the stand-in removes it at start).
    clean["SPARKOPS_LAB_VLLM_FREEZE_FILE"] = str(tmp_path / "sparkops-lab-vllm-freeze")
    return clean


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(STANDIN), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=False,
    )


def load_standin():
    """The stand-in's functions, loaded from its file (it is a program, not a package)."""
    loader = importlib.machinery.SourceFileLoader("vllm_standin", str(STANDIN))
    spec = importlib.util.spec_from_loader("vllm_standin", loader)
    standin = importlib.util.module_from_spec(spec)
    loader.exec_module(standin)
    return standin


class Server:
    """A running ``vllm serve``: its output lines, its port, and a clean stop."""

    def __init__(self, model: Path, env: dict, *extra: str) -> None:
        self.port = free_port()
        self.lines: list[str] = []
        self.started = threading.Event()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(STANDIN),
                "serve",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--distributed-executor-backend",
                "uni",
                *extra,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if not self.started.wait(START_TIMEOUT) or "Application startup complete." not in self.output:
            self.stop(signal.SIGKILL)
            raise AssertionError("the stand-in did not start:\n" + self.output)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if "Application startup complete." in line:
                self.started.set()
        self.started.set()  # ended: the waiter sees the output

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def request(self, method: str, path: str, body: dict | None = None, key: str | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        response = conn.getresponse()
        raw = response.read()
        conn.close()
        return response.status, (json.loads(raw) if raw else None)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)
            raise
        self.reader.join(STOP_TIMEOUT)
        return code


@pytest.fixture
def serve(model_dir: Path, env: dict):
    servers: list[Server] = []

    def start(*extra: str, model: Path | None = None, environ: dict | None = None) -> Server:
        server = Server(model or model_dir, environ or env, *extra)
        servers.append(server)
        return server

    yield start
    for server in servers:
        if server.proc.poll() is None:
            server.stop(signal.SIGKILL)


def expected(total: int, util: float = 0.9, max_model_len: int = 4096, world: int = 1) -> dict:
    """The simulation as lab/vllm/README.md documents it, for one rank."""
    claim = util * total
    weights = WEIGHTS / world
    activation = (0.5 + 1.5 * min(max_model_len, 8192) / 8192) * GIB
    non_torch = (0.25 + (2.75 if world > 1 else 0)) * GIB
    kv = claim - weights - activation - non_torch
    tokens = int(kv // (16 * BYTES_PER_TOKEN)) * 16
    return {"claim": claim, "weights": weights, "activation": activation, "non_torch": non_torch, "kv": kv,
            "tokens": tokens}  # fmt: skip


# --- the command line ---------------------------------------------------------------------


def test_version_from_env(env):
    assert run(["--version"], env).stdout.strip() == "0.17.1+sparkops.lab"
    result = run(["--version"], env | {"SPARKOPS_LAB_VLLM_VERSION": "0.18.0"})
    assert result.returncode == 0
    assert result.stdout.strip() == "0.18.0+sparkops.lab"


def test_unknown_flag_is_rejected_like_vllm(model_dir, env):
    result = run(["serve", str(model_dir), "--no-such-flag", "3"], env)
    assert result.returncode == 2
    assert "vllm: error: unrecognized arguments: --no-such-flag 3" in result.stderr
    assert result.stdout == ""


def test_bad_choice_and_abbreviation_are_rejected(model_dir, env):
    bad_backend = run(["serve", str(model_dir), "--distributed-executor-backend", "slurm"], env)
    assert bad_backend.returncode == 2
    assert "invalid choice: 'slurm'" in bad_backend.stderr
    abbreviated = run(["serve", str(model_dir), "--max-model", "1024"], env)
    assert abbreviated.returncode == 2
    assert "unrecognized arguments: --max-model" in abbreviated.stderr


# --- startup failures, read by the product's diagnose -------------------------------------------


def test_startup_memory_short_message_and_diagnosis(model_dir, env, tmp_path):
    free_kib = 20 * 1024 * 1024  # 20 GiB available of 64: below 0.9 x 64
    env["SPARKOPS_LAB_MEMINFO"] = str(write_meminfo(tmp_path / "short", TOTAL_KIB, free_kib, free_kib))
    result = run(["serve", str(model_dir), "--distributed-executor-backend", "uni"], env)
    assert result.returncode == 1
    total = TOTAL_KIB * 1024
    message = (
        f"ValueError: Free memory on device ({round(free_kib * 1024 / GIB, 2)}/{round(total / GIB, 2)} GiB) "
        f"on startup is less than desired GPU memory utilization (0.9, {round(0.9 * total / GIB, 2)} GiB). "
        "Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )
    assert message in result.stdout
    assert (
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
        in (result.stdout)
    )
    assert "Application startup complete." not in result.stdout
    findings = diagnose_text(result.stdout)["findings"]
    ids = [f["id"] for f in findings]
    assert ids[0] == "startup_memory_short"
    assert "engine_core_init_failed" not in ids  # the wrapper is explained by the root cause


# Page cache: MemFree is 32 of 64 GiB, MemAvailable 60 GiB. vLLM's
# MemorySnapshot reads MemAvailable on an integrated GPU from about 0.12 (lab/vllm/README.md);
# before, CUDA's MemFree decided and the claim of 0.9 x 64 GiB did not fit.
PAGE_CACHE_CASES = [
    ("0.17.1", 0, "60.0/64.0 GiB"),
    ("0.12.0", 0, "60.0/64.0 GiB"),
    ("0.24.0", 0, "60.0/64.0 GiB"),
    ("0.11.0", 1, "32.0/64.0 GiB"),
    ("0.10.1.1", 1, "32.0/64.0 GiB"),
]


@pytest.mark.parametrize("case", PAGE_CACHE_CASES, ids=[c[0] for c in PAGE_CACHE_CASES])
def test_page_cache_counts_as_free_from_vllm_0_12(model_dir, env, tmp_path, case):
    version, returncode, free = case
    path = write_meminfo(tmp_path / "cached", TOTAL_KIB, TOTAL_KIB // 2, 60 * 1024 * 1024)
    env["SPARKOPS_LAB_MEMINFO"] = str(path)
    env["SPARKOPS_LAB_VLLM_VERSION"] = version
    if returncode:
        result = run(["serve", str(model_dir), "--distributed-executor-backend", "uni"], env)
        assert result.returncode == 1
        assert f"Free memory on device ({free}) on startup is less than desired" in result.stdout
        return
    server = Server(model_dir, env)
    try:
        assert f"Free memory on device ({free}) on startup." in server.output
    finally:
        server.stop()


def test_startup_free_source_per_version(tmp_path):
    standin = load_standin()
    mem = {"MemTotal": 64 * GIB, "MemFree": 10 * GIB, "MemAvailable": 60 * GIB}
    assert standin.startup_free(mem, "0.17.1+sparkops.lab") == (60 * GIB, "MemAvailable")
    assert standin.startup_free(mem, "0.11.2") == (10 * GIB, "MemFree")
    # An old kernel without MemAvailable: psutil then estimates; the stand-in keeps MemFree.
    assert standin.startup_free({"MemTotal": 64 * GIB, "MemFree": 10 * GIB}, "0.17.1") == (
        10 * GIB,
        "MemFree",
    )


def test_no_memory_for_cache_blocks(model_dir, env):
    # 0.05 x 64 GiB = 3.2 GiB cannot hold 3 GiB of weights + 2 GiB activation + 0.25 non-torch.
    result = run(["serve", str(model_dir), "--gpu-memory-utilization", "0.05"], env)
    assert result.returncode == 1
    assert (
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        in (result.stdout)
    )
    kv = expected(TOTAL_KIB * 1024, util=0.05)["kv"]
    assert f"Available KV cache memory: {kv / GIB:.2f} GiB" in result.stdout
    ids = [f["id"] for f in diagnose_text(result.stdout)["findings"]]
    assert ids[0] == "kv_cache_insufficient"


def test_kv_cache_too_small_for_max_model_len(model_dir, env, tmp_path):
    # --kv-cache-memory-bytes of 4 MiB holds 2048 tokens at 2048 bytes/token; 4096 are needed.
    result = run(
        ["serve", str(model_dir), "--kv-cache-memory-bytes", str(4 << 20), "--max-model-len", "4096"], env
    )
    assert result.returncode == 1
    assert (
        "To serve at least one request with the models's max seq len (4096), (0.01 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (0.00 GiB). Based on the available memory, the "
        "estimated maximum model length is 2048."
    ) in result.stdout
    ids = [f["id"] for f in diagnose_text(result.stdout)["findings"]]
    assert ids[0] == "kv_cache_insufficient"


def test_tp_beyond_local_gpus_without_ray(model_dir, env):
    result = run(["serve", str(model_dir), "-tp", "2", "--distributed-executor-backend", "mp"], env)
    assert result.returncode == 1
    assert "Tensor parallel size (2) cannot be larger than the number of available GPUs (1)." in result.stdout
    ids = [f["id"] for f in diagnose_text(result.stdout)["findings"]]
    assert "ray_placement_unsatisfiable" in ids


def test_gloo_interface_that_does_not_exist(model_dir, env):
    env["GLOO_SOCKET_IFNAME"] = "nosuchif9"
    result = run(["serve", str(model_dir)], env)
    assert result.returncode == 1
    assert "Unable to find address for: nosuchif9" in result.stdout
    assert "GLOO_SOCKET_IFNAME=nosuchif9" in result.stdout  # the environment line logs it
    ids = [f["id"] for f in diagnose_text(result.stdout)["findings"]]
    assert ids[0] == "gloo_interface"


def test_missing_model_is_an_error(env, tmp_path):
    result = run(["serve", "nobody/no-such-model", "--download-dir", str(tmp_path)], env)
    assert result.returncode == 1
    assert "couldn't find them in the cached files" in result.stdout


# --- a successful start -------------------------------------------------------------------------


def test_memory_lines_parse_with_the_product_parser(serve, env):
    server = serve("--max-model-len", "4096", "--max_num_seqs", "64")  # underscores accepted, as vLLM does
    parsed = parse_memory_lines(server.output)
    total = TOTAL_KIB * 1024
    want = expected(total)
    assert parsed["weights_gib"] == pytest.approx(WEIGHTS / GIB, abs=0.005)
    assert parsed["activation_gib"] == pytest.approx(want["activation"] / GIB, abs=0.005)
    assert parsed["non_torch_gib"] == pytest.approx(want["non_torch"] / GIB, abs=0.005)
    assert parsed["kv_cache_gib"] == pytest.approx(want["kv"] / GIB, abs=0.005)
    assert parsed["kv_cache_tokens"] == want["tokens"]
    assert parsed["memory_total_gib"] == pytest.approx(total / GIB, abs=0.005)
    assert parsed["gpu_memory_utilization"] == 0.9
    # 64 sequences -> capture sizes 1, 2, 4, 8, 16, ..., 128 (19 sizes), 3.45/67 GiB each.
    assert parsed["cuda_graph_gib"] == pytest.approx(19 * 3.45 / 67, abs=0.005)
    concurrency = want["tokens"] / 4096
    assert f"Maximum concurrency for 4,096 tokens per request: {concurrency:.2f}x" in server.output
    # The KV figure closes the claim: claim - weights - activation - non-torch.
    closes = 0.9 * total / GIB - parsed["weights_gib"] - parsed["activation_gib"] - parsed["non_torch_gib"]
    assert parsed["kv_cache_gib"] == pytest.approx(closes, abs=0.02)
    errors = [f for f in diagnose_text(server.output)["findings"] if f["severity"] == "error"]
    assert errors == []
    assert server.stop() == 0


def test_enforce_eager_captures_no_graphs(serve):
    server = serve("--enforce-eager")
    parsed = parse_memory_lines(server.output)
    assert parsed.get("cuda_graph_gib", 0.0) == 0.0  # "... and 0.0 GiB for CUDAGraph memory"
    assert "Graph capturing finished" not in server.output
    assert server.stop() == 0


def test_kv_cache_memory_bytes_sets_the_cache(serve):
    server = serve("--kv-cache-memory-bytes", "2G")  # vLLM's human-readable ints: G = 2**30
    parsed = parse_memory_lines(server.output)
    assert parsed["kv_cache_gib"] == pytest.approx(2.0, abs=0.005)
    assert parsed["kv_cache_tokens"] == (2 * GIB // (16 * BYTES_PER_TOKEN)) * 16
    assert server.stop() == 0


def test_hugging_face_cache_links_are_followed(env, tmp_path):
    hub = tmp_path / "hf" / "hub" / "models--org--tiny"
    blob = hub / "blobs" / "0123abcd"
    snapshot = hub / "snapshots" / "rev1"
    snapshot.mkdir(parents=True)
    blob.parent.mkdir(parents=True)
    with blob.open("wb") as handle:
        handle.truncate(WEIGHTS)
    (snapshot / "model.safetensors").symlink_to(os.path.relpath(blob, snapshot))
    (snapshot / "config.json").write_text(json.dumps(CONFIG))
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text("rev1")
    server = Server(Path("org/tiny"), env | {"HF_HOME": str(tmp_path / "hf")})
    try:
        assert parse_memory_lines(server.output)["weights_gib"] == pytest.approx(WEIGHTS / GIB, abs=0.005)
    finally:
        assert server.stop() == 0


# --- HTTP -----------------------------------------------------------------------------------------


def test_health_models_and_completions(serve, model_dir):
    server = serve("--served-model-name", "tiny", "tiny-alias", "--max-model-len", "2048")
    assert server.request("GET", "/health")[0] == 200
    status, models = server.request("GET", "/v1/models")
    assert status == 200
    assert [m["id"] for m in models["data"]] == ["tiny", "tiny-alias"]
    assert models["data"][0]["max_model_len"] == 2048
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Say hello to the lab"}],
        "max_tokens": 32,
    }
    status, chat = server.request("POST", "/v1/chat/completions", body)
    assert status == 200
    assert chat["object"] == "chat.completion"
    content = chat["choices"][0]["message"]["content"]
    assert content.strip()
    assert "lab" in content  # derived from the prompt
    assert chat["usage"]["completion_tokens"] > 0
    assert (
        server.request("POST", "/v1/chat/completions", body)[1]["choices"][0]["message"]["content"] == content
    )
    other = body | {"messages": [{"role": "user", "content": "Something else entirely"}]}
    assert (
        server.request("POST", "/v1/chat/completions", other)[1]["choices"][0]["message"]["content"]
        != content
    )
    status, completion = server.request(
        "POST", "/v1/completions", {"model": "tiny-alias", "prompt": "one two"}
    )
    assert status == 200
    assert completion["object"] == "text_completion"
    assert completion["choices"][0]["text"].strip()
    status, error = server.request("POST", "/v1/chat/completions", body | {"model": "gpt-4"})
    assert status == 404
    assert error["error"]["type"] == "NotFoundError"
    status, error = server.request("POST", "/v1/chat/completions", body | {"max_tokens": 4096})
    assert status == 400
    assert "maximum context length is 2048 tokens" in error["error"]["message"]
    assert server.stop() == 0


def test_api_key_is_enforced_and_never_logged(serve):
    key = "sk-lab-secret-7f3a"
    server = serve("--api-key", key)
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert server.request("GET", "/health")[0] == 200  # /health stays open, as in vLLM
    assert server.request("GET", "/v1/models") == (401, {"error": "Unauthorized"})
    assert server.request("POST", "/v1/chat/completions", body, key="wrong")[0] == 401
    assert server.request("GET", "/v1/models", key=key)[0] == 200
    assert server.request("POST", "/v1/chat/completions", body, key=key)[0] == 200
    assert server.stop() == 0
    assert key not in server.output


def test_api_key_from_environment(serve, env):
    server = serve(environ=env | {"VLLM_API_KEY": "from-env"})
    assert server.request("GET", "/v1/models")[0] == 401
    assert server.request("GET", "/v1/models", key="from-env")[0] == 200
    assert server.stop() == 0
    assert "from-env" not in server.output


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(serve, sig):
    server = serve("--model", "ignored-when-positional-given")  # vLLM: the positional model wins
    assert server.request("GET", "/health")[0] == 200
    started = time.monotonic()
    assert server.stop(sig) == 0
    assert time.monotonic() - started < STOP_TIMEOUT
    assert "Application shutdown complete." in server.output
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()


def test_model_flag_style(env, model_dir):
    port = free_port()
    args = ["serve", "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen([sys.executable, str(STANDIN), *args], env=env, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        for line in proc.stdout:
            if "Application startup complete." in line or time.monotonic() > deadline:
                break
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/v1/models")
        models = json.loads(conn.getresponse().read())
        conn.close()
        assert models["data"][0]["id"] == str(model_dir)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(STOP_TIMEOUT) == 0
        proc.stdout.close()


def test_kv_bytes_per_token_from_config_and_fp8(serve):
    """The documented formula: layers x 2 x KV heads x head_dim x element size; fp8 is 1 byte."""
    server = serve("--kv-cache-dtype", "fp8")
    fp8 = BYTES_PER_TOKEN // 2
    assert f"KV cache: {fp8:,} bytes per token per rank (config.json)" in server.output
    kv = expected(TOTAL_KIB * 1024)["kv"]
    assert parse_memory_lines(server.output)["kv_cache_tokens"] == int(kv // (16 * fp8)) * 16
    assert server.stop() == 0


def test_seed_calibration_reproduces_the_logged_kv_cache(tmp_path):
    """The seeds (GB10, TP=2, 0.90, 119 GB, vLLM 0.17) logged 49.12 GiB of KV cache per rank.

    One total per node: MemTotal 119.70 GiB as Ray printed it on the seeds' head. The
    stand-in's reserves (2.0 + 3.0 GiB) are the plan's defaults, on the safe side of the
    3.20 GiB the seed implies, so its KV cache is 47.32 GiB: within 10 % of the log.

    A TP=2 start needs Ray, so this one rank's accounting runs in-process, loaded from the
    stand-in's file (it is a program, not a package).
    """
    standin = load_standin()
    model = tmp_path / "seed"
    model.mkdir()
    with (model / "model-00001-of-00039.safetensors").open("wb") as handle:
        handle.truncate(119_000_000_000)
    meminfo = tmp_path / "gb10"
    meminfo.write_text(f"MemTotal: {int(119.70 * 2**20)} kB\nMemFree: {119 * 2**20} kB\n")
    rank = standin.rank_memory(
        {
            "model": str(model),
            "model_dir": str(model),
            "meminfo": str(meminfo),
            "gpu_memory_utilization": 0.9,
            "kv_cache_memory_bytes": None,
            "world_size": 2,
            "max_model_len": 32768,
            "max_num_batched_tokens": 8192,
            "capture_sizes": [],
            "load_format": "auto",
        }
    )
    assert "error" not in rank
    assert round(rank["requested"] / GIB, 2) == 107.73
    assert round(rank["weights"] / GIB, 2) == 55.41
    assert round(rank["kv"] / GIB, 2) == 47.32
    assert abs(rank["kv"] / GIB - 49.12) / 49.12 < 0.10


# --- vLLM's copy of the driver's environment to its Ray workers (ray_env.py) -------------

HEAD_ENV = {
    "NCCL_SOCKET_IFNAME": "enp1s0f1np1",
    "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
    "GLOO_SOCKET_IFNAME": "enp1s0f1np1",
    "VLLM_HOST_IP": "192.168.200.11",
    "VLLM_API_KEY": "secret",
    "VLLM_CONFIG_ROOT": "/opt/sparkops/vllm-config",
    "HF_TOKEN": "hf-secret",
    "UCX_TLS": "rc",
    "PATH": "/usr/bin",
}


@pytest.mark.parametrize(
    ("version", "excluded", "copied"),
    [
        # 0.17.1: every VLLM_/NCCL_/UCX_/HF_ variable but the worker-specific ones.
        (
            "0.17.1",
            set(),
            ["HF_TOKEN", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "UCX_TLS", "VLLM_API_KEY", "VLLM_CONFIG_ROOT"],
        ),
        # The names the serve stage lists in ray_non_carry_over_env_vars.json stay each node's.
        (
            "0.17.1",
            {
                "NCCL_SOCKET_IFNAME",
                "NCCL_IB_HCA",
                "GLOO_SOCKET_IFNAME",
                "VLLM_HOST_IP",
                "VLLM_API_KEY",
                "HF_TOKEN",
                "VLLM_CONFIG_ROOT",
            },
            ["UCX_TLS"],
        ),
        # 0.16.0 copied vLLM's own variables only: NCCL_* stayed each node's.
        ("0.16.0", set(), ["VLLM_API_KEY", "VLLM_CONFIG_ROOT"]),
        # The V2 executor (0.22.1+): everything but the worker-specific names and the file's.
        (
            "0.34.0",
            {"HF_TOKEN", "VLLM_API_KEY"},
            [
                "GLOO_SOCKET_IFNAME",
                "NCCL_IB_HCA",
                "NCCL_SOCKET_IFNAME",
                "PATH",
                "UCX_TLS",
                "VLLM_CONFIG_ROOT",
            ],
        ),
    ],
)
def test_the_driver_env_copied_to_workers_follows_vllm(version, excluded, copied):
    standin = load_standin()
    assert list(standin.env_vars_to_copy(HEAD_ENV, version, excluded)) == copied


def test_the_non_carry_over_file_is_read_from_vllm_config_root(tmp_path):
    standin = load_standin()
    (tmp_path / "ray_non_carry_over_env_vars.json").write_text('["NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"]\n')
    names, path, problem = standin.non_carry_over({"VLLM_CONFIG_ROOT": str(tmp_path)})
    assert names == {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"}
    assert path == str(tmp_path / "ray_non_carry_over_env_vars.json") and problem is None
    # XDG_CONFIG_HOME/vllm without VLLM_CONFIG_ROOT, as vllm/envs.py; no file: nothing excluded.
    assert standin.vllm_config_root({"XDG_CONFIG_HOME": "/x"}) == "/x/vllm"
    assert standin.non_carry_over({"VLLM_CONFIG_ROOT": str(tmp_path / "none")})[0] == set()
    (tmp_path / "ray_non_carry_over_env_vars.json").write_text("not json")
    names, _, problem = standin.non_carry_over({"VLLM_CONFIG_ROOT": str(tmp_path)})
    assert names == set() and problem.startswith("Failed to parse")


def test_a_worker_overwrites_its_own_value_with_vllms_warning(monkeypatch):
    standin = load_standin()
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "enp1s0f0np0")
    warnings = standin.overwrite_environment({"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "UCX_TLS": "rc"})
    assert warnings == [
        "Overwriting environment variable NCCL_SOCKET_IFNAME from 'enp1s0f0np0' to 'enp1s0f1np1'"
    ]
    assert os.environ["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1"
    # The V2 executor's setdefault: the worker's own value stays, and nothing is logged.
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "enp1s0f0np0")
    assert standin.overwrite_environment({"NCCL_SOCKET_IFNAME": "enp1s0f1np1"}, overwrite=False) == []
    assert os.environ["NCCL_SOCKET_IFNAME"] == "enp1s0f0np0"


# --- the bad-image switches: a release that never becomes healthy, one that garbles under load ----


# Long enough (17 tokens at 20 ms) that six requests sent at once overlap.
PROBE_PROMPT = "List the first five prime numbers and the first five square numbers, separated by commas."


def chat(server: Server, prompt: str, max_tokens: int = 8) -> tuple[int, dict]:
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 1,
    }
    return server.request("POST", "/v1/chat/completions", body)


def test_fail_health_switch_answers_503_after_startup(serve, env):
    server = serve(environ={**env, "SPARKOPS_LAB_VLLM_FAIL_HEALTH": "1"})
    assert server.request("GET", "/health")[0] == 503
    # The rest of the API still answers: only the health check is broken, as in a bad image.
    assert server.request("GET", "/v1/models")[0] == 200
    assert server.stop() == 0


def test_health_answers_200_without_the_switch(serve, env):
    server = serve(environ={**env, "SPARKOPS_LAB_VLLM_FAIL_HEALTH": ""})
    assert server.request("GET", "/health")[0] == 200
    assert server.stop() == 0


def test_a_bad_switch_value_stops_the_stand_in(model_dir, env):
    result = run(
        ["serve", str(model_dir), "--distributed-executor-backend", "uni"],
        {**env, "SPARKOPS_LAB_VLLM_GARBLE_CONCURRENCY": "many"},
    )
    assert result.returncode != 0
    assert "SPARKOPS_LAB_VLLM_GARBLE_CONCURRENCY='many'" in result.stderr


def concurrent_answers(server: Server, count: int, prompt: str) -> list[tuple[str, int]]:
    answers: list[tuple[str, int]] = [("", 0)] * count

    def one(index: int) -> None:
        status, body = chat(server, prompt, max_tokens=16)
        assert status == 200
        answers[index] = (body["choices"][0]["message"]["content"], body["usage"]["completion_tokens"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return answers


def test_answers_are_deterministic_without_the_garble_switch(serve, env):
    """Temperature 0 and a fixed seed: the same prompt gives the same text, alone or batched."""
    server = serve(environ={**env, "SPARKOPS_LAB_VLLM_TOKEN_S": "0.02"})
    alone = chat(server, PROBE_PROMPT, 16)[1]["choices"][0]["message"]["content"]
    batched = concurrent_answers(server, 6, PROBE_PROMPT)
    assert {text for text, _ in batched} == {alone}
    assert server.stop() == 0


def test_garble_switch_changes_answers_at_its_concurrency(serve, env):
    server = serve(
        environ={**env, "SPARKOPS_LAB_VLLM_TOKEN_S": "0.02", "SPARKOPS_LAB_VLLM_GARBLE_CONCURRENCY": "3"}
    )
    alone = chat(server, PROBE_PROMPT, 16)[1]["choices"][0]["message"]
    batched = concurrent_answers(server, 6, PROBE_PROMPT)
    texts = [text for text, _ in batched]
    # Below the threshold the answer is the normal one; at it, every request has its own.
    assert alone["content"].startswith("[lab-") and "garbled" not in alone["content"]
    assert len(set(texts)) == len(texts)
    assert all("garbled-" in text for text in texts)
    # The token count is unchanged: only a comparison of the texts catches it.
    assert {tokens for _, tokens in batched} == {len(alone["content"].split(" "))}
    assert server.stop() == 0


def test_stream_sends_one_chunk_per_token_as_produced(serve):
    """A load generator measures time to first token and inter-token latency from these chunks."""
    server = serve()
    body = {"messages": [{"role": "user", "content": PROBE_PROMPT}], "max_tokens": 6}
    whole = server.request("POST", "/v1/chat/completions", body)[1]
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    stream = body | {"stream": True, "stream_options": {"include_usage": True}}
    conn.request(
        "POST", "/v1/chat/completions", body=json.dumps(stream), headers={"Content-Type": "application/json"}
    )
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("content-type").startswith("text/event-stream")
    events = [line[6:] for line in response.read().decode().splitlines() if line.startswith("data: ")]
    conn.close()
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    pieces = [c["choices"][0]["delta"]["content"] for c in chunks[1:-2]]
    assert len(pieces) == whole["usage"]["completion_tokens"] == 6
    assert "".join(pieces) == whole["choices"][0]["message"]["content"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    assert server.stop() == 0


def test_correctness_probe_against_the_stand_in(serve, env):
    """The probe's own HTTP code and verdict: the normal stand-in passes, the garbling one fails."""
    prompts = [PROBE_PROMPT, "Say hello in three languages."]
    request = probe.probe_request(prompts, seed=7, max_tokens=16)

    def probe_once(server: Server, reference: dict) -> dict:
        url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
        results = [
            probe.send_identical(
                url, probe.chat_body("", p, seed=7, max_tokens=16), count=6, timeout=30, api_key="k"
            )
            for p in prompts
        ]
        return probe.judge(prompts, results, key="sha256:k", reference=reference, min_tokens=1, max_tokens=16)

    good = serve("--api-key", "k", environ={**env, "SPARKOPS_LAB_VLLM_TOKEN_S": "0.02"})
    first = probe_once(good, {})
    assert first["ok"] and first["record_reference"], first["problems"]
    reference = probe.reference_section(first, {}, request) | {"deployment_key": "sha256:k"}
    again = probe_once(good, reference)
    assert again["ok"] and again["compared_with_reference"] and not again["record_reference"]
    assert good.stop() == 0

    bad = serve(
        "--api-key",
        "k",
        environ={**env, "SPARKOPS_LAB_VLLM_TOKEN_S": "0.02", "SPARKOPS_LAB_VLLM_GARBLE_CONCURRENCY": "4"},
    )
    garbled = probe_once(bad, reference)
    assert not garbled["ok"] and not garbled["record_reference"]
    assert "6 different answers to 6 identical requests sent at once" in garbled["problems"][0]
    assert bad.stop() == 0


def test_listen_backlog_is_uvicorns():
    """A burst of simultaneous connections is accepted at once, as by uvicorn (--backlog 2048)."""
    standin = load_standin()
    assert standin.APIServer.request_queue_size == 2048
    assert issubclass(standin.APIServer, standin.ThreadingHTTPServer)
