"""Model revisions through the upgrade: their directories, the decisions, the disk, confirm, the guard (docs/upgrades.md)."""

import posixpath

import pytest
from ansible_collections.sparkops.vllm.plugins.filter import upgrade as filters
from ansible_collections.sparkops.vllm.plugins.module_utils import _teardown as teardown
from ansible_collections.sparkops.vllm.plugins.module_utils import _upgrade as up

T0 = "2026-12-04T14:00:00Z"
T1 = "2026-12-04T14:05:00Z"
OLD_ID = "sha256:" + "a" * 64
NEW_ID = "sha256:" + "b" * 64
MODEL = "/srv/models/m"
HEALTHY = {"healthy": True, "detail": "ok"}
PROBE = {"identical": True, "matches_reference": None, "tokens_sane": True, "problems": []}
TIMES = {"serve_stopped_at": "2026-12-04T14:01:00Z", "first_healthy_at": "2026-12-04T14:03:00Z"}


def _deployment(ref="vllm:old", image_id=OLD_ID, path=MODEL, revision=None):
    return up.deployment(
        image_ref=ref,
        image_id=image_id,
        vllm_version="0.11.0",
        argv=["vllm", "serve", path],
        launch_inputs={},
        plan={},
        model_path=path,
        model_revision=revision,
        bench_baseline=None,
        probe_reference=None,
        recorded_at=T0,
    )


def _record(path=MODEL, revision=None, ref="vllm:old", image_id=OLD_ID):
    serve = {"argv": ["vllm", "serve", path], "image": ref, "model": path}
    if revision:
        serve["model_revision"] = revision
    return {"sections": {"image": {"ref": ref, "id": image_id, "vllm_version": "0.11.0"}, "serve": serve}}


# -- the revision's directory ------------------------------------------------------


@pytest.mark.parametrize(
    ("revision", "expected"),
    [
        ("lab-rev2", "/srv/models/m.rev-lab-rev2"),
        ("main", "/srv/models/m.rev-main"),
        ("v1.0", "/srv/models/m.rev-v1.0"),
        ("a" * 40, "/srv/models/m.rev-" + "a" * 40),
        ("under_score", "/srv/models/m.rev-under_score"),
    ],
)
def test_a_safe_revision_keeps_its_exact_name_beside_the_model(revision, expected):
    assert up.revision_path(MODEL, revision) == expected


@pytest.mark.parametrize(
    "revision",
    ["refs/pr/3", "feature/x", "a/b", "ünïcödé", "x" * 65, ".hidden", "v1.0/rc", "a b".replace(" ", "+")],
)
def test_an_unsafe_revision_becomes_a_slug_and_the_hash_of_the_exact_revision(revision):
    path = up.revision_path(MODEL, revision)
    assert posixpath.dirname(path) == "/srv/models"
    name = posixpath.basename(path)
    assert name.startswith("m.rev-")
    component = name[len("m.rev-") :]
    if up.revision_component(revision) != revision:
        assert "~" in component and len(component.rsplit("~", 1)[1]) == up.REVISION_HASH_CHARS
        assert "/" not in component and component not in (".", "..")
    assert up.revision_path(MODEL, revision) == path  # deterministic


def test_revisions_that_slug_alike_do_not_collide():
    paths = {up.revision_path(MODEL, rev) for rev in ("refs/pr/3", "refs-pr-3", "refs/pr-3", "refs-pr/3")}
    assert len(paths) == 4


@pytest.mark.parametrize(
    "revision",
    [
        "../x",
        "/abs",
        "..",
        ".",
        "-rf",
        "",
        "a/../b",
        "main\n",
        "a//b",
        "x/",
        "ref.lock",
        "a:b",
        "a~1",
        "@{u}",
    ],
)
def test_a_hostile_revision_is_refused_with_host_value_and_fix(revision):
    with pytest.raises(
        up.UpgradeRefused, match=r"spark-1: upgrade_model_revision .* is not a Hugging Face revision.*Fix:"
    ):
        up.revision_path(MODEL, revision, host="spark-1")


@pytest.mark.parametrize("model_path", ["", "relative/m", "/", None])
def test_a_model_path_that_is_not_an_absolute_directory_is_refused(model_path):
    with pytest.raises(up.UpgradeRefused, match=r"spark-1: the model path .* Fix: set sparkops_model_path"):
        up.revision_path(model_path, "main", host="spark-1")


