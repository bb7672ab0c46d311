# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The plan and its guard as one decision, bad numbers refused by name, reruns on a serving node."""

import dataclasses
import math
import re

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._memory_guard import (
    EARLYOOM_AVOID,
    EARLYOOM_PREFER,
    GuardError,
    earlyoom_args,
    earlyoom_limit,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._memory_plan import (
    MemoryPlanError,
    MemoryPlanInput,
    input_field_names,
    plan_memory,
)
from hypothesis import given, settings
from hypothesis import strategies as st

SEED_TOTAL = 119.70  # MemTotal as Ray printed it on the seeds' GB10 head


def seed(**overrides):
    values = {
        "weights_gib": 119e9 / 2**30,
        "tensor_parallel_size": 2,
        "memory_total_gib": SEED_TOTAL,
        "system_memory_total_gib": SEED_TOTAL,
        "memory_available_gib": 117.7,
        "vllm_version": "0.17.1",
        "gpu_memory_utilization": 0.90,
    }
    values.update(overrides)
    return MemoryPlanInput(**values)


# ------------------------------------------------------------------ earlyoom, one source

# /proc/PID/comm of the processes on a serving GB10 node (15 bytes at most), and the side
# earlyoom's regexes put them on.
COMM_TABLE = [
    ("ray::RayWorkerW", "prefer"),  # Ray's GPU worker: setproctitle ray::RayWorkerWrapper
    ("VLLM::EngineCor", "prefer"),  # vLLM's engine core process
    ("vllm", "prefer"),  # the API server
    ("pt_main_thread", "prefer"),  # PyTorch's renamed main thread
    ("sshd", "avoid"),
    ("systemd", "avoid"),
    ("systemd-journal", "avoid"),
    ("dockerd", "avoid"),
    ("containerd", "avoid"),
    ("containerd-shim", "avoid"),
    ("gcs_server", "avoid"),  # Ray's head: losing it loses the cluster
    ("raylet", "avoid"),
    ("dashboard", "avoid"),
    ("earlyoom", "avoid"),
    # Ray's per-node agents and `ray start`, on every serving lab node (comm_lab_*_serving.tsv):
    # the raylet fate-shares with the agents, so they are never the victim.
    ("ray::DashboardA", "avoid"),
    ("ray::RuntimeEnv", "avoid"),
    ("ray", "avoid"),
    ("bash", None),
    ("python3", None),
]


@pytest.mark.parametrize("comm,side", COMM_TABLE)
def test_prefer_and_avoid_pick_the_gpu_holders(comm, side):
    prefer = re.search(EARLYOOM_PREFER, comm) is not None
    avoid = re.search(EARLYOOM_AVOID, comm) is not None
    assert (prefer, avoid) == (side == "prefer", side == "avoid")
    assert len(comm) <= 15


def test_earlyoom_args_default_and_quoting():
    args = earlyoom_args()
    assert args.startswith("-m 4,2 -s 100,100 -r 0 --prefer '^(ray::")
    assert f"--avoid '{EARLYOOM_AVOID}'" in args
    assert earlyoom_args(10, 5).startswith("-m 10,5 ")


@pytest.mark.parametrize(
    "term,kill,word",
    [(0, 0, "outside (0, 100)"), (100, 2, "outside (0, 100)"), (4, 5, "above"), (math.nan, 2, "nan")],
)
def test_earlyoom_percents_refused(term, kill, word):
    with pytest.raises(GuardError, match=re.escape(word)):
        earlyoom_args(term, kill)
    with pytest.raises(MemoryPlanError, match="earlyoom_"):
        plan_memory(seed(ray_memory_monitor=False, earlyoom_term_percent=term, earlyoom_kill_percent=kill))


def test_limit_is_the_guards_sigterm_threshold_less_the_margin():
    plan = plan_memory(seed(ray_memory_monitor=False, gpu_memory_utilization=None))
    assert plan["limit_gib"] == pytest.approx(earlyoom_limit(SEED_TOTAL, 4), abs=0.01)
    assert plan["peak_gib"] + 1.0 <= plan["limit_gib"] + 0.01
    # The same percentages the ray_cluster role writes to /etc/default/earlyoom.
    assert plan["earlyoom_args"] == earlyoom_args(4, 2)


def test_discrete_host_limit_follows_earlyoom_too():
    inp = MemoryPlanInput(
        memory_total_gib=44.42,
        unified_memory=False,
        weights_gib=10.0,
        system_memory_total_gib=100.0,
        memory_available_gib=5.0,
        ray_memory_monitor=False,
        gpu_memory_utilization=0.9,
    )
    plan = plan_memory(inp)
    assert plan["breakdown"]["host_limit_gib"] == 96.0
    assert plan["fits"] is False
    assert any("host memory in use" in r for r in plan["reasons"])


# ------------------------------------------------------------------ numbers refused by name

NUMERIC = [
    "memory_total_gib",
    "weights_gib",
    "memory_available_gib",
    "memory_free_gib",
    "system_memory_total_gib",
    "gpu_memory_utilization",
    "activation_reserve_gib",
    "non_torch_reserve_gib",
    "cuda_graph_reserve_gib",
    "cuda_context_reserve_gib",
    "nccl_reserve_gib",
    "load_reserve_gib",
    "ray_reserve_gib",
    "ray_memory_threshold",
    "earlyoom_term_percent",
    "earlyoom_kill_percent",
    "running_stack_host_gib",
    "safety_margin_gib",
]


def test_every_numeric_field_is_checked():
    assert set(NUMERIC) <= set(input_field_names())


@pytest.mark.parametrize("name", NUMERIC)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -1.0])
def test_nan_infinity_and_negative_are_refused_naming_the_parameter(name, bad):
    with pytest.raises(MemoryPlanError) as err:
        plan_memory(seed(ray_memory_monitor=False, **{name: bad}))
    assert name in str(err.value)


