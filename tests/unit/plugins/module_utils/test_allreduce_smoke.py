"""The all-reduce smoke test's arithmetic, limits and stand-alone use (torch is not needed here).

Its real runs on the lent H200 are fixtures (tests/fixtures/nccl_real/smoke_h200x1_*.json),
checked in test_nccl_transport.py.
"""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _allreduce_smoke

MODULE_UTILS = Path(_allreduce_smoke.__file__).resolve().parent


@pytest.mark.parametrize(("n", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_bus_bandwidth_is_nccl_tests_all_reduce_factor(n, factor):
    # NVIDIA/nccl-tests doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n.
    assert _allreduce_smoke.bus_bandwidth(10.0, n) == pytest.approx(10.0 * factor)


def test_bandwidths_in_gb_per_second():
    # 256 MiB in 2 ms between two ranks.
    result = _allreduce_smoke.bandwidths(256 << 20, 0.002, 2)
    assert result == {"time_us": 2000.0, "algbw_gbps": 134.218, "busbw_gbps": 134.218}


def test_bandwidths_refuse_a_zero_time():
    with pytest.raises(_allreduce_smoke.SmokeError, match="positive"):
        _allreduce_smoke.bandwidths(8, 0.0, 2)


@pytest.mark.parametrize(("n", "k"), [(1, 25), (2, 25), (3, 10), (8, 50)])
def test_expected_value_follows_repeated_in_place_sums(n, k):
    values = [float(rank + 1) for rank in range(n)]
    for _ in range(k):
        total = sum(values)
        values = [total] * n
    assert _allreduce_smoke.expected_value(n, k) == pytest.approx(values[0], rel=1e-12)


def test_check_plan_returns_float64_elements():
    assert _allreduce_smoke.check_plan(64 << 20, 5, 20, 2) == 8 << 20


@pytest.mark.parametrize(
    ("plan", "max_bytes", "message"),
    [
        (((1 << 30) + 8, 5, 20, 2), _allreduce_smoke.MAX_BYTES, "between 1 and"),
        ((1 << 20, 5, 20, 2), 1 << 19, "between 1 and"),
        ((1 << 20, 5, 20, 2), 2 << 30, "hard cap"),
        ((12, 5, 20, 2), _allreduce_smoke.MAX_BYTES, "multiple of 8"),
        ((0, 5, 20, 2), _allreduce_smoke.MAX_BYTES, "between 1 and"),
        ((1 << 20, 5, 0, 2), _allreduce_smoke.MAX_BYTES, "iters >= 1"),
        ((1 << 20, 150, 100, 2), _allreduce_smoke.MAX_BYTES, "warmup \\+ iters <= 200"),
        ((1 << 20, 100, 100, 64), _allreduce_smoke.MAX_BYTES, "overflow"),
    ],
)
def test_check_plan_refuses_with_the_fix(plan, max_bytes, message):
    # plan: size in bytes, warm-up and timed iterations, world size.
    with pytest.raises(_allreduce_smoke.SmokeError, match=message):
        _allreduce_smoke.check_plan(*plan, max_bytes)


def test_the_largest_plan_allowed_stays_finite():
    # Every plan check_plan accepts keeps n**k inside float64.
    for world in (2, 8, 64):
        iters = _allreduce_smoke.MAX_ITERS
        while True:
            try:
                _allreduce_smoke.check_plan(8, 0, iters, world)
                break
            except _allreduce_smoke.SmokeError:
                iters -= 1
        assert math.isfinite(_allreduce_smoke.expected_value(world, iters))


def test_nccl_environment_logs_init_and_net_per_process(tmp_path):
    env = _allreduce_smoke.nccl_environment(str(tmp_path))
    assert env == {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": str(tmp_path / "nccl.%h.%p.log"),
    }


def test_loopback_address():
    assert _allreduce_smoke.interface_address("lo") == "127.0.0.1"
    assert _allreduce_smoke.interface_address("sparkops-absent0") is None


def test_runs_stand_alone_from_its_bundle(tmp_path):
    # The fabric check copies BUNDLE into the image's container and runs the script there,
    # outside the collection: its siblings must be enough.
    for name in _allreduce_smoke.BUNDLE:
        shutil.copy(MODULE_UTILS / name, tmp_path / name)
    script = tmp_path / "_allreduce_smoke.py"
    done = subprocess.run(
        [sys.executable, "-S", str(script), "--backend", "gloo", "--nproc", "2", "--size-bytes", "12"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 2
    assert json.loads(done.stderr) == {"error": "--size-bytes 12 must be a multiple of 8 (float64 elements)"}
    probe = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); import _allreduce_smoke as s; "
            "print(s._nccl_transport.classify_logs({}).get('verdict'))",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "unknown"


def _tcp_rank(rank: int, port: int, tmp_path: Path, bind: str = "127.0.0.1") -> subprocess.Popen:
    env = {
        "PATH": "/usr/bin:/bin",
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    argv = [
        sys.executable,
        str(tmp_path / "_allreduce_smoke.py"),
        "--backend",
        "tcp",
        "--size-bytes",
        "65536",
        "--warmup",
        "1",
        "--iters",
        "3",
        "--bind-address",
        bind,
        "--timeout",
        "20",
    ]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_tcp_backend_all_reduces_between_two_processes_without_torch(tmp_path):
    # The bundle alone, as it is shipped into an image without torch.
    for name in _allreduce_smoke.BUNDLE:
        shutil.copy(MODULE_UTILS / name, tmp_path / name)
    port = _allreduce_smoke._free_port()
    ranks = [_tcp_rank(rank, port, tmp_path) for rank in (0, 1)]
    outs = [proc.communicate(timeout=60) for proc in ranks]
    assert [proc.returncode for proc in ranks] == [0, 0], outs
    report = json.loads(outs[0][0])
    assert outs[1][0] == ""
    assert (report["backend"], report["world_size"], report["correct"]) == ("tcp", 2, True)
    assert report["iters"] == 3 and report["busbw_gbps"] == report["algbw_gbps"] > 0
    # Both ranks' ends of the one connection, each bound to the given address.
    assert sorted(s["rank"] for s in report["sockets"]) == [0, 1]
    assert {s["local"] for s in report["sockets"]} == {"127.0.0.1"}


def test_tcp_backend_refuses_without_rank_environment(tmp_path):
    for name in _allreduce_smoke.BUNDLE:
        shutil.copy(MODULE_UTILS / name, tmp_path / name)
    run = subprocess.run(
        [sys.executable, str(tmp_path / "_allreduce_smoke.py"), "--backend", "tcp"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 2 and "--bind-address" in run.stderr
