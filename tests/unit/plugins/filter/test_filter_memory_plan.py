"""The cluster-wide memory plan: measured record, utilization choice, report, summary.

The per-node plans are real memory_plan results (plan_memory) on the lab's and the
seeds' figures, so the words are tested against what the planner really returns.
"""

import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkops.vllm.plugins.filter.memory_plan import FilterModule
from ansible_collections.sparkops.vllm.plugins.module_utils import _cluster_memory_plan as cluster
from ansible_collections.sparkops.vllm.plugins.module_utils._cluster_memory_plan import (
    cluster_plan,
    measured_from_record,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._memory_plan import build_input, plan_memory

FILTERS = FilterModule().filters()
# The lab machine: MemTotal 23.54 GiB, about 1.1 GiB in use; the seeds' GB10 nodes.
LAB = {
    "memory_total_gib": 23.54,
    "memory_available_gib": 22.44,
    "memory_free_gib": 20.2,
    "tensor_parallel_size": 2,
    "max_model_len": 4096,
    "vllm_version": "0.17.1",
    "weights_gib": 0.5,
}
SEED = {
    "memory_total_gib": 119.70,
    "system_memory_total_gib": 119.70,
    "memory_available_gib": 117.7,
    "tensor_parallel_size": 2,
    "vllm_version": "0.17.1rc1",
    "weights_gib": 110.83,
}
RECORD = {
    "model_id": "org/m",
    "tensor_parallel_size": 2,
    "pipeline_parallel_size": 1,
    "vllm_version": "0.17.1",
    "recorded_at": "2025-01-01T00:00:00Z",
    "measured": {"weights_gib": 55.41, "activation_gib": 1.9, "non_torch_gib": 2.8, "cuda_graph_gib": 0.7},
}


def plan(**params):
    return plan_memory(build_input(params))


def test_filter_module_exports_the_documented_filters():
    assert set(FILTERS) == {
        "memory_plan_measured",
        "memory_plan_utilization",
        "memory_plan_report",
        "memory_plan_cluster",
        "memory_plan_summary",
        "memory_plan_version_check",
        "memory_plan_drop_caches_command",
        "memory_plan_page_cache",
        "memory_plan_page_cache_outcome",
    }


@pytest.mark.parametrize(
    ("text", "measured", "note"),
    [
        ("", {}, "no figures from a previous start"),
        ("{not json", {}, "not JSON"),
        ('{"model_id": "org/m"}', {}, "no 'measured' mapping"),
        (json.dumps(RECORD), RECORD["measured"], "figures measured at the last start (2025-01-01T00:00:00Z)"),
        (json.dumps({**RECORD, "tensor_parallel_size": "2"}), RECORD["measured"], "figures measured"),
        (json.dumps({**RECORD, "tensor_parallel_size": 4}), {}, "tensor_parallel_size 4"),
        (json.dumps({**RECORD, "model_id": "org/other"}), {}, "model_id 'org/other'"),
        (json.dumps({**RECORD, "vllm_version": "0.21.0"}), {}, "vllm_version '0.21.0'"),
        (
            json.dumps({**RECORD, "measured": {"activation_gib": -1, "cuda_graph_gib": True}}),
            {},
            "holds no figures",
        ),
        (
            json.dumps({**RECORD, "measured": {"activation_gib": 1, "junk": 3}}),
            {"activation_gib": 1.0},
            "activation_gib",
        ),
    ],
)
def test_measured_record_applies_only_to_the_same_deployment(text, measured, note):
    got = FILTERS["memory_plan_measured"](text, "org/m", 2, "1", "0.17.1")
    assert got["measured"] == measured
    assert note in got["note"]


def test_measured_figures_feed_the_planner():
    measured = measured_from_record(json.dumps(RECORD), "org/m", 2, 1, "0.17.1")["measured"]
    result = plan(**SEED, measured=measured)
    assert result["breakdown"]["sources"]["activation_gib"] == "measured"
    assert result["recommended_gpu_memory_utilization"] > plan(**SEED)["recommended_gpu_memory_utilization"]


def test_utilization_is_one_step_under_the_smallest_recommendation_or_the_given_value():
    recs = {"spark-2": 0.60, "spark-1": 0.54, "spark-3": 0.54}
    assert FILTERS["memory_plan_utilization"](recs) == {
        "value": 0.53,
        "source": "recommended",
        "limited_by": "spark-1",
        "recommended": 0.53,
    }
    assert FILTERS["memory_plan_utilization"](recs, "0.7") == {
        "value": 0.7,
        "source": "given",
        "limited_by": None,
        "recommended": 0.53,
    }
    with pytest.raises(AnsibleFilterError, match="no utilization fits on spark-2"):
        FILTERS["memory_plan_utilization"]({"spark-1": 0.5, "spark-2": None})
    with pytest.raises(AnsibleFilterError, match="no node was planned"):
        FILTERS["memory_plan_utilization"]({})


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        # The deployed value still fits: kept, so a rerun restarts nothing.
        (0.53, {"value": 0.53, "source": "kept", "limited_by": "spark-1", "recommended": 0.53}),
        (0.54, {"value": 0.54, "source": "kept", "limited_by": "spark-1", "recommended": 0.53}),
        (0.51, {"value": 0.51, "source": "kept", "limited_by": "spark-1", "recommended": 0.53}),
        # Far under the recommendation (the first rerun after a start: the figures it
        # measured are smaller than the defaults): still kept; the fresh value is offered.
        (0.40, {"value": 0.40, "source": "kept", "limited_by": "spark-1", "recommended": 0.53}),
        # Above the smallest recommendation it would not fit: planned again.
        (0.55, {"value": 0.53, "source": "recommended", "limited_by": "spark-1", "recommended": 0.53}),
        (0.60, {"value": 0.53, "source": "recommended", "limited_by": "spark-1", "recommended": 0.53}),
        # Nothing deployed yet.
        (None, {"value": 0.53, "source": "recommended", "limited_by": "spark-1", "recommended": 0.53}),
    ],
)
def test_a_deployed_utilization_is_kept_while_it_fits(current, expected):
    recs = {"spark-2": 0.60, "spark-1": 0.54}
    assert FILTERS["memory_plan_utilization"](recs, None, current) == expected