@pytest.mark.parametrize(
    ("model_path", "revision", "expected"),
    [
        # A revision of a revision's directory is a sibling of the original, not m.rev-a.rev-b.
        ("/srv/models/m.rev-a", "b", "/srv/models/m.rev-b"),
        ("/srv/models/m/", "b", "/srv/models/m.rev-b"),
        # A leading ".rev-" is a name, not a suffix.
        ("/srv/models/.rev-x", "b", "/srv/models/.rev-x.rev-b"),
    ],
)
def test_the_base_name_is_the_model_without_a_revision_suffix(model_path, revision, expected):
    assert up.revision_path(model_path, revision) == expected


def test_every_revision_path_stays_in_the_models_parent():
    for revision in ("main", "refs/pr/3", "ü/ö", "x" * 200, "v" + "." * 3 + "x"):
        if up.valid_model_revision(revision):
            assert posixpath.dirname(up.revision_path(MODEL, revision)) == "/srv/models"


# -- decisions -----------------------------------------------------------------------


def _decide(section, record, ref="vllm:old", image_id=OLD_ID, revision=""):
    return filters.upgrade_decide(
        section, record, "upgrade", ref, image_id, host="spark-1", require_id=False, model_revision=revision
    )


@pytest.mark.parametrize(
    ("ref", "image_id", "revision", "expected"),
    [
        # A revision alone, with the current image.
        ("vllm:old", OLD_ID, "lab-rev2", ("upgrade", "/srv/models/m.rev-lab-rev2", "lab-rev2")),
        # An image and a revision: one switch changes both.
        ("vllm:new", "", "lab-rev2", ("upgrade", "/srv/models/m.rev-lab-rev2", "lab-rev2")),
        # An image alone keeps the model.
        ("vllm:new", "", "", ("upgrade", MODEL, None)),
        # Nothing new: nothing to do.
        ("vllm:old", OLD_ID, "", ("none", MODEL, None)),
    ],
)
def test_an_upgrade_decides_the_model_beside_the_current_one(ref, image_id, revision, expected):
    action, want_path, want_revision = expected
    decision = _decide(None, _record(), ref, image_id, revision)
    assert decision["action"] == action, decision
    assert decision["want"]["model_path"] == want_path
    assert decision["want"]["model_revision"] == want_revision


def test_the_revision_that_serves_already_is_nothing_to_do():
    record = _record("/srv/models/m.rev-lab-rev2", "lab-rev2")
    decision = _decide(None, record, revision="lab-rev2")
    assert decision["action"] == "none" and "current deployment already" in decision["reason"]
    assert decision["want"]["model_path"] == "/srv/models/m.rev-lab-rev2"


def test_a_hostile_revision_is_refused_at_the_decision():
    decision = _decide(None, _record(), revision="../etc")
    assert (
        decision["action"] == "refused"
        and "spark-1:" in decision["refused"]
        and "Fix:" in decision["refused"]
    )


def test_a_directory_already_named_like_the_revision_is_refused():
    decision = _decide(None, _record("/srv/models/m.rev-x"), revision="x")
    assert decision["action"] == "refused" and "without the '.rev-' suffix" in decision["refused"]


def _revision_upgrade():
    running = _deployment()
    want = up.target(
        image_ref="vllm:old", image_id=OLD_ID, model_path="/srv/models/m.rev-r2", model_revision="r2"
    )
    doc = up.begin(None, running, want, T0)
    verdict = up.gate(HEALTHY, PROBE, None, None, 0.1)
    new = _deployment(path="/srv/models/m.rev-r2", revision="r2")
    return up.finish(doc, verdict, new, timings=TIMES, now=T1)


def test_a_passed_revision_upgrade_keeps_both_directories_on_every_node():
    doc = _revision_upgrade()
    assert doc["phase"] == up.AWAITING_CONFIRM
    assert up.kept_model_paths(doc) == ["/srv/models/m.rev-r2", MODEL]
    assert up.node_images(doc)["kept_models"] == ["/srv/models/m.rev-r2", MODEL]
    assert up.node_images(doc)["kept"] == ["vllm:old"]


def test_an_interrupted_revision_upgrade_keeps_its_target_directory_and_resumes():
    running = _deployment()
    want = up.target(
        image_ref="vllm:old", image_id=OLD_ID, model_path="/srv/models/m.rev-r2", model_revision="r2"
    )
    doc = up.begin(None, running, want, T0)
    assert up.kept_model_paths(doc) == [MODEL, "/srv/models/m.rev-r2"]
    decision = _decide(doc, _record(), revision="r2")
    assert decision["action"] == "resume"
    other = _decide(doc, _record(), revision="r3")
    assert other["action"] == "refused" and "r2" in other["refused"]


