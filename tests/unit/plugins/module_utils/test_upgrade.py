"""Upgrades: the gate's decisions, the record's transitions, downtime, refusals, idempotence (docs/upgrades.md)."""

import json

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _deployed_record as record
from ansible_collections.sparkops.vllm.plugins.module_utils import _upgrade as up

T0 = "2026-12-04T14:00:00Z"
T1 = "2026-12-04T14:05:00Z"
OLD_ID = "sha256:" + "a" * 64
NEW_ID = "sha256:" + "b" * 64
HEALTHY = {"healthy": True, "detail": "/health 200, completion ok"}
GOOD_PROBE = {"identical": True, "matches_reference": True, "tokens_sane": True, "problems": []}
BASELINE = {
    "levels": [
        {"concurrency": 1, "output_tokens_per_s": 100.0, "errors": 0},
        {"concurrency": 8, "output_tokens_per_s": 400.0, "errors": 0},
    ]
}


def _deployment(ref="vllm:old", image_id=OLD_ID, revision="r1"):
    return up.deployment(
        image_ref=ref,
        image_id=image_id,
        vllm_version="0.11.0",
        argv=["vllm", "serve", "/srv/models/m", "--api-key", "${VLLM_API_KEY}"],
        launch_inputs={"tensor_parallel_size": 2},
        plan={"gpu_memory_utilization": 0.55},
        model_path="/srv/models/m",
        model_revision=revision,
        bench_baseline=BASELINE,
        probe_reference={"answers": ["4"]},
        recorded_at=T0,
    )


def _want(ref="vllm:new", image_id=NEW_ID, revision="r1"):
    return up.target(image_ref=ref, image_id=image_id, model_path="/srv/models/m", model_revision=revision)


def _bench(*rates, errors=0):
    return {
        "levels": [
            {"concurrency": c, "output_tokens_per_s": r, "errors": errors}
            for c, r in zip((1, 8), rates, strict=True)
        ]
    }


# -- the gate --------------------------------------------------------------------

GATE_CASES = [
    # id, health, probe, bench, baseline, passed, reason fragments, warning fragments
    ("all pass", HEALTHY, GOOD_PROBE, _bench(98.0, 390.0), BASELINE, True, [], []),
    (
        "health fails alone",
        {"healthy": False, "detail": "/health 503"},
        GOOD_PROBE,
        None,
        BASELINE,
        False,
        ["health: the endpoint is not healthy (/health 503)"],
        [],
    ),
    ("no health result", None, GOOD_PROBE, _bench(100.0, 400.0), BASELINE, False, ["no health result"], []),
    (
        "probe not identical",
        HEALTHY,
        dict(GOOD_PROBE, identical=False),
        _bench(100.0, 400.0),
        BASELINE,
        False,
        ["identical: no"],
        [],
    ),
    (
        "probe mismatch vs reference",
        HEALTHY,
        dict(GOOD_PROBE, matches_reference=False),
        _bench(100.0, 400.0),
        BASELINE,
        False,
        ["matches reference: no"],
        [],
    ),
    (
        "probe without reference warns",
        HEALTHY,
        dict(GOOD_PROBE, matches_reference=None),
        _bench(100.0, 400.0),
        BASELINE,
        True,
        [],
        ["no correctness reference"],
    ),
    (
        "probe tokens insane",
        HEALTHY,
        dict(GOOD_PROBE, tokens_sane=False),
        _bench(100.0, 400.0),
        BASELINE,
        False,
        ["tokens sanity: no"],
        [],
    ),
    (
        "probe problems",
        HEALTHY,
        dict(GOOD_PROBE, problems=["answer 3 empty"]),
        _bench(100.0, 400.0),
        BASELINE,
        False,
        ["probe: answer 3 empty"],
        [],
    ),
    (
        "no probe result",
        HEALTHY,
        None,
        _bench(100.0, 400.0),
        BASELINE,
        False,
        ["no correctness probe result"],
        [],
    ),
    (
        "bench below tolerance",
        HEALTHY,
        GOOD_PROBE,
        _bench(100.0, 350.0),
        BASELINE,
        False,
        ["concurrency 8: 350.0 output tokens/s, under 360.0"],
        [],
    ),
    ("bench at the floor passes", HEALTHY, GOOD_PROBE, _bench(90.0, 360.0), BASELINE, True, [], []),
    (
        "bench errors",
        HEALTHY,
        GOOD_PROBE,
        _bench(100.0, 400.0, errors=2),
        BASELINE,
        False,
        ["2 request(s) failed"],
        [],
    ),
    (
        "bench level missing",
        HEALTHY,
        GOOD_PROBE,
        {"levels": [BASELINE["levels"][0]]},
        BASELINE,
        False,
        ["concurrency 8 was not measured"],
        [],
    ),
    (
        "bench absent with a baseline",
        HEALTHY,
        GOOD_PROBE,
        None,
        BASELINE,
        False,
        ["concurrency 1 was not measured"],
        [],
    ),
    (
        "no baseline: health and probe only",
        HEALTHY,
        GOOD_PROBE,
        None,
        None,
        True,
        [],
        ["no benchmark baseline recorded"],
    ),
    (
        "no baseline still fails on the probe",
        HEALTHY,
        dict(GOOD_PROBE, identical=False),
        None,
        None,
        False,
        ["identical: no"],
        ["no benchmark baseline"],
    ),
]