def test_a_kept_utilization_under_a_fresh_plan_is_kept():
    choice = FILTERS["memory_plan_utilization"]({"spark-2": 0.71, "spark-1": 0.64}, None, 0.56)
    assert (choice["value"], choice["source"], choice["recommended"]) == (0.56, "kept", 0.63)


@pytest.mark.parametrize(
    ("source", "deployed", "fresh", "offered"),
    [
        # Kept under a higher fresh value (the lab's first rerun, 2026-12-02): the lever is offered.
        ("kept", 0.56, 0.63, True),
        # Kept at the fresh value, or a fresh plan taken: nothing to offer.
        ("kept", 0.63, 0.63, False),
        ("recommended", 0.63, 0.63, False),
        ("given", 0.5, 0.63, False),
    ],
)
def test_the_summary_offers_the_fresh_value_only_over_a_kept_one(source, deployed, fresh, offered):
    lines = cluster.summary_lines(
        {
            "fits": True,
            "gpu_memory_utilization": deployed,
            "utilization_source": source,
            "limited_by": "spark-1",
            "recommended_gpu_memory_utilization": fresh,
            "nodes": {},
            "kv_cache_gib": 7.93,
            "kv_cache_tokens": 4158848,
            "vllm_args": ["--gpu-memory-utilization", f"{deployed}"],
            "env": {},
            "earlyoom_args": None,
            "ray_memory_monitor": True,
            "drop_caches": False,
            "risks": [],
            "notes": [],
        }
    )
    offer = [line for line in lines if "fresh plan would take" in line]
    if offered:
        assert len(offer) == 1 and f"-e sparkops_gpu_memory_utilization={fresh:.2f}" in offer[0]
    else:
        assert offer == []


