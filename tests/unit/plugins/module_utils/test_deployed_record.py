"""The deployed record's merge-update: per section, recorded_at moving only with a change."""

import json

import pytest
from ansible_collections.sparkops.vllm.plugins.filter.deployed_record import (
    deployed_record,
    deployed_record_images,
)
from ansible_collections.sparkops.vllm.plugins.module_utils import _deployed_record as record

T1 = "2026-12-01T18:40:00Z"
T2 = "2026-12-01T19:10:00Z"
IDENTITY = {"cluster": "lab", "host": "spark-1", "role": "head"}
PLAN = {
    "gpu_memory_utilization": 0.55,
    "vllm_args": ["--gpu-memory-utilization", "0.55"],
    "kv_cache_gib": 2.33,
}


def _write(text=None, section="plan", data=PLAN, now=T1, compare=None):
    return record.update(text, section=section, data=data, now=now, identity=IDENTITY, compare=compare)


def test_a_new_record_holds_the_section_and_the_time():
    doc, changed = _write()
    assert changed
    assert doc == {
        "schema": 1,
        **IDENTITY,
        "recorded_at": T1,
        "sections": {"plan": dict(PLAN, recorded_at=T1)},
    }


def test_the_same_content_later_changes_nothing():
    doc, _ = _write()
    again, changed = _write(record.dumps(doc), now=T2)
    assert not changed
    assert again == doc
    assert record.dumps(again) == record.dumps(doc)


def test_a_changed_section_moves_its_time_and_the_records_but_not_the_others():
    doc, _ = _write()
    doc, _ = _write(record.dumps(doc), section="image", data={"ref": "img:1"})
    changed_doc, changed = _write(record.dumps(doc), section="image", data={"ref": "img:2"}, now=T2)
    assert changed
    assert changed_doc["sections"]["image"] == {"ref": "img:2", "recorded_at": T2}
    assert changed_doc["sections"]["plan"]["recorded_at"] == T1
    assert changed_doc["recorded_at"] == T2


def test_compare_keeps_the_predictions_of_the_run_that_deployed():
    compare = ["gpu_memory_utilization", "vllm_args"]
    doc, _ = _write(compare=compare)
    # MemAvailable moved: a new prediction at the same utilization.
    same, changed = _write(record.dumps(doc), data=dict(PLAN, kv_cache_gib=2.31), now=T2, compare=compare)
    assert not changed
    assert same["sections"]["plan"]["kv_cache_gib"] == 2.33
    moved, changed = _write(
        record.dumps(doc),
        data=dict(PLAN, gpu_memory_utilization=0.5, kv_cache_gib=1.9),
        now=T2,
        compare=compare,
    )
    assert changed
    assert moved["sections"]["plan"] == dict(
        PLAN, gpu_memory_utilization=0.5, kv_cache_gib=1.9, recorded_at=T2
    )


def test_a_new_host_identity_is_a_change():
    doc, _ = _write()
    moved, changed = record.update(
        record.dumps(doc), section="plan", data=PLAN, now=T2, identity=dict(IDENTITY, role="worker")
    )
    assert changed and moved["role"] == "worker"


@pytest.mark.parametrize(
    "text", [None, "", "{not json", json.dumps([1]), json.dumps({"schema": 2, "sections": {}})]
)
def test_an_unreadable_or_foreign_record_is_started_afresh(text):
    assert record.load(text) == {"schema": 1, "sections": {}}
    doc, changed = _write(text)
    assert changed and doc["sections"] == {"plan": dict(PLAN, recorded_at=T1)}


def test_the_whole_record_form_for_the_measured_record():
    measured = {"model_id": "m", "measured": {"weights_gib": 1.5}}
    # The measured record before recorded_at existed: the same figures get their time once.
    doc, changed = record.update(json.dumps(measured), section=None, data=measured, now=T1)
    assert changed and doc == dict(measured, recorded_at=T1)
    again, changed = record.update(record.dumps(doc), section=None, data=measured, now=T2)
    assert not changed and again["recorded_at"] == T1
    new, changed = record.update(
        record.dumps(doc), section=None, data={"model_id": "m", "measured": {"weights_gib": 1.6}}, now=T2
    )
    assert changed and new["recorded_at"] == T2


@pytest.mark.parametrize(
    ("section", "data", "message"),
    [
        ("plan", {"recorded_at": T1}, "recorded_at"),
        ("", {}, "non-empty string"),
        ("plan", ["a"], "mapping"),
    ],
)
def test_bad_input(section, data, message):
    with pytest.raises(record.RecordError, match=message):
        record.update(None, section=section, data=data, now=T1)