@pytest.mark.parametrize("case", GATE_CASES, ids=[case[0] for case in GATE_CASES])
def test_the_gate_decides(case):
    _, health, probe, bench, baseline, passed, reasons, warnings = case
    verdict = up.gate(health, probe, bench, baseline, 0.10)
    assert verdict["passed"] is passed
    assert bool(verdict["reasons"]) is not passed
    for fragment in reasons:
        assert any(fragment in reason for reason in verdict["reasons"]), verdict["reasons"]
    for fragment in warnings:
        assert any(fragment in warning for warning in verdict["warnings"]), verdict["warnings"]


def test_health_failure_measures_nothing_else():
    verdict = up.gate({"healthy": False}, None, None, BASELINE, 0.1)
    assert verdict["checks"] == {"health": False, "probe": None, "bench": None}
    assert len(verdict["reasons"]) == 1


@pytest.mark.parametrize("tolerance", [-0.1, 1.0, True, "0.1"])
def test_a_bad_tolerance_is_refused(tolerance):
    with pytest.raises(ValueError, match="tolerance"):
        up.gate(HEALTHY, GOOD_PROBE, None, None, tolerance)


# -- records ---------------------------------------------------------------------


def test_a_deployment_needs_an_image_id_and_argv():
    with pytest.raises(up.UpgradeRefused, match="no image ID"):
        up.deployment(**dict(_deployment(), image_id=""))
    with pytest.raises(up.UpgradeRefused, match="no launch argv"):
        up.deployment(**dict(_deployment(), argv=[]))


def _pass_upgrade(section=None, new=None):
    running = _deployment()
    new = new or _deployment("vllm:new", NEW_ID)
    doc = up.begin(section, running, _want(), T0)
    verdict = up.gate(HEALTHY, GOOD_PROBE, _bench(100.0, 400.0), BASELINE, 0.1)
    times = {"serve_stopped_at": "2026-12-04T14:01:00Z", "first_healthy_at": "2026-12-04T14:03:30Z"}
    return up.finish(doc, verdict, new, timings=times, now=T1)


def test_a_passed_upgrade_becomes_current_and_keeps_the_previous():
    doc = _pass_upgrade()
    assert doc["phase"] == up.AWAITING_CONFIRM
    assert doc["current"]["image_id"] == NEW_ID
    assert doc["previous"]["image_id"] == OLD_ID
    assert doc["attempt"]["outcome"] == "current"
    assert doc["attempt"]["downtime_seconds"] == 150.0
    assert up.kept_images(doc) == ["vllm:new", "vllm:old"]