def test_a_given_value_still_reports_the_fresh_one():
    choice = FILTERS["memory_plan_utilization"]({"spark-1": 0.54, "spark-2": 0.6}, 0.5, 0.53)
    assert choice == {"value": 0.5, "source": "given", "limited_by": None, "recommended": 0.53}
    # A node where nothing fits: the given value is still taken (preflight's assert judges it).
    assert FILTERS["memory_plan_utilization"]({"spark-1": None}, 0.5)["recommended"] is None


def test_a_given_utilization_wins_over_the_deployed_one():
    assert FILTERS["memory_plan_utilization"]({"spark-1": 0.54}, 0.5, 0.53)["source"] == "given"


def test_report_of_a_model_too_large_names_host_numbers_reasons_and_levers():
    result = plan(**{**LAB, "weights_gib": 40})
    lines = FILTERS["memory_plan_report"](result, "spark-2", "worker")
    text = "\n".join(lines)
    assert lines[0].startswith("spark-2 (worker): no --gpu-memory-utilization fits this node")
    assert f"peak {result['peak_gib']} GiB vs limit {result['limit_gib']} GiB" in text
    assert f"shortfall {result['shortfall_gib']} GiB" in text
    assert "Ray's memory monitor kills at 0.95 x 23.54 GiB MemTotal" in text
    assert "weights 20.0" in text
    assert "vLLM's startup check fails" in text
    assert "sparkops_tensor_parallel_size: 8 -> --tensor-parallel-size 8" in text
    assert "sparkops_cuda_graphs: false (not enough on its own)" in text


def test_report_of_the_seeds_given_utilization_names_ray_and_the_fixes():
    result = plan(**SEED, gpu_memory_utilization=0.90)
    text = "\n".join(FILTERS["memory_plan_report"](result, "spark-1", "head", "given"))
    assert (
        "spark-1 (head): the memory plan does not fit at --gpu-memory-utilization 0.9"
        " (sparkops_gpu_memory_utilization)" in text
    )
    assert "KV cache 48.32 GiB per rank; peak 117.73 GiB vs limit 113.72 GiB" in text
    assert "CUDA context 0.5, NCCL 1.0, graph capture 3.5" in text
    assert "Ray's memory monitor would kill a worker" in text
    assert "sparkops_gpu_memory_utilization: 0.85 -> --gpu-memory-utilization 0.85" in text
    assert "RAY_memory_monitor_refresh_ms=0 on every Ray node with --gpu-memory-utilization 0.86" in text
    assert "sparkops_ray_memory_monitor: false" in text


def _nodes(u, head=None, worker=None):
    head = head or {}
    worker = worker or {}
    rec_h = plan(**{**LAB, **head})["recommended_gpu_memory_utilization"]
    rec_w = plan(**{**LAB, **worker, "node_role": "worker"})["recommended_gpu_memory_utilization"]
    return {
        "spark-1": {
            "role": "head",
            "recommended": rec_h,
            "plan": plan(**{**LAB, **head, "gpu_memory_utilization": u}),
        },
        "spark-2": {
            "role": "worker",
            "recommended": rec_w,
            "plan": plan(**{**LAB, **worker, "node_role": "worker", "gpu_memory_utilization": u}),
        },
    }


def test_cluster_plan_on_the_lab_fits_at_the_heads_recommendation():
    recs = {h: n["recommended"] for h, n in _nodes(0.5).items()}
    choice = FILTERS["memory_plan_utilization"](recs)
    assert choice["limited_by"] == "spark-1"  # the head carries the larger Ray reserve
    nodes = _nodes(choice["value"])
    result = FILTERS["memory_plan_cluster"](nodes, choice, ["no figures from a previous start"])
    assert result["fits"] is True
    assert result["gpu_memory_utilization"] == choice["value"]
    assert result["vllm_args"] == [
        "--gpu-memory-utilization",
        f"{choice['value']:.2f}",
        "--max-model-len",
        "4096",
    ]
    assert result["env"] == {}
    assert result["ray_memory_monitor"] is True
    assert result["kv_cache_gib"] == nodes["spark-1"]["plan"]["kv_cache_gib"]
    assert result["kv_cache_tokens"] is None
    assert result["nodes"]["spark-2"]["headroom_gib"] == round(
        nodes["spark-2"]["plan"]["limit_gib"] - nodes["spark-2"]["plan"]["peak_gib"], 2
    )
    assert result["nodes"]["spark-1"]["peak_gib"] <= result["nodes"]["spark-1"]["limit_gib"] - 1.0