def test_the_readers():
    doc, _ = _write()
    doc, _ = _write(record.dumps(doc), section="image", data={"ref": "img:1"})
    doc, _ = _write(
        record.dumps(doc), section="serve", data={"image": "img:2", "gpu_memory_utilization": 0.55}
    )
    text = record.dumps(doc)
    assert record.serve_utilization(record.load(text)) == 0.55
    assert record.serve_utilization(record.load("")) is None
    assert record.serve_utilization({"sections": {"serve": {"gpu_memory_utilization": True}}}) is None
    assert deployed_record(text, "serve")["gpu_memory_utilization"] == 0.55
    assert deployed_record(text, "network") == {}
    assert deployed_record_images(deployed_record(text)) == ["img:1", "img:2"]
    assert deployed_record_images(deployed_record("")) == []
    # An upgrade's kept images (the previous, the abandoned) are the cluster's too.
    doc, _ = _write(
        text, section="upgrade_images", data={"kept": ["img:2", "img:0"], "phase": "awaiting_confirm"}
    )
    assert deployed_record_images(deployed_record(record.dumps(doc))) == ["img:1", "img:2", "img:0"]


# --- cluster diagnose's context: the deployed plan and the summary lines (issue 17) ---------


def _node_record(host, role, util, peak, limit, *, fits=True, recommended=0.56):
    return {
        "schema": 1,
        "host": host,
        "role": role,
        "recorded_at": "2026-12-01T18:40:00Z",
        "sections": {
            "plan": {
                "gpu_memory_utilization": util,
                "utilization_source": "recommended",
                "node": {
                    "role": role,
                    "fits": fits,
                    "peak_gib": peak,
                    "limit_gib": limit,
                    "recommended_gpu_memory_utilization": recommended,
                },
            },
            "image": {"ref": "sparkops/vllm-lab:ef23", "vllm_version": "0.17.1", "ray_version": "2.60.0"},
        },
    }


def test_the_cluster_plan_is_every_nodes_deployed_plan():
    docs = {
        "spark-1": _node_record("spark-1", "head", 0.55, 20.1, 22.4),
        "spark-2": _node_record("spark-2", "worker", 0.55, 21.9, 22.4, fits=False, recommended=0.5),
        "spark-3": {},
    }
    plan = record.cluster_plan(docs)
    assert plan["gpu_memory_utilization"] == 0.55
    assert plan["utilization_source"] == "recommended"
    assert plan["fits"] is False
    assert set(plan["nodes"]) == {"spark-1", "spark-2"}
    assert plan["nodes"]["spark-2"]["peak_gib"] == 21.9
    assert record.cluster_plan({"spark-1": {}, "spark-2": None}) == {}


def test_the_summary_names_image_versions_and_plan_per_node():
    lines = record.summary_lines(
        {"spark-2": {}, "spark-1": _node_record("spark-1", "head", 0.55, 20.1, 22.4)}
    )
    assert lines[0] == (
        "spark-1 (head): image sparkops/vllm-lab:ef23 [vLLM 0.17.1, Ray 2.60.0]; "
        "utilization 0.55 (recommended), peak 20.10 of 22.40 GiB; recorded 2026-12-01T18:40:00Z"
    )
    assert lines[1].startswith("spark-2: no deployed record")


def test_diagnose_names_the_deployed_plans_peak_and_limit():
    from ansible_collections.sparkops.vllm.plugins.module_utils import _diagnose  # noqa: PLC0415

    docs = {"spark-1": _node_record("spark-1", "head", 0.9, 116.7, 114.9, fits=False, recommended=0.87)}
    line = "(raylet) Memory on the node (IP: 192.168.200.12, ID: abc) where the task was running was 113.78GB / 119.70GB (0.950533), which exceeds the memory usage threshold of 0.95. Ray killed this worker"
    report = _diagnose.diagnose_text(line, context={"memory_plan": record.cluster_plan(docs)})
    fixes = " ".join(finding["fix"] for finding in report["findings"])
    assert "peak 116.7 GiB over the limit 114.9 GiB on spark-1" in fixes


@pytest.mark.parametrize(
    ("node", "total", "limit", "floor"),
    [
        ({"limit_gib": 22.4}, 24 << 30, int(22.4 * (1 << 30)), (24 << 30) - int(22.4 * (1 << 30))),
        ({"limit_gib": 110}, 100 << 30, 110 << 30, 0),
        ({"limit_gib": 0}, 24 << 30, None, None),
        ({"limit_gib": True}, 24 << 30, None, None),
        ({"limit_gib": "22"}, 24 << 30, None, None),
        ({}, 24 << 30, None, None),
    ],
)
def test_plan_limit_and_memavailable_floor(node, total, limit, floor):
    doc = {"schema": 1, "sections": {"plan": {"node": node}}}
    assert record.plan_limit_bytes(doc) == limit
    assert record.memavailable_floor_bytes(doc, total) == floor


def test_memavailable_floor_without_a_record():
    assert record.plan_limit_bytes(None) is None
    assert record.memavailable_floor_bytes({}, 24 << 30) is None