def test_the_section_round_trips_through_the_deployed_record():
    doc = _pass_upgrade()
    written, changed = record.update(None, section=up.SECTION, data=doc, now=T1, identity={"host": "spark-1"})
    assert changed
    text = record.dumps(written)
    assert up.load(record.section(record.load(text), up.SECTION)) == json.loads(json.dumps(doc))
    _, changed = record.update(text, section=up.SECTION, data=doc, now="2026-12-04T15:00:00Z")
    assert not changed


def test_an_unknown_section_reads_as_never_upgraded():
    assert up.load({"phase": "sideways"}) == up.empty()
    assert up.load(None) == up.empty()


def test_a_failed_gate_rolls_back_and_discards_the_target():
    doc = up.begin(None, _deployment(), _want(), T0)
    verdict = up.gate({"healthy": False, "detail": "503"}, None, None, BASELINE, 0.1)
    doc = up.finish(doc, verdict, None, timings={"serve_stopped_at": T0, "first_healthy_at": None}, now=T1)
    assert doc["phase"] == up.UPGRADING
    assert doc["attempt"]["outcome"] == "rolling_back"
    assert doc["attempt"]["downtime_seconds"] is None
    assert up.plan_rollback(doc, host="spark-1")["to"]["image_id"] == OLD_ID
    times = {"serve_stopped_at": "2026-12-04T14:06:00Z", "first_healthy_at": "2026-12-04T14:08:00Z"}
    back = up.rolled_back(
        doc, up.gate(HEALTHY, GOOD_PROBE, _bench(100.0, 400.0), BASELINE, 0.1), timings=times, now=T1
    )
    assert back["phase"] == up.ROLLED_BACK
    assert back["current"]["image_id"] == OLD_ID
    assert back["discarded"]["image_ref"] == "vllm:new"
    assert back["attempt"]["rollback_downtime_seconds"] == 120.0
    assert up.kept_images(back) == ["vllm:old", "vllm:new"]
    assert "rollback: 120.0 s" in up.downtime_line(back["attempt"])


def test_a_rollback_whose_own_gate_fails_needs_a_person():
    doc = up.begin(None, _deployment(), _want(), T0)
    with pytest.raises(up.UpgradeRefused, match=r"runbooks/upgrade-rolled-back\.md"):
        up.rolled_back(doc, {"passed": False, "reasons": ["health: down"]}, timings={}, now=T1)


def test_rollback_on_demand_swaps_and_a_second_one_changes_nothing():
    doc = _pass_upgrade()
    decision = up.plan_rollback(doc, host="spark-1")
    assert decision["action"] == "rollback" and decision["to"]["image_id"] == OLD_ID
    back = up.rolled_back(doc, {"passed": True, "reasons": []}, timings={}, now=T1)
    assert back["current"]["image_id"] == OLD_ID
    assert back["discarded"]["image_id"] == NEW_ID
    assert back["previous"] is None
    assert up.plan_rollback(back, host="spark-1")["action"] == "none"


def test_confirm_removes_the_kept_image_and_a_second_confirm_changes_nothing():
    doc = _pass_upgrade()
    decision = up.plan_confirm(doc, host="spark-1")
    assert decision == {
        "action": "confirm",
        "remove": ["vllm:old"],
        "remove_models": [],
        "remove_model_files": [],
        "reason": decision["reason"],
    }
    done = up.confirmed(doc, now=T1)
    assert done["phase"] == up.STEADY and done["previous"] is None
    assert up.kept_images(done) == ["vllm:new"]
    again = up.plan_confirm(done, host="spark-1")
    assert again["action"] == "none" and again["remove"] == []
    assert "confirmed already" in again["reason"]


def test_confirm_with_nothing_ever_upgraded_is_refused():
    with pytest.raises(up.UpgradeRefused, match=r"spark-1: nothing is pending confirmation.*Fix:"):
        up.plan_confirm(None, host="spark-1")