def test_cluster_kv_is_the_smallest_rank_and_tokens_known_from_the_config():
    config = {
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "torch_dtype": "bfloat16",
    }
    nodes = _nodes(0.5, head={"memory_available_gib": 21.0}, worker={"model_config": config})
    nodes["spark-1"]["plan"] = plan(
        **{**LAB, "model_config": config, "memory_available_gib": 21.0, "gpu_memory_utilization": 0.5}
    )
    result = cluster_plan(nodes, {"value": 0.5, "source": "given", "limited_by": None})
    assert result["kv_cache_tokens"] == min(n["plan"]["kv_cache_tokens"] for n in nodes.values())
    assert result["kv_cache_tokens"] > 0


def test_monitor_off_carries_the_env_and_demands_earlyoom():
    nodes = _nodes(0.6, head={"ray_memory_monitor": False}, worker={"ray_memory_monitor": False})
    result = cluster_plan(nodes, {"value": 0.6, "source": "given", "limited_by": None})
    assert result["env"] == {"RAY_memory_monitor_refresh_ms": "0"}
    assert result["ray_memory_monitor"] is False
    text = "\n".join(FILTERS["memory_plan_summary"](result, "lab", 4096))
    assert "env: RAY_memory_monitor_refresh_ms=0" in text
    # The guard the limits assume, and the page-cache drop on unified memory.
    assert result["earlyoom_args"].startswith("-m 4,2 -s 100,100 -r 0 --prefer ")
    assert f"EARLYOOM_ARGS={result['earlyoom_args']} (the limits above are its SIGTERM threshold)" in text
    assert result["drop_caches"] is True
    assert (
        "page cache: to be dropped right before each Ray unit start and, on every node, before serve starts"
        in text
    )


def test_monitor_on_has_no_guard_args_and_no_drop_when_turned_off():
    nodes = _nodes(0.6, head={"drop_caches": False}, worker={"drop_caches": False})
    result = cluster_plan(nodes, {"value": 0.6, "source": "given", "limited_by": None})
    assert result["earlyoom_args"] is None
    assert result["drop_caches"] is False
    text = "\n".join(FILTERS["memory_plan_summary"](result, "lab", 4096))
    assert "earlyoom: not needed" in text
    assert "page cache:" not in text.split("risk:")[0]


def test_summary_is_one_screen_with_every_node():
    choice = {"value": 0.54, "source": "recommended", "limited_by": "spark-1"}
    result = cluster_plan(
        _nodes(0.54), choice, ["no figures from a previous start: the planner's defaults are used"]
    )
    lines = FILTERS["memory_plan_summary"](result, "lab", 4096)
    assert lines[0] == "Memory plan of cluster lab: fits"
    assert (
        lines[1] == "--gpu-memory-utilization 0.54 (recommended: one step under the smallest of the nodes'"
        " recommendations, set by spark-1)"
    )
    rows = [line.split() for line in lines if line.startswith("spark-")]
    assert [r[:2] for r in rows] == [["spark-1", "head"], ["spark-2", "worker"]]
    assert rows[0][4] == f"{result['nodes']['spark-1']['limit_gib']:.2f}"
    assert "max_model_len 4096 is not checked" in "\n".join(lines)
    assert "vLLM args: --gpu-memory-utilization 0.54 --max-model-len 4096" in lines
    assert "earlyoom: not needed, Ray's memory monitor guards the nodes" in lines
    assert len(lines) <= 24


def test_cluster_of_no_nodes_is_refused():
    with pytest.raises(AnsibleFilterError, match="no node was planned"):
        FILTERS["memory_plan_cluster"]({}, {"value": 0.5, "source": "given"})