@pytest.mark.parametrize(
    "name", ["tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "max_num_seqs"]
)
def test_negative_counts_are_refused_naming_the_parameter(name):
    with pytest.raises(MemoryPlanError, match=name):
        plan_memory(seed(**{name: -4}))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -2.0])
def test_measured_nan_is_refused(bad):
    with pytest.raises(MemoryPlanError, match=r"measured\.activation_gib"):
        plan_memory(seed(measured={"activation_gib": bad}))


# ------------------------------------------------------------------ a rerun on a serving node

# The seed's head serving at 0.86 (Ray's monitor off): MemTotal - MemAvailable holds the
# stack. Its GPU memory (nvidia-smi's per-process figures of its own containers) is added
# back by the preflight role into memory_available_gib; its host memory (the containers'
# cgroup memory less page cache: Ray, the API server, the engine's host side) comes back
# through running_stack_host_gib.
FRESH_AVAILABLE = 117.7
GPU_HELD = 0.86 * SEED_TOTAL + 0.5 + 1.0 + 3.5  # claim, CUDA context, NCCL, graphs outside the claim
HOST_HELD = 3.4  # memory.current - active_file - inactive_file of the Ray head and vLLM containers


def rerun_input(**overrides):
    serving_available = FRESH_AVAILABLE - GPU_HELD - HOST_HELD
    return seed(
        ray_memory_monitor=False,
        gpu_memory_utilization=None,
        memory_available_gib=serving_available + GPU_HELD,  # GPU memory added back as before
        **overrides,
    )


RERUN_TABLE = [
    # (host memory added back, expected recommendation)
    (HOST_HELD, 0.86),  # the rerun keeps the serving utilization
    (None, 0.83),  # without it the stack's host memory counts twice: the plan drops
]


@pytest.mark.parametrize("own_host,expected", RERUN_TABLE)
def test_rerun_on_a_serving_node_keeps_its_utilization(own_host, expected):
    fresh = plan_memory(seed(ray_memory_monitor=False, gpu_memory_utilization=None))
    assert fresh["gpu_memory_utilization"] == 0.86
    rerun = plan_memory(rerun_input(running_stack_host_gib=own_host))
    assert rerun["gpu_memory_utilization"] == expected
    if own_host:
        assert rerun["breakdown"]["used_before_launch_gib"] == fresh["breakdown"]["used_before_launch_gib"]
        assert rerun["breakdown"]["running_stack_host_gib"] == HOST_HELD


# ------------------------------------------------------------------ property: fits means under the limit

inputs = st.builds(
    MemoryPlanInput,
    memory_total_gib=st.floats(8.0, 200.0),
    weights_gib=st.floats(0.1, 300.0),
    tensor_parallel_size=st.sampled_from([1, 2, 4, 8]),
    memory_available_gib=st.one_of(st.none(), st.floats(0.0, 200.0)),
    memory_free_gib=st.one_of(st.none(), st.floats(0.0, 200.0)),
    system_memory_total_gib=st.one_of(st.none(), st.floats(8.0, 600.0)),
    unified_memory=st.booleans(),
    node_role=st.sampled_from(["head", "worker"]),
    gpu_memory_utilization=st.one_of(st.none(), st.floats(0.01, 1.0)),
    cuda_graphs=st.booleans(),
    vllm_version=st.sampled_from([None, "0.10.2", "0.17.1", "0.21.0"]),
    activation_reserve_gib=st.one_of(st.none(), st.floats(0.0, 20.0)),
    cuda_context_reserve_gib=st.floats(0.0, 2.0),
    ray_memory_threshold=st.floats(0.3, 1.0),
    ray_memory_monitor=st.booleans(),
    earlyoom_term_percent=st.floats(0.5, 20.0),
    earlyoom_kill_percent=st.just(0.5),
    running_stack_host_gib=st.one_of(st.none(), st.floats(0.0, 20.0)),
    safety_margin_gib=st.floats(0.0, 5.0),
    max_model_len=st.one_of(st.none(), st.integers(1, 300_000)),
    kv_cache_bytes_per_token=st.one_of(st.none(), st.integers(1, 500_000)),
)