def test_before_the_image_is_on_the_head_the_phase_rules_apply_by_reference():
    # The ID is unknown: compared by reference; a steady section decides on what runs.
    unknown = _want("vllm:new", "")
    assert up.plan_upgrade(None, _deployment(), unknown, host="h", require_id=False)["action"] == "upgrade"
    assert (
        up.plan_upgrade(None, _deployment(), _want("vllm:old", ""), host="h", require_id=False)["action"]
        == "none"
    )
    with pytest.raises(up.UpgradeRefused, match="only one deployment is kept"):
        up.plan_upgrade(_pass_upgrade(), _deployment(), _want("vllm:third", ""), host="h", require_id=False)


def test_a_steady_section_decides_on_the_running_deployment():
    # deploy.yml changed the image after a confirm: the record's sections are the truth.
    done = up.confirmed(_pass_upgrade(), now=T1)
    assert up.plan_upgrade(done, _deployment(), _want("vllm:new", NEW_ID), host="h")["action"] == "upgrade"


def test_confirm_after_a_rollback_removes_the_abandoned_image():
    back = up.rolled_back(_pass_upgrade(), {"passed": True}, timings={}, now=T1)
    assert up.plan_confirm(back, host="spark-1")["remove"] == ["vllm:new"]


# -- idempotence and refusals ----------------------------------------------------


def test_an_upgrade_to_the_current_deployment_changes_nothing():
    doc = _pass_upgrade()
    assert up.plan_upgrade(doc, _deployment(), _want(), host="spark-1")["action"] == "none"
    # A never-upgraded cluster already running the target: nothing either.
    assert up.plan_upgrade(None, _deployment(), _want("vllm:old", OLD_ID), host="spark-1")["action"] == "none"


def test_an_upgrade_to_a_new_image_or_revision_upgrades():
    assert up.plan_upgrade(None, _deployment(), _want(), host="h")["action"] == "upgrade"
    assert (
        up.plan_upgrade(None, _deployment(), _want("vllm:old", OLD_ID, "r2"), host="h")["action"] == "upgrade"
    )


def test_an_interrupted_upgrade_resumes_only_to_its_own_target():
    doc = up.begin(None, _deployment(), _want(), T0)
    assert up.plan_upgrade(doc, _deployment(), _want(), host="h")["action"] == "resume"
    with pytest.raises(up.UpgradeRefused, match=r"interrupted.*Fix: `sparkops rollback`"):
        up.plan_upgrade(doc, _deployment(), _want("vllm:other", "sha256:" + "c" * 64), host="h")
    resumed = up.begin(doc, _deployment(), _want(), T1)
    assert resumed["attempt"]["started_at"] == T0 and resumed["attempt"]["resumed_at"] == T1


def test_an_unknown_image_is_refused_with_host_value_and_fix():
    with pytest.raises(up.UpgradeRefused, match=r"spark-1: the image 'vllm:nope' is not on the head.*Fix:"):
        up.plan_upgrade(None, _deployment(), _want("vllm:nope", ""), host="spark-1")


def test_a_second_upgrade_before_confirm_is_refused():
    doc = _pass_upgrade()
    with pytest.raises(up.UpgradeRefused, match=r"vllm:old \(model revision r1\) is still kept.*--confirm"):
        up.plan_upgrade(doc, _deployment(), _want("vllm:third", "sha256:" + "c" * 64), host="spark-1")


def test_no_previous_deployment_to_roll_back_to():
    with pytest.raises(up.UpgradeRefused, match=r"spark-1: there is no previous deployment.*Fix:"):
        up.plan_rollback(None, host="spark-1")
    with pytest.raises(up.UpgradeRefused, match="no previous deployment"):
        up.plan_rollback(up.confirmed(_pass_upgrade(), now=T1), host="spark-1")


def test_confirm_during_an_interrupted_upgrade_is_refused():
    doc = up.begin(None, _deployment(), _want(), T0)
    with pytest.raises(up.UpgradeRefused, match="nothing gated to confirm"):
        up.plan_confirm(doc, host="spark-1")


