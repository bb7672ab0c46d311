# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The upgrade's gate, record readers and image for a version (plugins/module_utils/_upgrade.py, docs/upgrades.md)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkops.vllm.plugins.module_utils import _upgrade
from ansible_collections.sparkops.vllm.plugins.module_utils._cluster_memory_plan import release_of


def upgrade_gate(health, probe, bench, baseline, tolerance):
    """``{passed, reasons, warnings, checks}`` for a deployment's health, probe and benchmark results."""
    try:
        return _upgrade.gate(health, probe, bench, baseline, float(tolerance))
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"upgrade_gate: {exc}") from None


def upgrade_kept_images(section):
    """The image references every node keeps for a rollback, from the head's ``upgrade`` section."""
    return _upgrade.kept_images(section)


def upgrade_decide(
    section,
    head_record,
    command,
    want_ref="",
    want_id="",
    *,
    host="the head",
    require_id=True,
    model_revision="",
):
    """What upgrade.yml or rollback.yml does: ``{action, reason, refused, running, want, to, remove, remove_models}``.

    ``command``: ``upgrade``, ``confirm`` or ``rollback``. ``model_revision``: the Hugging Face
    revision an upgrade asks for (``upgrade_model_revision``; empty keeps the deployment's model);
    ``want`` then holds the target with its model directory beside the current one. A refusal
    is not raised: ``refused`` holds the message (host, value, fix), so the play fails with it
    before anything changes.
    """
    out = {
        "action": "none",
        "reason": "",
        "refused": "",
        "running": None,
        "want": None,
        "want_label": "",
        "to": None,
        "remove": [],
        "remove_models": [],
    }
    try:
        if command == "confirm":
            out.update(_upgrade.plan_confirm(section, host=host))
        elif command == "rollback":
            out.update(_upgrade.plan_rollback(section, host=host))
        elif command == "upgrade":
            running = _upgrade.running_from_record(
                head_record or {},
                model_revision=None,
                bench_baseline=None,
                probe_reference=None,
                now=_upgrade.utc_now(),
                host=host,
            )
            model = _upgrade.model_target(section, running, str(model_revision or "") or None, host=host)
            # A model revision alone keeps the image the deployment runs (the record's, by ID).
            keep_image = not want_ref and bool(model_revision)
            want = _upgrade.target(
                image_ref=str(running["image_ref"] if keep_image else want_ref or ""),
                image_id=str(running["image_id"] if keep_image else want_id or ""),
                model_path=model["model_path"],
                model_revision=model["model_revision"],
            )
            out["running"] = running
            out["want"] = want
            out["want_label"] = _upgrade.label(want)
            out.update(_upgrade.plan_upgrade(section, running, want, host=host, require_id=bool(require_id)))
        else:
            raise _upgrade.UpgradeRefused(
                f"{host}: upgrade_command is upgrade or confirm (is {command!r}). Fix: `sparkops upgrade --image "
                "REPO:TAG` or `sparkops upgrade --confirm`."
            )
    except _upgrade.UpgradeRefused as exc:
        out.update(action="refused", refused=str(exc))
    # The release a rollback plans for: the one the returned-to image holds.
    out["to_vllm_version"] = release_of((out.get("to") or {}).get("vllm_version"))
    return out


def upgrade_running(head_record, host="the head", bench_baseline=None, probe_reference=None, now=None):
    """The deployment the head's deployed record describes, with what was measured on it."""
    try:
        return _upgrade.running_from_record(
            head_record or {},
            model_revision=None,
            bench_baseline=bench_baseline or None,
            probe_reference=probe_reference or None,
            now=now or _upgrade.utc_now(),
            host=host,
        )
    except _upgrade.UpgradeRefused as exc:
        raise AnsibleFilterError(str(exc)) from None