def test_a_rollback_returns_to_the_recorded_model_directory():
    decision = up.plan_rollback(_revision_upgrade(), host="spark-1")
    assert decision["action"] == "rollback"
    assert decision["to"]["model_path"] == MODEL and decision["to"]["model_revision"] is None


@pytest.mark.parametrize(
    ("after", "remove_models"),
    [
        # Confirm after a passed upgrade: the previous deployment's directory goes.
        ("passed", [MODEL]),
        # Confirm after a rollback: the discarded revision's directory goes.
        ("rolled_back", ["/srv/models/m.rev-r2"]),
    ],
)
def test_confirm_removes_the_kept_model_directory_never_the_current(after, remove_models):
    doc = _revision_upgrade()
    if after == "rolled_back":
        doc = up.rolled_back(doc, {"passed": True}, timings=TIMES, now=T1)
    decision = up.plan_confirm(doc, host="spark-1")
    assert decision["action"] == "confirm" and decision["remove_models"] == remove_models
    manifest = posixpath.join(posixpath.dirname(remove_models[0]), f".{posixpath.basename(remove_models[0])}")
    assert decision["remove_model_files"] == [remove_models[0], manifest + ".sparkops-manifest.json"]
    assert decision["remove"] == []  # same image: no image goes
    assert (doc["current"] or {})["model_path"] not in decision["remove_models"]
    done = up.confirmed(doc, now=T1)
    again = up.plan_confirm(done, host="spark-1")
    assert again["action"] == "none" and again["remove_models"] == []


@pytest.mark.parametrize(
    "kept_path",
    [
        "/etc",
        "/srv/other/m.rev-r2",
        "/srv/models/../etc",
        "relative",
        "/srv/models/m.rev-r2/..",
        "/srv/models/sub/x",
    ],
)
def test_confirm_refuses_a_kept_path_outside_the_models_parent(kept_path):
    doc = _revision_upgrade()
    doc["previous"]["model_path"] = kept_path
    with pytest.raises(up.UpgradeRefused, match=r"spark-1: the kept deployment's model directory .* Fix:"):
        up.plan_confirm(doc, host="spark-1")


def test_an_image_only_upgrade_removes_no_model_directory():
    running = _deployment()
    want = up.target(image_ref="vllm:new", image_id=NEW_ID, model_path=MODEL, model_revision=None)
    doc = up.begin(None, running, want, T0)
    doc = up.finish(
        doc, up.gate(HEALTHY, PROBE, None, None, 0.1), _deployment("vllm:new", NEW_ID), timings=TIMES, now=T1
    )
    decision = up.plan_confirm(doc, host="spark-1")
    assert decision["remove"] == ["vllm:old"] and decision["remove_models"] == []


def test_the_running_deployment_reads_its_revision_from_the_serve_section():
    running = up.running_from_record(
        _record("/srv/models/m.rev-r2", "r2"),
        model_revision=None,
        bench_baseline=None,
        probe_reference=None,
        now=T0,
        host="spark-1",
    )
    assert running["model_path"] == "/srv/models/m.rev-r2" and running["model_revision"] == "r2"


# -- the disk, checked first --------------------------------------------------------

GIB = 1024**3


@pytest.mark.parametrize(
    ("present", "avail", "size", "margin", "ok"),
    [
        (False, 12 * GIB, 10 * GIB, GIB, True),
        (False, 11 * GIB, 10 * GIB, GIB, True),
        (False, 11 * GIB - 1, 10 * GIB, GIB, False),
        (False, 5 * GIB, 10 * GIB, 0, False),
        # Downloaded already: nothing to download, nothing to check.
        (True, 0, 10 * GIB, GIB, True),
    ],
)
def test_the_head_needs_room_for_the_revision_estimated_at_the_current_models_size(
    present, avail, size, margin, ok
):
    problem = up.model_disk_check(
        host="spark-1",
        path="/srv/models/m.rev-r2",
        present=present,
        avail_bytes=avail,
        model_bytes=size,
        margin_bytes=margin,
    )
    assert (problem == "") is ok
    if not ok:
        for part in (
            "spark-1:",
            "/srv/models has",
            str(avail),
            str(size + margin),
            "estimated",
            "Fix:",
            "--confirm",
        ):
            assert part in problem