# -- downtime --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stopped", "healthy", "seconds"),
    [
        ("2026-12-04T14:00:00Z", "2026-12-04T14:02:30Z", 150.0),
        ("2026-12-04T14:00:00.250Z", "2026-12-04T14:00:01.000Z", 0.8),
        ("2026-12-04T14:00:00Z", None, None),
        (None, "2026-12-04T14:00:00Z", None),
    ],
)
def test_downtime_is_stop_to_first_healthy_answer(stopped, healthy, seconds):
    assert up.downtime_seconds(stopped, healthy) == seconds


def test_downtime_refuses_an_answer_before_the_stop_and_a_non_utc_time():
    with pytest.raises(ValueError, match="before serve stopped"):
        up.downtime_seconds("2026-12-04T14:00:10Z", "2026-12-04T14:00:00Z")
    with pytest.raises(ValueError, match="UTC ending in Z"):
        up.downtime_seconds("2026-12-04T14:00:00+01:00", "2026-12-04T14:00:00Z")


def test_the_downtime_line_says_why_it_is_a_full_restart():
    assert "not measured" in up.downtime_line(None)
    line = up.downtime_line({"downtime_seconds": 150.0})
    assert "upgrade: 150.0 s" in line and "tensor parallelism" in line


def test_every_node_records_the_images_it_keeps():
    doc = _pass_upgrade()
    assert up.node_images(doc) == {
        "phase": up.AWAITING_CONFIRM,
        "kept": ["vllm:new", "vllm:old"],
        "kept_models": ["/srv/models/m"],
        "current": {"ref": "vllm:new", "id": NEW_ID, "model_path": "/srv/models/m"},
        "previous": {"ref": "vllm:old", "id": OLD_ID, "model_path": "/srv/models/m"},
        "discarded": None,
    }
    assert up.node_images(None)["kept"] == []


HEAD_RECORD = {
    "schema": 1,
    "sections": {
        "image": {"ref": "vllm:old", "id": OLD_ID, "vllm_version": "0.11.0", "ray_version": "2.49.1"},
        "plan": {
            "gpu_memory_utilization": 0.55,
            "utilization_source": "recommended",
            "vllm_args": ["--gpu-memory-utilization", "0.55"],
            "env": {},
            "kv_cache_gib": 2.33,
            "inputs": {"tensor_parallel_size": 2},
        },
        "serve": {
            "argv": ["vllm", "serve", "/srv/models/m", "--api-key", "${VLLM_API_KEY}"],
            "gpu_memory_utilization": 0.55,
            "image": "vllm:old",
            "model": "/srv/models/m",
            "served_model_name": "m",
        },
    },
}


def test_the_running_deployment_comes_from_the_heads_record():
    running = up.running_from_record(
        HEAD_RECORD,
        model_revision="r1",
        bench_baseline=BASELINE,
        probe_reference=None,
        now=T0,
        host="spark-1",
    )
    assert running["image_id"] == OLD_ID and running["vllm_version"] == "0.11.0"
    assert running["argv"][:2] == ["vllm", "serve"]
    assert running["launch_inputs"] == {"gpu_memory_utilization": 0.55, "served_model_name": "m"}
    # The plan's choice, not its predictions (they move between runs).
    assert "kv_cache_gib" not in running["plan"] and running["plan"]["vllm_args"]
    assert running["model_path"] == "/srv/models/m" and running["bench_baseline"] == BASELINE
    assert up.same_deployment(running, _deployment())


def test_a_record_without_serve_or_image_id_cannot_be_returned_to():
    with pytest.raises(up.UpgradeRefused, match=r"spark-1: the deployed record has no serve section.*Fix:"):
        up.running_from_record(
            {"sections": {}},
            model_revision=None,
            bench_baseline=None,
            probe_reference=None,
            now=T0,
            host="spark-1",
        )
    no_id = {"sections": dict(HEAD_RECORD["sections"], image={"ref": "vllm:old"})}
    with pytest.raises(up.UpgradeRefused, match=r"spark-1: the image vllm:old has no image ID"):
        up.running_from_record(
            no_id, model_revision=None, bench_baseline=None, probe_reference=None, now=T0, host="spark-1"
        )