def upgrade_transition(section, step, now, *, verdict=None, new=None, timings=None, running=None, want=None):
    """The ``upgrade`` section after ``step``: begin, finish, rolled_back or confirmed (docs/upgrades.md)."""
    try:
        if step == "begin":
            return _upgrade.begin(section, running, want, now)
        if step == "finish":
            return _upgrade.finish(section, verdict or {}, new, timings=timings or {}, now=now)
        if step == "rolled_back":
            return _upgrade.rolled_back(section, verdict or {}, timings=timings or {}, now=now)
        if step == "confirmed":
            return _upgrade.confirmed(section, now=now)
    except (_upgrade.UpgradeRefused, ValueError) as exc:
        raise AnsibleFilterError(f"upgrade_transition {step}: {exc}") from None
    raise AnsibleFilterError(f"upgrade_transition: unknown step {step!r}")


def upgrade_probe_input(result):
    """The gate's probe input from the correctness_probe module's registered result, failed or not."""
    return _upgrade.probe_input(result)


def upgrade_deploy_guard(section, run_ref, switching=False, host="the head"):
    """ "" when deploy.yml may run ``run_ref`` beside the ``upgrade`` section; else why not and the fix."""
    return _upgrade.deploy_guard(section, str(run_ref or ""), switching=bool(switching), host=host)


def upgrade_model_guard(section, model_path, model_revision="", switching=False, host="the head"):
    """ "" when deploy.yml may serve ``model_path`` (revision) beside the ``upgrade`` section; else why not and the fix."""
    return _upgrade.deploy_model_guard(
        section,
        str(model_path or ""),
        str(model_revision or "") or None,
        switching=bool(switching),
        host=host,
    )


def upgrade_model_disk_check(path, present, avail_bytes, model_bytes, margin_bytes, *, host="the head"):
    """ "" when the head has room to download a revision into ``path``; else why not and the fix (an estimate)."""
    return _upgrade.model_disk_check(
        host=str(host),
        path=str(path),
        present=bool(present),
        avail_bytes=avail_bytes,
        model_bytes=model_bytes,
        margin_bytes=margin_bytes,
    )


def upgrade_revision_path(model_path, revision, host="the head"):
    """The directory of a model revision beside ``model_path`` (``<parent>/<name>.rev-<revision>``)."""
    try:
        return _upgrade.revision_path(str(model_path or ""), str(revision or ""), host=str(host))
    except _upgrade.UpgradeRefused as exc:
        raise AnsibleFilterError(f"upgrade_revision_path: {exc}") from None


def upgrade_inventory_followup(section):
    """The report's line: which inventory values make deploy.yml serve what the upgrade made current."""
    return _upgrade.inventory_followup(section)


def upgrade_downtime_line(attempt):
    """The sentence an upgrade or rollback ends with: how long the endpoint was down."""
    return _upgrade.downtime_line(attempt)


def upgrade_section(section):
    """The ``upgrade`` section with every key (phase, current, previous, discarded, attempt), empty ones
    ``none``: a record never upgraded has no section at all."""
    return _upgrade.load(section)


def upgrade_node_images(section):
    """Every node's ``upgrade_images`` section from the head's ``upgrade`` section."""
    return _upgrade.node_images(section)


def upgrade_image_for_version(version, template, host):
    """The image ``--vllm-version`` asks for: the inventory's ``upgrade_image_ref_template`` with the version in it."""
    try:
        return _upgrade.image_for_version(version, template, host=str(host))
    except _upgrade.UpgradeRefused as exc:
        raise AnsibleFilterError(f"upgrade_image_for_version: {exc}") from None


class FilterModule:
    """sparkops.vllm upgrade filters."""

    def filters(self):
        return {
            "upgrade_gate": upgrade_gate,
            "upgrade_kept_images": upgrade_kept_images,
            "upgrade_decide": upgrade_decide,
            "upgrade_running": upgrade_running,
            "upgrade_transition": upgrade_transition,
            "upgrade_probe_input": upgrade_probe_input,
            "upgrade_deploy_guard": upgrade_deploy_guard,
            "upgrade_downtime_line": upgrade_downtime_line,
            "upgrade_node_images": upgrade_node_images,
            "upgrade_section": upgrade_section,
            "upgrade_image_for_version": upgrade_image_for_version,
            "upgrade_model_guard": upgrade_model_guard,
            "upgrade_model_disk_check": upgrade_model_disk_check,
            "upgrade_revision_path": upgrade_revision_path,
            "upgrade_inventory_followup": upgrade_inventory_followup,
        }