@settings(max_examples=400, deadline=None)
@given(inputs)
def test_property_fits_never_reports_a_peak_above_the_limit(inp):
    plan = plan_memory(inp)
    if plan["fits"]:
        assert plan["peak_gib"] <= plan["limit_gib"]
        if not inp.unified_memory and plan["breakdown"]["host_limit_gib"] is not None:
            assert plan["breakdown"]["host_peak_gib"] <= plan["breakdown"]["host_limit_gib"]
    if plan["recommended_gpu_memory_utilization"] is not None:
        again = plan_memory(
            dataclasses.replace(inp, gpu_memory_utilization=plan["recommended_gpu_memory_utilization"])
        )
        assert again["fits"] is True


# ------------------------------------------------------------------ the load-time peak (vLLM PR #45179)

# Unified, MemTotal 119.70, 2.0 GiB in use, head (3.0 GiB Ray), CUDA context 0.5, NCCL 1.0 (both
# before vLLM's snapshot, so before the weights load):
# load_peak = 2.0 + 0.5 + 1.0 + 3.0 + weights per rank + load_reserve_gib, against 0.95 x 119.70 = 113.72.
LOAD_TABLE = [
    # (weights over TP=2, load reserve, load peak, load check at the given 0.5, named in the reasons)
    (205.0, None, 112.0, True, False),  # the default 3.0 GiB of post-processing fits
    (205.0, 8.0, 117.0, False, True),  # a heavier conversion passes Ray's threshold while loading
    (213.0, 0.0, 113.0, True, False),
    (220.0, 3.0, 119.5, False, True),
]


@pytest.mark.parametrize("weights,reserve,peak,fits,named", LOAD_TABLE)
def test_load_time_peak_is_checked_against_the_same_limit(weights, reserve, peak, fits, named):
    plan = plan_memory(seed(weights_gib=weights, gpu_memory_utilization=0.5, load_reserve_gib=reserve))
    assert plan["breakdown"]["load_peak_gib"] == pytest.approx(peak, abs=0.01)
    assert plan["breakdown"]["load_reserve_gib"] == (3.0 if reserve is None else reserve)
    reasons = " ".join(plan["reasons"])
    assert ("the load-time peak of" in reasons) is named
    if not fits:
        assert plan["fits"] is False
        assert plan["shortfall_gib"] >= round(peak - 113.72, 2)
        # No utilization helps: the weights load before the claim's KV cache exists.
        assert (
            plan_memory(seed(weights_gib=weights, gpu_memory_utilization=None, load_reserve_gib=reserve))[
                "recommended_gpu_memory_utilization"
            ]
            is None
        )


# ------------------------------------------------------------------ the monitor lever names its utilization


def test_monitor_off_lever_names_the_utilization_that_fits_under_earlyoom():
    """At 0.90 the seed fails under Ray's line; turning the monitor off does not make 0.90 fit
    (earlyoom's SIGTERM line is lower than MemTotal), so the lever names the value that does."""
    on = plan_memory(seed())
    off = plan_memory(seed(ray_memory_monitor=False, gpu_memory_utilization=None))
    lever = next(x for x in on["levers"] if x["lever"] == "ray_memory_monitor")
    assert lever["closes_gap"] is True
    assert f"with --gpu-memory-utilization {off['recommended_gpu_memory_utilization']:.2f}" in lever["detail"]
    assert off["recommended_gpu_memory_utilization"] < 0.90
    assert plan_memory(seed(ray_memory_monitor=False))["fits"] is False


def test_the_threshold_lever_stops_at_0_99_and_names_the_utilization_that_fits_there():
    """The seed at 0.90 needs (117.73 + 1.0) / 119.70 = 0.992 of MemTotal: past what the plan
    offers, so the lever offers 0.99 with the utilization that fits under it."""
    lever = next(x for x in plan_memory(seed())["levers"] if x["lever"] == "ray_memory_threshold")
    at_099 = plan_memory(seed(ray_memory_threshold=0.99, gpu_memory_utilization=None))
    assert lever["value"] == 0.99
    assert lever["closes_gap"] is True
    assert at_099["recommended_gpu_memory_utilization"] < 0.90
    assert lever["detail"].endswith(
        f"with --gpu-memory-utilization {at_099['recommended_gpu_memory_utilization']:.2f}"
    )


def test_no_threshold_lever_once_the_threshold_is_at_the_most_offered():
    # 0.95 peaks at 123.7 GiB, over 0.99 x 119.70 = 118.50.
    result = plan_memory(seed(ray_memory_threshold=0.99, gpu_memory_utilization=0.95))
    assert result["fits"] is False
    levers = result["levers"]
    assert "ray_memory_threshold" not in [x["lever"] for x in levers]
    assert "gpu_memory_utilization" in [x["lever"] for x in levers]


def test_a_lever_that_closes_nothing_names_no_utilization():
    # 400 GiB of weights per rank fit nowhere: no lever may name a value.
    result = plan_memory(seed(weights_gib=800.0))
    for lever in result["levers"]:
        if lever["lever"] in ("ray_memory_monitor", "ray_memory_threshold", "cuda_graphs"):
            assert lever["closes_gap"] is False
            assert "--gpu-memory-utilization" not in lever["detail"]