def _failed_upgrade():
    doc = up.begin(None, _deployment(), _want(), T0)
    doc = up.finish(doc, up.gate({"healthy": False}, None, None, None, 0.1), None, timings={}, now=T1)
    return up.rolled_back(doc, {"passed": True}, timings={}, now=T1)


def test_the_same_bad_target_again_changes_nothing_and_says_it_was_rolled_back():
    decision = up.plan_upgrade(_failed_upgrade(), _deployment(), _want(), host="spark-1")
    assert decision["action"] == "none" and decision["rolled_back"] is True
    assert "failed its gate and was rolled back" in decision["reason"]


def test_another_target_after_a_rollback_needs_a_confirm_first():
    with pytest.raises(
        up.UpgradeRefused,
        match=r"vllm:new \(model revision r1\) is still kept from the last rollback.*--confirm",
    ):
        up.plan_upgrade(_failed_upgrade(), _deployment(), _want("vllm:third", "sha256:" + "c" * 64), host="h")


def test_begin_refuses_while_a_deployment_is_kept():
    with pytest.raises(up.UpgradeRefused, match="confirm or roll back first"):
        up.begin(_pass_upgrade(), _deployment(), _want("vllm:third", "sha256:" + "c" * 64), T1)


def test_probe_input_from_the_probe_module():
    passed = {
        "identical": True,
        "tokens_sane": True,
        "matches_reference": True,
        "compared_with_reference": True,
        "other_problems": [],
    }
    assert up.probe_input(passed) == GOOD_PROBE
    # No reference of this deployment: the gate warns instead of comparing.
    first = dict(passed, compared_with_reference=False, matches_reference=False)
    assert up.probe_input(first)["matches_reference"] is None
    garbled = dict(passed, identical=False, matches_reference=False)
    verdict = up.gate(HEALTHY, up.probe_input(garbled), None, None, 0.1)
    assert not verdict["passed"] and "identical: no" in verdict["reasons"][0]
    # The module refused before judging (no serve in the record): a failed probe, with its message.
    refused = up.probe_input({"failed": True, "msg": "correctness_probe: the deployed record lacks image_id"})
    assert refused == {
        "identical": False,
        "matches_reference": False,
        "tokens_sane": False,
        "problems": ["correctness_probe: the deployed record lacks image_id"],
    }
    assert up.probe_input(None)["problems"] == ["the correctness probe did not run"]


@pytest.mark.parametrize(
    ("section", "run_ref", "switching", "expected"),
    [
        (None, "vllm:any", False, ""),
        ("steady", "vllm:other", False, ""),
        ("awaiting_confirm", "vllm:new", False, ""),
        ("awaiting_confirm", "vllm:old", True, ""),
        (
            "awaiting_confirm",
            "vllm:old",
            False,
            "spark-1: `sparkops upgrade` made vllm:new the current deployment",
        ),
        (
            "rolled_back",
            "vllm:new",
            False,
            "spark-1: `sparkops upgrade` made vllm:old the current deployment",
        ),
        ("upgrading", "vllm:old", False, "spark-1: an upgrade to vllm:new was interrupted before its gate"),
    ],
)
def test_deploy_guard(section, run_ref, switching, expected):
    sections = {
        None: None,
        "steady": up.confirmed(_pass_upgrade(), now=T1),
        "awaiting_confirm": _pass_upgrade(),
        "rolled_back": up.rolled_back(_pass_upgrade(), {"passed": True}, timings={}, now=T1),
        "upgrading": up.begin(None, _deployment(), _want(), T0),
    }
    message = up.deploy_guard(sections[section], run_ref, switching=switching, host="spark-1")
    assert message.startswith(expected)
    assert (not message) or "Fix:" in message


# -- what an upgrade asks for: the image for a vLLM version, the references and revisions it takes ----------

TEMPLATE = "example/vllm-spark:{version}"

