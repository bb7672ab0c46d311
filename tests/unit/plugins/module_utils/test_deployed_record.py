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