@pytest.mark.parametrize(("avail", "size"), [(None, GIB), ("x", GIB), (GIB, None), (GIB, 0)])
def test_an_unknown_size_or_free_space_is_refused_not_passed(avail, size):
    problem = up.model_disk_check(
        host="spark-1",
        path="/srv/models/m.rev-r2",
        present=False,
        avail_bytes=avail,
        model_bytes=size,
        margin_bytes=0,
    )
    assert problem.startswith("spark-1:") and "Fix:" in problem


# -- deploy.yml beside an upgrade ----------------------------------------------------


@pytest.mark.parametrize(
    ("section", "path", "revision", "switching", "allowed"),
    [
        (None, "/srv/models/anything", "x", False, True),  # never upgraded: the inventory rules
        ("awaiting", "/srv/models/m.rev-r2", "r2", False, True),  # the current deployment's model
        ("awaiting", MODEL, "", False, False),  # the kept one behind the gate
        ("awaiting", "/srv/models/m.rev-r2", "", False, False),  # the right path, another revision
        ("awaiting", MODEL, "", True, True),  # upgrade.yml / rollback.yml
        ("upgrading", "/srv/models/m.rev-r2", "r2", False, False),
        ("steady", MODEL, "", False, True),
    ],
)
def test_deploy_does_not_move_the_model_behind_the_gate(section, path, revision, switching, allowed):
    doc = {
        None: None,
        "awaiting": _revision_upgrade(),
        "upgrading": up.begin(
            None,
            _deployment(),
            up.target(
                image_ref="vllm:old", image_id=OLD_ID, model_path="/srv/models/m.rev-r2", model_revision="r2"
            ),
            T0,
        ),
        "steady": up.confirmed(_revision_upgrade(), now=T1),
    }[section]
    problem = filters.upgrade_model_guard(doc, path, revision, switching, "spark-1")
    assert (problem == "") is allowed
    if not allowed:
        assert problem.startswith("spark-1:") and "Fix:" in problem


def test_a_deployment_recorded_without_a_revision_is_told_by_its_path():
    running = _deployment()
    want = up.target(image_ref="vllm:new", image_id=NEW_ID, model_path=MODEL, model_revision=None)
    doc = up.begin(None, running, want, T0)
    doc = up.finish(
        doc, up.gate(HEALTHY, PROBE, None, None, 0.1), _deployment("vllm:new", NEW_ID), timings=TIMES, now=T1
    )
    assert up.deploy_model_guard(doc, MODEL, "main", switching=False, host="spark-1") == ""
    assert up.deploy_model_guard(doc, "/srv/models/other", "main", switching=False, host="spark-1") != ""


def test_the_guard_names_the_inventory_values_to_set():
    problem = up.deploy_model_guard(_revision_upgrade(), MODEL, None, switching=False, host="spark-1")
    assert (
        "sparkops_model_path to /srv/models/m.rev-r2" in problem and "model_sync_hf_revision to r2" in problem
    )


def test_the_report_names_the_inventory_values_after_an_upgrade():
    line = up.inventory_followup(_revision_upgrade())
    for part in (
        "vllm_image_ref: vllm:old",
        "sparkops_model_path: /srv/models/m.rev-r2",
        "model_sync_hf_revision: r2",
    ):
        assert part in line
    assert up.inventory_followup(None) == ""


# -- teardown and the kept model directories ----------------------------------------

DIR = {"exists": True, "isdir": True, "islnk": False}
MANIFEST = {"exists": True, "isreg": True, "islnk": False}
LINK = {"exists": True, "islnk": True, "lnk_source": "/srv/models/hf-cache/x"}
ABSENT = {"exists": False}


def test_teardown_stats_each_kept_directory_and_its_manifest():
    assert teardown.kept_model_files(["/srv/models/m.rev-r2"]) == [
        "/srv/models/m.rev-r2",
        "/srv/models/.m.rev-r2.sparkops-manifest.json",
    ]


@pytest.mark.parametrize(
    ("stats", "removed", "kept"),
    [
        ([DIR, MANIFEST], ["/srv/models/.m.rev-r2.sparkops-manifest.json", "/srv/models/m.rev-r2"], 0),
        ([DIR, ABSENT], [], 1),  # no manifest: not the project's copy
        ([LINK, MANIFEST], [], 1),  # a link is never followed
        ([ABSENT, ABSENT], [], 0),  # gone already: nothing to do
    ],
)
def test_teardown_removes_a_kept_directory_only_by_the_models_rule(stats, removed, kept):
    decision = teardown.kept_model_removal(["/srv/models/m.rev-r2"], stats)
    assert decision["remove"] == removed and len(decision["kept"]) == kept