IMAGE_FOR_VERSION_CASES = [
    # id, version, template, image
    ("release", "0.17.1", TEMPLATE, "example/vllm-spark:0.17.1"),
    ("release candidate", "0.11.0rc1", TEMPLATE, "example/vllm-spark:0.11.0rc1"),
    ("post release", "0.10.1.post1", TEMPLATE, "example/vllm-spark:0.10.1.post1"),
    (
        "prefix in the tag",
        "0.17.1",
        "example/vllm-spark:v{version}-cu130",
        "example/vllm-spark:v0.17.1-cu130",
    ),
    (
        "registry with a port",
        "0.17.1",
        "registry.lab:5000/vllm/spark:{version}",
        "registry.lab:5000/vllm/spark:0.17.1",
    ),
    ("version in the repository", "0.17.1", "example/vllm-{version}:spark", "example/vllm-0.17.1:spark"),
]


@pytest.mark.parametrize(
    ("version", "template", "image"),
    [case[1:] for case in IMAGE_FOR_VERSION_CASES],
    ids=[case[0] for case in IMAGE_FOR_VERSION_CASES],
)
def test_image_for_version(version, template, image):
    assert up.image_for_version(version, template, host="spark-1") == image
    assert up.valid_image_reference(image)


IMAGE_FOR_VERSION_REFUSALS = [
    # id, version, template, what the message must say (host, value and fix)
    (
        "empty template",
        "0.17.1",
        "",
        r"spark-1: upgrade_image_ref_template is empty, so the vLLM version 0.17.1 names no image\. "
        r"Fix: set upgrade_image_ref_template in the inventory, or give --image",
    ),
    ("no template", "0.17.1", None, r"Fix: set upgrade_image_ref_template in the inventory, or give --image"),
    ("blank template", "0.17.1", "  ", r"upgrade_image_ref_template is empty"),
    (
        "no placeholder",
        "0.17.1",
        "example/vllm-spark:latest",
        r"spark-1: upgrade_image_ref_template 'example/vllm-spark:latest' must hold \{version\} exactly once.*Fix:",
    ),
    ("placeholder twice", "0.17.1", "example/{version}:{version}", r"must hold \{version\} exactly once"),
    ("another placeholder", "0.17.1", "example/{name}:{version}", r"and no other brace"),
    ("a stray brace", "0.17.1", "example/vllm:{version}}", r"and no other brace"),
    ("misspelt placeholder", "0.17.1", "example/vllm:{Version}", r"must hold \{version\} exactly once"),
    ("not a string", "0.17.1", ["example/vllm:{version}"], r"must hold \{version\} exactly once"),
    (
        "upper-case repository",
        "0.17.1",
        "example/VLLM:{version}",
        r"spark-1: upgrade_image_ref_template 'example/VLLM:\{version\}' with the vLLM version 0\.17\.1 gives "
        r"'example/VLLM:0\.17\.1', which is not a Docker image reference.*Fix: correct upgrade_image_ref_template",
    ),
    ("whitespace", "0.17.1", "example/vllm spark:{version}", r"is not a Docker image reference"),
    ("two tags", "0.17.1", "example/vllm:spark:{version}", r"is not a Docker image reference"),
    ("version in a digest", "0.17.1", "example/vllm@sha256:{version}", r"is not a Docker image reference"),
    (
        "leading v",
        "v0.17.1",
        TEMPLATE,
        r"spark-1: the vLLM version 'v0.17.1' is not a vLLM release version.*Fix: .*--vllm-version 0\.17\.1",
    ),
    ("no patch", "0.17", TEMPLATE, r"'0.17' is not a vLLM release version"),
    ("a word", "latest", TEMPLATE, r"'latest' is not a vLLM release version"),
    ("a local label", "0.17.1+cu130", TEMPLATE, r"is not a vLLM release version"),
    ("trailing space", "0.17.1 ", TEMPLATE, r"is not a vLLM release version"),
    ("an option", "--help", TEMPLATE, r"is not a vLLM release version"),
    ("empty version", "", TEMPLATE, r"the vLLM version nothing is not a vLLM release version"),
    ("no version", None, TEMPLATE, r"the vLLM version nothing is not a vLLM release version"),
]


@pytest.mark.parametrize(
    ("version", "template", "message"),
    [case[1:] for case in IMAGE_FOR_VERSION_REFUSALS],
    ids=[case[0] for case in IMAGE_FOR_VERSION_REFUSALS],
)
def test_image_for_version_refusals_name_host_value_and_fix(version, template, message):
    with pytest.raises(up.UpgradeRefused, match=message) as exc:
        up.image_for_version(version, template, host="spark-1")
    assert str(exc.value).startswith("spark-1: ") and "Fix: " in str(exc.value)


IMAGE_REFERENCES = [
    ("vllm", True),
    ("example/vllm-spark:0.17.1", True),
    ("nvcr.io/nvidia/vllm:25.09-py3", True),
    ("localhost:5000/sparkops/vllm-lab:new", True),
    ("[::1]:5000/vllm:x", True),
    ("example/vllm@sha256:" + "a" * 64, True),
    ("example/vllm:0.17.1@sha256:" + "a" * 64, True),
    ("a__b/c.d-e:TAG_1.x", True),
    ("example/vllm:" + "t" * 128, True),
    ("example/vllm:" + "t" * 129, False),
    ("example/" + "v" * 247, True),  # the name at Docker's 255 characters
    ("example/" + "v" * 248, False),
    ("", False),
    (None, False),
    ("example/Vllm:1", False),
    ("example/vllm:", False),
    (":tag", False),
    ("example/vllm::1", False),
    ("example//vllm", False),
    ("example/vllm/", False),
    ("-example/vllm", False),
    ("example/a___b", False),
    ("example/vllm:-tag", False),
    ("example/vllm@sha256:abc", False),
    ("example/vllm:1 ", False),
    ("example/vllm:1\n", False),
]


@pytest.mark.parametrize(("ref", "valid"), IMAGE_REFERENCES)
def test_image_references_as_docker_takes_them(ref, valid):
    assert up.valid_image_reference(ref) is valid


def test_the_version_rule_is_the_inventorys():
    from ansible_collections.sparkops.vllm.plugins.module_utils import _inventory_contract  # noqa: PLC0415

    assert up.VLLM_VERSION is _inventory_contract.VLLM_VERSION
    assert up.valid_vllm_version("0.17.1") and not up.valid_vllm_version(17)


MODEL_REVISIONS = [
    ("main", True),
    ("v1.0", True),
    ("release-2026_12", True),
    ("refs/pr/3", True),
    ("0123456789abcdef0123456789abcdef01234567", True),
    ("", False),
    (None, False),
    ("-main", False),
    ("--force", False),
    ("../main", False),
    ("a..b", False),
    ("main branch", False),
    (" main", False),
    ("main\n", False),
    ("ma\tin", False),
    ("ma\x00in", False),
    ("ma\x1bin", False),
    ("ma\x7fin", False),
    ("main\u00a0", False),
    ("main\u2028x", False),
    ("/main", False),
    ("main/", False),
    ("refs//pr", False),
    ("main.", False),
    ("main.lock", False),
    ("main@{1}", False),
    ("main~1", False),
    ("main^", False),
    ("a:b", False),
    ("a?b", False),
    ("a*b", False),
    ("a[b", False),
    ("a\\b", False),
]


@pytest.mark.parametrize(("revision", "valid"), MODEL_REVISIONS)
def test_model_revisions(revision, valid):
    assert up.valid_model_revision(revision) is valid


def test_downtime_line_of_an_upgrade_that_never_answered_counts_until_the_rollback_answered():
    attempt = {
        "kind": "upgrade",
        "serve_stopped_at": "2026-12-04T14:01:00Z",
        "first_healthy_at": None,
        "downtime_seconds": None,
        "rollback_serve_stopped_at": "2026-12-04T14:03:00Z",
        "rollback_first_healthy_at": "2026-12-04T14:04:00Z",
        "rollback_downtime_seconds": 60.0,
    }
    line = up.downtime_line(attempt)
    assert line.startswith("The endpoint was down upgrade: never healthy, rollback: 60.0 s, in all: 180.0 s")
