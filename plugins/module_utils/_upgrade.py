# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Upgrades and rollbacks of a deployment: the record, the transitions, the gate (docs/upgrades.md).

The head's deployed record (``deployed.json``, docs/deployed-record.md) holds an
``upgrade`` section: the ``current`` deployment, the ``previous`` one whose image
every node keeps until ``sparkops upgrade --confirm``, a ``discarded`` one (the
deployment a rollback left, its image kept until the same confirm), the
``phase``, and the last ``attempt`` with its gate verdict and measured downtime.

Everything here is pure: the playbooks read the record, call these functions
with what they measured, and write back what they return. The gate takes the
health check, the correctness probe and the benchmark as plain dicts whose keys
are named in ``HEALTH_KEYS``, ``PROBE_KEYS`` and ``BENCH_KEYS``.
"""

from __future__ import annotations

import copy
import hashlib
import posixpath
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ansible_collections.sparkops.vllm.plugins.module_utils._inventory_contract import VLLM_VERSION
from ansible_collections.sparkops.vllm.plugins.module_utils._layout import manifest_beside

SECTION = "upgrade"
# Every node's record (workers included) keeps which images it must hold for a rollback.
NODE_SECTION = "upgrade_images"

# The phases of the section, and what each means.
STEADY = "steady"  # one deployment; nothing kept for a rollback
UPGRADING = "upgrading"  # an attempt started and has not been gated yet (an interrupted run)
AWAITING_CONFIRM = "awaiting_confirm"  # the target passed the gate; the previous image is kept
ROLLED_BACK = "rolled_back"  # back on the recorded deployment; the abandoned image is kept
PHASES = (STEADY, UPGRADING, AWAITING_CONFIRM, ROLLED_BACK)

# The keys of one deployment (current, previous, discarded).
DEPLOYMENT_KEYS = (
    "image_ref",
    "image_id",
    "vllm_version",
    "argv",
    "launch_inputs",
    "plan",
    "model_path",
    "model_revision",
    "bench_baseline",
    "probe_reference",
    "recorded_at",
)
# The keys that make two deployments the same deployment (what a rerun compares).
IDENTITY_KEYS = ("image_id", "model_path", "model_revision")

# The gate's inputs, as plain dicts (docs/upgrades.md, "The gate's interface").
HEALTH_KEYS = ("healthy", "detail")
PROBE_KEYS = ("identical", "matches_reference", "tokens_sane", "problems")
BENCH_KEYS = ("levels",)
BENCH_LEVEL_KEYS = ("concurrency", "output_tokens_per_s", "errors")


class UpgradeRefused(ValueError):
    """An upgrade, rollback or confirm that cannot start: the message names host, value and fix."""


def utc_now() -> str:
    """The controller's clock as the record writes times: ISO 8601, UTC, seconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now_ok(now: str) -> str:
    parse_time(now)
    return now


def parse_time(value: str) -> datetime:
    """A recorded UTC time (``2026-12-04T14:40:00Z``, fractions allowed) as an aware datetime."""
    if not isinstance(value, str) or not value.endswith("Z"):
        raise ValueError(f"a recorded time is UTC ending in Z, not {value!r}")
    return datetime.fromisoformat(value[:-1]).replace(tzinfo=UTC)


def empty() -> dict[str, Any]:
    """The section of a cluster that has never been upgraded."""
    return {"phase": STEADY, "current": None, "previous": None, "discarded": None, "attempt": None}


def load(section: Mapping[str, Any] | None) -> dict[str, Any]:
    """The section as stored (``_deployed_record.section(doc, SECTION)``), or an empty one.

    A section with an unknown phase is read as empty, like a record of another schema.
    """
    if not isinstance(section, Mapping) or section.get("phase") not in PHASES:
        return empty()
    doc = empty()
    for key in doc:
        if key in section:
            doc[key] = copy.deepcopy(section[key])
    return doc


def deployment(
    *,
    image_ref: str,
    image_id: str,
    vllm_version: str | None,
    argv: list[str],
    launch_inputs: Mapping[str, Any],
    plan: Mapping[str, Any],
    model_path: str,
    model_revision: str | None,
    bench_baseline: Mapping[str, Any] | None,
    probe_reference: Mapping[str, Any] | None,
    recorded_at: str,
) -> dict[str, Any]:
    """One recorded deployment; refuses what a rollback could not return to (no image ID, no argv)."""
    if not image_ref or not isinstance(image_ref, str):
        raise UpgradeRefused(f"a deployment needs its image reference, not {image_ref!r}")
    if not isinstance(image_id, str) or not image_id.startswith("sha256:"):
        raise UpgradeRefused(
            f"the image {image_ref} has no image ID ({image_id!r}); a rollback checks images by ID. "
            "Fix: deploy the cluster (deploy.yml) so every node's record holds its image ID, then upgrade."
        )
    if not argv or not all(isinstance(arg, str) for arg in argv):
        raise UpgradeRefused(
            f"the deployment of {image_ref} has no launch argv; a rollback restarts serve with it. "
            "Fix: deploy the cluster (deploy.yml) so the head's record holds serve's argv, then upgrade."
        )
    return {
        "image_ref": image_ref,
        "image_id": image_id,
        "vllm_version": vllm_version,
        "argv": list(argv),
        "launch_inputs": dict(launch_inputs or {}),
        "plan": dict(plan or {}),
        "model_path": model_path,
        "model_revision": model_revision,
        "bench_baseline": dict(bench_baseline) if bench_baseline else None,
        "probe_reference": dict(probe_reference) if probe_reference else None,
        "recorded_at": _now_ok(recorded_at),
    }


def running_from_record(
    head_record: Mapping[str, Any],
    *,
    model_revision: str | None,
    bench_baseline: Mapping[str, Any] | None,
    probe_reference: Mapping[str, Any] | None,
    now: str,
    host: str,
) -> dict[str, Any]:
    """The deployment the head's deployed record describes (sections ``image``, ``serve``, ``plan``).

    What an upgrade records before it changes anything, so a rollback returns to
    exactly this: the image by ID, serve's argv and launch inputs, the plan. The
    measured baseline and reference come from the benchmark and the probe run on
    it just before. A record without serve's launch cannot be returned to: refused.
    """
    sections = head_record.get("sections") if isinstance(head_record, Mapping) else None
    sections = sections if isinstance(sections, Mapping) else {}
    image = sections.get("image") if isinstance(sections.get("image"), Mapping) else {}
    serve = sections.get("serve") if isinstance(sections.get("serve"), Mapping) else {}
    plan = sections.get("plan") if isinstance(sections.get("plan"), Mapping) else {}
    if not serve:
        raise UpgradeRefused(
            f"{host}: the deployed record has no serve section, so there is no recorded deployment to return to "
            "after a failed upgrade. Fix: deploy the cluster (deploy.yml) with this release first, then upgrade."
        )
    launch_inputs = {
        key: serve[key]
        for key in ("gpu_memory_utilization", "served_model_name", "unit", "container", "launch_script")
        if key in serve
    }
    plan_choice = {
        key: plan[key]
        for key in (
            "gpu_memory_utilization",
            "utilization_source",
            "vllm_args",
            "env",
            "ray_memory_monitor",
            "inputs",
        )
        if key in plan
    }
    try:
        return deployment(
            image_ref=serve.get("image") or image.get("ref"),
            image_id=image.get("id"),
            vllm_version=image.get("vllm_version"),
            argv=serve.get("argv") or [],
            launch_inputs=launch_inputs,
            plan=plan_choice,
            model_path=serve.get("model"),
            # The serve section records the revision serve was launched with (vllm_serve, model_sync_hf_revision).
            model_revision=model_revision
            if model_revision is not None
            else (serve.get("model_revision") or None),
            bench_baseline=bench_baseline,
            probe_reference=probe_reference,
            recorded_at=now,
        )
    except UpgradeRefused as exc:
        raise UpgradeRefused(f"{host}: {exc}") from None


def same_deployment(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two deployments run the same image ID with the same model revision."""
    if not a or not b:
        return False
    return all(a.get(key) == b.get(key) for key in IDENTITY_KEYS)


def _same_by_ref(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two deployments name the same image reference and model revision (IDs unknown)."""
    if not a or not b:
        return False
    return all(a.get(key) == b.get(key) for key in ("image_ref", "model_path", "model_revision"))


def label(item: Mapping[str, Any] | None) -> str:
    """A deployment as the messages name it: its image, and its model revision when it has one."""
    item = item or {}
    text = str(item.get("image_ref") or "the deployed image")
    if item.get("model_revision"):
        text += f" (model revision {item['model_revision']})"
    return text


def target(*, image_ref: str, image_id: str, model_path: str, model_revision: str | None) -> dict[str, Any]:
    """What an upgrade asks for: an image (by ID, once resolved) and a model revision (``model_target``)."""
    return {
        "image_ref": image_ref,
        "image_id": image_id,
        "model_path": model_path,
        "model_revision": model_revision,
    }


# -- what an upgrade asks for ----------------------------------------------------

# A Docker image reference, as Docker's own parser (distribution/reference) takes it:
# [REGISTRY[:PORT]/]PATH[:TAG][@DIGEST], each path component lower-case.
_REF_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REF_DOMAIN = rf"(?:{_REF_DOMAIN_PART}(?:\.{_REF_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_REF_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REF_NAME = rf"(?:{_REF_DOMAIN}/)?{_REF_PATH_PART}(?:/{_REF_PATH_PART})*"
_REF_TAG = r"\w[\w.-]{0,127}"
_REF_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(rf"(?P<name>{_REF_NAME})(?::{_REF_TAG})?(?:@{_REF_DIGEST})?", re.ASCII)
IMAGE_REFERENCE_NAME_MAX = 255
IMAGE_REFERENCE_FORM = "[REGISTRY[:PORT]/]REPOSITORY[:TAG][@DIGEST], the repository lower-case"

VLLM_VERSION_FORM = "X.Y.Z as vLLM releases it, optionally with rc1, .post1 or .dev1, no leading 'v'"

# A Hugging Face revision: a branch or tag name (git's ref rules) or a 40-hex commit.
_REVISION_FORBIDDEN = re.compile(r"[\s\x00-\x1f\x7f~^:?*\[\\]|\.\.|@\{|//")
MODEL_REVISION_FORM = "a branch or tag name of the model's repository, or a 40-hex commit"

UPGRADE_IMAGE_TEMPLATE_SETTING = "upgrade_image_ref_template"
VERSION_PLACEHOLDER = "{version}"


def valid_image_reference(value: Any) -> bool:
    """Whether ``value`` is an image reference Docker accepts (``example/vllm-spark:0.17.1``)."""
    if not isinstance(value, str):
        return False
    match = IMAGE_REFERENCE.fullmatch(value)
    return bool(match) and len(match.group("name")) <= IMAGE_REFERENCE_NAME_MAX


def valid_vllm_version(value: Any) -> bool:
    """Whether ``value`` is a vLLM release version: the inventory's rule for ``sparkops_vllm_version``."""
    return isinstance(value, str) and bool(VLLM_VERSION.fullmatch(value))


def valid_model_revision(value: Any) -> bool:
    """Whether ``value`` can name a Hugging Face revision (``main``, ``v1.0``, ``refs/pr/3``, a commit).

    Refused: empty, whitespace or control characters, a leading ``-`` (an option to
    a command line), ``..`` (a path out of the snapshots), what git forbids in a
    ref name (``~ ^ : ? * [ \\``, ``@{``, ``//``), and a trailing ``/``, ``.`` or ``.lock``.
    """
    if not isinstance(value, str) or not value or value.startswith(("-", "/")):
        return False
    if value.endswith(("/", ".", ".lock")) or _REVISION_FORBIDDEN.search(value):
        return False
    return value.isprintable()


def image_for_version(version: str, template: str, *, host: str) -> str:
    """The image ``--vllm-version VERSION`` asks for: the inventory's ``upgrade_image_ref_template``, filled.

    The template holds ``{version}`` exactly once and no other brace, e.g.
    ``example/vllm-spark:{version}``; the result must be an image reference
    Docker accepts. Refusals name the host, the value and the fix.
    """
    if not valid_vllm_version(version):
        shown = "nothing" if version in (None, "") else repr(version)
        raise UpgradeRefused(
            f"{host}: the vLLM version {shown} is not a vLLM release version ({VLLM_VERSION_FORM}). "
            "Fix: give it as vLLM releases it, e.g. `sparkops upgrade --vllm-version 0.17.1`, or give --image."
        )
    setting = UPGRADE_IMAGE_TEMPLATE_SETTING
    if template is None or (isinstance(template, str) and not template.strip()):
        raise UpgradeRefused(
            f"{host}: {setting} is empty, so the vLLM version {version} names no image. "
            f"Fix: set {setting} in the inventory, or give --image "
            f'(e.g. {setting}: "example/vllm-spark:{VERSION_PLACEHOLDER}").'
        )
    if (
        not isinstance(template, str)
        or template.count(VERSION_PLACEHOLDER) != 1
        or "{" in template.replace(VERSION_PLACEHOLDER, "")
        or "}" in template.replace(VERSION_PLACEHOLDER, "")
    ):
        raise UpgradeRefused(
            f"{host}: {setting} {template!r} must hold {VERSION_PLACEHOLDER} exactly once and no other brace. "
            f"Fix: set it to the image reference with {VERSION_PLACEHOLDER} where the version goes, "
            f'e.g. "example/vllm-spark:{VERSION_PLACEHOLDER}", or give --image.'
        )
    ref = template.replace(VERSION_PLACEHOLDER, version)
    if not valid_image_reference(ref):
        raise UpgradeRefused(
            f"{host}: {setting} {template!r} with the vLLM version {version} gives {ref!r}, which is not a Docker "
            f"image reference ({IMAGE_REFERENCE_FORM}). Fix: correct {setting} in the inventory, "
            f'e.g. "example/vllm-spark:{VERSION_PLACEHOLDER}", or give --image.'
        )
    return ref


# -- model revisions -------------------------------------------------------------

# A revision's model directory sits beside the current model's: <parent>/<name>.rev-<revision>.
# A revision that is one safe path component keeps its exact name; any other (refs/pr/3,
# unicode, a leading dot, longer than REVISION_NAME_MAX) becomes a readable slug plus "~"
# and a hash of the exact revision. "~" is never in a safe name (nor in a valid revision),
# so the two forms cannot collide.
REVISION_SEPARATOR = ".rev-"
REVISION_NAME_MAX = 64
_REVISION_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*", re.ASCII)
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+", re.ASCII)
REVISION_HASH_CHARS = 12
MODEL_REVISION_SIZE_NOTE = (
    "the size of a revision not yet downloaded is unknown offline; it is estimated as the current model's "
    "size (a revision of the same model is normally its size) plus upgrade_model_disk_margin_gib"
)


def _model_base(model_path: str) -> tuple[str, str]:
    """The model's parent directory and its name without a revision's suffix."""
    parent, name = posixpath.split(posixpath.normpath(model_path))
    base = name.split(REVISION_SEPARATOR, 1)[0] if REVISION_SEPARATOR in name[1:] else name
    return parent, base or name


def revision_component(revision: str) -> str:
    """The path component of a revision: itself when safe, else ``slug~hash`` (deterministic, collision-free)."""
    if (
        len(revision) <= REVISION_NAME_MAX
        and _REVISION_SAFE.fullmatch(revision)
        and revision.strip(".") != ""
    ):
        return revision
    slug = _SLUG_UNSAFE.sub("-", revision).strip(".-")[:32] or "rev"
    digest = hashlib.sha256(revision.encode("utf-8", "surrogatepass")).hexdigest()[:REVISION_HASH_CHARS]
    return f"{slug}~{digest}"


def revision_path(model_path: str, revision: str, *, host: str = "the head") -> str:
    """Where ``revision`` of the model at ``model_path`` goes: a directory beside it, never outside its parent.

    ``<parent>/<name>.rev-<component>``, where ``name`` is the model's directory name
    without a revision suffix (so a revision of a revision's directory is still a
    sibling of the original, not ``m.rev-a.rev-b``). Refuses a revision that is
    not a Hugging Face revision (``valid_model_revision``) and a model path that
    is not absolute, naming the host, the value and the fix.
    """
    if (
        not isinstance(model_path, str)
        or not model_path.startswith("/")
        or posixpath.normpath(model_path) == "/"
    ):
        raise UpgradeRefused(
            f"{host}: the model path {model_path!r} is not an absolute directory, so a revision cannot be placed "
            "beside it. Fix: set sparkops_model_path to the model's absolute directory and deploy first."
        )
    if not valid_model_revision(revision):
        raise UpgradeRefused(
            f"{host}: upgrade_model_revision {revision!r} is not a Hugging Face revision ({MODEL_REVISION_FORM}; "
            "no whitespace, control characters, leading '-' or '/', '..'). Fix: give the branch, tag or commit "
            "as the model's repository names it, e.g. `sparkops upgrade --model-revision main`."
        )
    parent, base = _model_base(model_path)
    path = posixpath.join(parent, f"{base}{REVISION_SEPARATOR}{revision_component(revision)}")
    if posixpath.dirname(path) != parent:  # the component is one name; this holds by construction
        raise UpgradeRefused(f"{host}: the revision {revision!r} would leave {parent}")
    return path


def model_target(
    section: Mapping[str, Any] | None, running: Mapping[str, Any], revision: str | None, *, host: str
) -> dict[str, Any]:
    """The model an upgrade asks for: ``{model_path, model_revision}``.

    No revision asked for: the deployment's own (an image upgrade keeps the model).
    A revision: the deployment's revision already (nothing to move), or its
    directory beside the deployment's model (``revision_path``). The deployment
    is the running one in ``steady``, else the section's ``current``.
    """
    doc = load(section)
    base = running if doc["phase"] == STEADY else (doc["current"] or running)
    path, rev = base.get("model_path"), base.get("model_revision")
    if not revision:
        return {"model_path": path, "model_revision": rev}
    if revision == rev:
        return {"model_path": path, "model_revision": rev}
    new_path = revision_path(path, revision, host=host)
    if new_path == posixpath.normpath(path):
        raise UpgradeRefused(
            f"{host}: the model directory {path} is named like revision {revision!r}'s directory, but the record "
            f"says it holds revision {rev!r}; upgrading would serve it unchanged. Fix: deploy the model from a "
            "directory without the '.rev-' suffix (sparkops_model_path), then upgrade."
        )
    return {"model_path": new_path, "model_revision": revision}


def model_disk_check(
    *,
    host: str,
    path: str,
    present: bool,
    avail_bytes: Any,
    model_bytes: Any,
    margin_bytes: Any,
) -> str:
    """ "" when the head has room for a revision's download beside the current model; else why not, with the fix.

    ``present``: the revision's directory holds its config.json already (nothing to
    download). ``model_bytes``: the current model's size (its manifest's
    ``total_bytes``), the estimate of the revision's size (MODEL_REVISION_SIZE_NOTE).
    """
    if present:
        return ""
    try:
        avail, size, margin = int(avail_bytes), int(model_bytes), int(margin_bytes)
    except (TypeError, ValueError):
        return (
            f"{host}: the free space under {posixpath.dirname(path)} ({avail_bytes!r}) or the current model's size "
            f"from its manifest ({model_bytes!r}) could not be read, so the download of {path} is not started. "
            "Fix: run deploy.yml's model_sync stage (it writes the manifest), then upgrade again."
        )
    if size <= 0:
        return (
            f"{host}: the current model's manifest holds no size ({size} bytes), so the room for {path} cannot be "
            "estimated. Fix: run deploy.yml's model_sync stage (it writes the manifest), then upgrade again."
        )
    needed = size + max(margin, 0)
    if avail >= needed:
        return ""
    gib = 1024**3
    return (
        f"{host}: {posixpath.dirname(path)} has {avail} bytes ({avail / gib:.2f} GiB) free, but the revision's "
        f"directory {path} needs an estimated {needed} bytes ({needed / gib:.2f} GiB): {size} bytes, the current "
        f"model's size ({MODEL_REVISION_SIZE_NOTE}), plus a margin of {max(margin, 0)} bytes. Nothing was "
        "downloaded. Fix: free space on that filesystem, or `sparkops upgrade --confirm` first to drop the "
        "deployment kept for a rollback (its model directory goes with it), or lower upgrade_model_disk_margin_gib."
    )


def kept_model_paths(section: Mapping[str, Any] | None) -> list[str]:
    """The model directories every node must keep: current, previous, discarded, an open attempt's target."""
    doc = load(section)
    candidates = [doc["current"], doc["previous"], doc["discarded"]]
    if doc["phase"] == UPGRADING:
        candidates.append((doc["attempt"] or {}).get("target"))
    paths: list[str] = []
    for item in candidates:
        path = (item or {}).get("model_path")
        if isinstance(path, str) and path and path not in paths:
            paths.append(path)
    return paths


def model_removal(
    section: Mapping[str, Any] | None, kept: Mapping[str, Any] | None, *, host: str
) -> list[str]:
    """The model directory a confirm removes with ``kept`` (the deployment it drops), checked; [] for none.

    Only a path the record names for the dropped deployment, absolute and normalized,
    a sibling of the current model's directory (never outside its parent), never the
    current's path nor one an open deployment still uses. Anything else is refused.
    """
    doc = load(section)
    current = doc["current"] or {}
    path = (kept or {}).get("model_path")
    cur_path = current.get("model_path")
    if not path or path == cur_path:
        return []
    if (
        not isinstance(path, str)
        or not isinstance(cur_path, str)
        or not path.startswith("/")
        or posixpath.normpath(path) != path
        or posixpath.dirname(path) != posixpath.dirname(posixpath.normpath(cur_path))
        or posixpath.basename(path) in ("", ".", "..")
    ):
        raise UpgradeRefused(
            f"{host}: the kept deployment's model directory {path!r} is not a sibling of the current model's "
            f"directory {cur_path!r}, so the confirm does not remove it (it removes only a directory beside the "
            "current model that the record names). Fix: check the head's deployed record (upgrade section); remove "
            "the directory yourself if it is no longer needed, then confirm again."
        )
    return [path]


# -- decisions before anything changes -----------------------------------------


def plan_upgrade(
    section: Mapping[str, Any] | None,
    running: Mapping[str, Any],
    want: Mapping[str, Any],
    *,
    host: str,
    require_id: bool = True,
) -> dict[str, Any]:
    """What ``upgrade.yml`` does: ``{action, reason}``; refuses what it cannot do.

    ``running`` is the deployment the head's record describes now (image, serve,
    plan sections); ``want`` the target (``target()``). Actions:
    ``none`` (the current deployment is the target already: a rerun changes
    nothing), ``upgrade`` (record, ship, restart, gate), ``resume`` (an attempt
    at this target was interrupted before its gate: run it again from the ship).
    ``require_id=False`` decides before the target is on the head (its ID unknown
    yet): the phase rules apply, and the target is compared by reference.
    """
    doc = load(section)
    known = bool(want.get("image_id")) and str(want["image_id"]).startswith("sha256:")
    if not known and require_id:
        raise UpgradeRefused(
            f"{host}: the image {want.get('image_ref')!r} is not on the head (no image ID found for it). "
            "Fix: give an image the vllm_image stage can put on the head (pull, build or archive), e.g. "
            "`sparkops upgrade --image REPO:TAG` with the image loaded or pullable there."
        )
    # Before the image is on the head its ID is unknown: it is told apart by its reference.
    same = same_deployment if known else _same_by_ref
    # The record's image and serve sections always describe what runs; a steady section's
    # current deployment may be older (deploy.yml may have changed it since a confirm).
    current = running if doc["phase"] == STEADY else (doc["current"] or running)
    if doc["phase"] == UPGRADING:
        attempt = doc["attempt"] or {}
        if same(attempt.get("target"), want):
            return {
                "action": "resume",
                "reason": f"the upgrade to {label(want)} was interrupted; running it again",
            }
        raise UpgradeRefused(
            f"{host}: an upgrade to {label(attempt.get('target'))} was interrupted before its gate, "
            f"and {label(want)} is asked for. Fix: `sparkops rollback` to the recorded deployment "
            f"({label(current)}), or rerun the interrupted upgrade."
        )
    if same(current, want):
        return {
            "action": "none",
            "reason": f"{label(want)} ({(want.get('image_id') or 'by reference')[:19]}) is the current "
            "deployment already",
        }
    if doc["phase"] == ROLLED_BACK and same(doc["discarded"], want):
        # The same bad target again: nothing changes (a rerun is changed=0); the caller reports it as not current.
        when = (doc["attempt"] or {}).get("rolled_back_at") or "the last run"
        return {
            "action": "none",
            "rolled_back": True,
            "reason": f"{label(want)} failed its gate and was rolled back at {when}; "
            f"{label(current)} serves. To try it again: `sparkops upgrade --confirm` (drops it), "
            "then upgrade",
        }
    if doc["phase"] == AWAITING_CONFIRM:
        raise UpgradeRefused(
            f"{host}: {label(doc['previous'])} is still kept from the last upgrade, and only one deployment is "
            f"kept beside the current one, so {label(want)} cannot start. Fix: `sparkops upgrade --confirm` "
            "(keeps the current one, removes the previous image and model revision) or `sparkops rollback`, then upgrade again."
        )
    if doc["phase"] == ROLLED_BACK:
        raise UpgradeRefused(
            f"{host}: {label(doc['discarded'])} is still kept from the last rollback, and only one deployment "
            f"is kept beside the current one, so {label(want)} cannot start. Fix: `sparkops upgrade --confirm` "
            "(removes that image), then upgrade again."
        )
    return {"action": "upgrade", "reason": f"{label(current)} -> {label(want)}"}


def plan_rollback(section: Mapping[str, Any] | None, *, host: str) -> dict[str, Any]:
    """What ``rollback.yml`` does: ``{action, to, reason}``; refuses with nothing to return to.

    ``none``: a rollback already happened and nothing moved since (a second
    rollback changes nothing). ``rollback``: back to ``to``.
    """
    doc = load(section)
    if doc["phase"] == ROLLED_BACK:
        return {"action": "none", "to": doc["current"], "reason": "rolled back already; nothing moved since"}
    if doc["phase"] == UPGRADING:
        unfinished = (doc["attempt"] or {}).get("outcome") == "rolling_back"
        return {
            "action": "rollback",
            "to": doc["current"],
            "reason": (
                "the upgrade failed its gate and its rollback did not finish"
                if unfinished
                else "an upgrade was interrupted before its gate"
            )
            + "; back to the recorded deployment",
        }
    if doc["phase"] == AWAITING_CONFIRM and doc["previous"]:
        return {
            "action": "rollback",
            "to": doc["previous"],
            "reason": "back to the deployment before the upgrade",
        }
    current = (doc["current"] or {}).get("image_ref") or "the deployed image"
    raise UpgradeRefused(
        f"{host}: there is no previous deployment to roll back to (phase {doc['phase']}; {current} is the only "
        "one recorded, and `sparkops upgrade --confirm` removes the previous one). Fix: upgrade to the image you "
        "want with `sparkops upgrade --image REPO:TAG`."
    )


def plan_confirm(section: Mapping[str, Any] | None, *, host: str) -> dict[str, Any]:
    """What ``upgrade.yml --confirm`` does: ``{action, remove, reason}``; refuses with nothing pending."""
    doc = load(section)
    kept = {AWAITING_CONFIRM: doc["previous"], ROLLED_BACK: doc["discarded"]}.get(doc["phase"])
    if doc["phase"] == UPGRADING:
        raise UpgradeRefused(
            f"{host}: an upgrade to {((doc['attempt'] or {}).get('target') or {}).get('image_ref')} was interrupted "
            "before its gate; there is nothing gated to confirm. Fix: rerun that upgrade, or `sparkops rollback`."
        )
    if not kept and doc["phase"] == STEADY and doc["attempt"] and doc["attempt"].get("confirmed_at"):
        # A second --confirm: the first one removed what was kept; nothing changes.
        return {
            "action": "none",
            "remove": [],
            "remove_models": [],
            "remove_model_files": [],
            "reason": f"confirmed already at {doc['attempt']['confirmed_at']}; "
            f"{(doc['current'] or {}).get('image_ref')} is the only deployment kept",
        }
    if not kept:
        raise UpgradeRefused(
            f"{host}: nothing is pending confirmation (phase {doc['phase']}); the current deployment is "
            f"{(doc['current'] or {}).get('image_ref') or 'the deployed one'} and no other image is kept. "
            "Fix: none needed; `sparkops upgrade --image REPO:TAG` starts an upgrade."
        )
    remove = [] if kept.get("image_id") == (doc["current"] or {}).get("image_id") else [kept["image_ref"]]
    remove_models = model_removal(doc, kept, host=host)
    goes = (
        " and ".join(remove + remove_models)
        or f"nothing of {label(kept)} (it shares the current's image and model)"
    )
    return {
        "action": "confirm",
        "remove": remove,
        "remove_models": remove_models,
        # The directories and model_sync's manifest beside each (a link is removed, not what it points at).
        "remove_model_files": [item for path in remove_models for item in (path, manifest_beside(path))],
        "reason": f"the current deployment stays; {goes} goes",
    }


# -- the transitions -------------------------------------------------------------


def begin(
    section: Mapping[str, Any] | None, running: Mapping[str, Any], want: Mapping[str, Any], now: str
) -> dict[str, Any]:
    """The section once an upgrade starts: ``running`` recorded as current, the attempt opened."""
    doc = load(section)
    if doc["phase"] == UPGRADING:
        doc["attempt"]["resumed_at"] = _now_ok(now)
        return doc
    if doc["phase"] != STEADY:
        # plan_upgrade refuses this first; a kept deployment would otherwise be lost track of.
        raise UpgradeRefused(f"an upgrade cannot start in phase {doc['phase']}: confirm or roll back first")
    doc["current"] = copy.deepcopy(dict(running))
    doc["phase"] = UPGRADING
    doc["attempt"] = {"target": dict(want), "started_at": _now_ok(now), "kind": "upgrade"}
    return doc


def finish(
    section: Mapping[str, Any],
    verdict: Mapping[str, Any],
    new: Mapping[str, Any] | None,
    *,
    timings: Mapping[str, str | None],
    now: str,
) -> dict[str, Any]:
    """The section after the gate: the target current (previous kept) or, failed, the pending rollback.

    ``new`` is the gated deployment (required when the verdict passed).
    ``timings`` holds ``serve_stopped_at`` and ``first_healthy_at`` of the restart.
    A failed verdict leaves the phase ``upgrading`` with ``outcome: rolling_back``;
    ``rolled_back()`` closes it once the rollback's own gate passed.
    """
    doc = load(section)
    if doc["phase"] != UPGRADING:
        raise UpgradeRefused(f"no upgrade is open to finish (phase {doc['phase']})")
    attempt = dict(doc["attempt"] or {})
    attempt.update(
        verdict=dict(verdict),
        gated_at=_now_ok(now),
        serve_stopped_at=timings.get("serve_stopped_at"),
        first_healthy_at=timings.get("first_healthy_at"),
        downtime_seconds=downtime_seconds(timings.get("serve_stopped_at"), timings.get("first_healthy_at")),
    )
    if verdict.get("passed"):
        if not new:
            raise UpgradeRefused("a passed gate needs the gated deployment to record as current")
        attempt["outcome"] = "current"
        doc["previous"] = doc["current"]
        doc["current"] = copy.deepcopy(dict(new))
        doc["phase"] = AWAITING_CONFIRM
    else:
        attempt["outcome"] = "rolling_back"
    doc["attempt"] = attempt
    return doc


def rolled_back(
    section: Mapping[str, Any],
    verdict: Mapping[str, Any],
    *,
    timings: Mapping[str, str | None],
    now: str,
    abandoned: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The section after a rollback whose gate passed: back on the recorded deployment.

    From an upgrade (failed gate or interrupted): ``current`` stays, the target's
    image is ``discarded`` (kept until confirm). On demand after a passed upgrade:
    ``previous`` becomes current again and the upgraded deployment is ``discarded``.
    A rollback whose own gate fails raises: the cluster needs a person.
    """
    doc = load(section)
    if not verdict.get("passed"):
        raise UpgradeRefused(
            "the rollback's own gate failed: "
            + "; ".join(verdict.get("reasons") or ["no reason given"])
            + ". "
            "Fix: read docs/runbooks/upgrade-rolled-back.md; `sparkops diagnose` names the cause."
        )
    attempt = dict(doc["attempt"] or {})
    if doc["phase"] == UPGRADING:
        discarded = abandoned or attempt.get("target")
    elif doc["phase"] == AWAITING_CONFIRM and doc["previous"]:
        discarded = doc["current"]
        doc["current"] = doc["previous"]
        attempt = {
            "kind": "rollback",
            "target": doc["current"],
            "started_at": timings.get("serve_stopped_at") or now,
        }
    else:
        raise UpgradeRefused(f"there is nothing to roll back (phase {doc['phase']})")
    attempt.update(
        outcome="rolled_back",
        rollback_verdict=dict(verdict),
        rolled_back_at=_now_ok(now),
        rollback_serve_stopped_at=timings.get("serve_stopped_at"),
        rollback_first_healthy_at=timings.get("first_healthy_at"),
        rollback_downtime_seconds=downtime_seconds(
            timings.get("serve_stopped_at"), timings.get("first_healthy_at")
        ),
    )
    doc["previous"] = None
    doc["discarded"] = copy.deepcopy(dict(discarded)) if discarded else None
    doc["attempt"] = attempt
    doc["phase"] = ROLLED_BACK
    return doc


def confirmed(section: Mapping[str, Any], *, now: str) -> dict[str, Any]:
    """The section after ``--confirm`` removed the kept image: one deployment, nothing kept."""
    doc = load(section)
    if doc["phase"] not in (AWAITING_CONFIRM, ROLLED_BACK):
        raise UpgradeRefused(f"nothing is pending confirmation (phase {doc['phase']})")
    doc["previous"] = None
    doc["discarded"] = None
    doc["phase"] = STEADY
    doc["attempt"] = dict(doc["attempt"] or {}, confirmed_at=_now_ok(now))
    return doc


def kept_images(section: Mapping[str, Any] | None) -> list[str]:
    """The image references every node must keep: the current, the previous, the discarded, the target."""
    doc = load(section)
    refs = []
    candidates = [doc["current"], doc["previous"], doc["discarded"]]
    if doc["phase"] == UPGRADING:
        candidates.append((doc["attempt"] or {}).get("target"))
    for item in candidates:
        ref = (item or {}).get("image_ref")
        if ref and ref not in refs:
            refs.append(ref)
    return refs


def node_images(section: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every node's ``upgrade_images`` section: the images (ref and ID) it holds for the cluster, and the phase.

    Workers have no ``upgrade`` section (the head's record holds it); this one tells
    their teardown which images are the cluster's, and a reader which ID each must be.
    """
    doc = load(section)
    images = {}
    for name in ("current", "previous", "discarded"):
        item = doc[name]
        images[name] = (
            {"ref": item.get("image_ref"), "id": item.get("image_id"), "model_path": item.get("model_path")}
            if item
            else None
        )
    return {"phase": doc["phase"], "kept": kept_images(doc), "kept_models": kept_model_paths(doc), **images}


# -- deploy.yml beside an upgrade ------------------------------------------------


def deploy_guard(section: Mapping[str, Any] | None, run_ref: str, *, switching: bool, host: str) -> str:
    """ "" when deploy.yml may run ``run_ref``; else why not, with the fix.

    While an upgrade is open (``upgrading``) or keeps a deployment for a rollback
    (``awaiting_confirm``, ``rolled_back``), only upgrade.yml and rollback.yml
    (``switching``) change the image: deploy.yml with another image would restart
    the cluster behind the gate and lose track of the kept one. In ``steady`` (or
    never upgraded) deploy.yml changes images as it always did.
    """
    doc = load(section)
    if switching or doc["phase"] == STEADY:
        return ""
    current = (doc["current"] or {}).get("image_ref")
    if doc["phase"] == UPGRADING:
        wanted = ((doc["attempt"] or {}).get("target") or {}).get("image_ref")
        return (
            f"{host}: an upgrade to {wanted} was interrupted before its gate, so deploy.yml does not change the "
            f"image (it would run {run_ref}). Fix: rerun `sparkops upgrade --image {wanted}`, or `sparkops rollback`."
        )
    if run_ref == current:
        return ""
    return (
        f"{host}: `sparkops upgrade` made {current} the current deployment (phase {doc['phase']}); deploy.yml would "
        f"run {run_ref}, and it does not change images behind the upgrade's gate. Fix: set vllm_image_ref "
        f"(and its archive) in the inventory to {current}, or `sparkops upgrade --image {run_ref}` to go through "
        "the gate, or `sparkops rollback` / `sparkops upgrade --confirm` first."
    )


def deploy_model_guard(
    section: Mapping[str, Any] | None,
    model_path: str,
    model_revision: str | None,
    *,
    switching: bool,
    host: str,
) -> str:
    """ "" when deploy.yml may serve ``model_path`` (revision ``model_revision``); else why not, with the fix.

    The model's side of ``deploy_guard``: while an upgrade is open or keeps a
    deployment, deploy.yml serves only the current deployment's model directory and
    revision; only upgrade.yml and rollback.yml (``switching``) move it. In ``steady``
    (or never upgraded) the inventory rules, as it always did.
    """
    doc = load(section)
    if switching or doc["phase"] == STEADY:
        return ""
    revision = model_revision or None
    if doc["phase"] == UPGRADING:
        wanted = (doc["attempt"] or {}).get("target") or {}
        return (
            f"{host}: an upgrade to {label(wanted)} was interrupted before its gate, so deploy.yml does not move the "
            f"model (it would serve {model_path}, revision {revision}). Fix: rerun that upgrade "
            "(`sparkops upgrade` with the same options), or `sparkops rollback`."
        )
    current = doc["current"] or {}
    recorded = current.get("model_revision") or None
    # A deployment recorded without a revision (before revisions were recorded) is told by its path.
    if model_path == current.get("model_path") and (recorded is None or revision == recorded):
        return ""
    current_revision = current.get("model_revision") or '""'
    return (
        f"{host}: `sparkops upgrade` made {label(current)} the current deployment (phase {doc['phase']}), serving "
        f"the model at {current.get('model_path')} (revision {current.get('model_revision')}); deploy.yml would "
        f"serve {model_path} (revision {revision}), and it does not change the model behind the upgrade's gate. "
        f"Fix: set sparkops_model_path to {current.get('model_path')} and model_sync_hf_revision to "
        f"{current_revision} in the inventory, or `sparkops upgrade --model-revision REV` to "
        "go through the gate, or `sparkops rollback` / `sparkops upgrade --confirm` first."
    )


def inventory_followup(section: Mapping[str, Any] | None) -> str:
    """What the report tells the operator to set in the inventory so deploy.yml serves what the upgrade made current."""
    doc = load(section)
    current = doc["current"]
    if not current:
        return ""
    settings = [f"vllm_image_ref: {current.get('image_ref')}"]
    if current.get("vllm_version"):
        settings.append(f"sparkops_vllm_version: {current.get('vllm_version')}")
    settings.append(f"sparkops_model_path: {current.get('model_path')}")
    settings.append(f"model_sync_hf_revision: {current.get('model_revision') or chr(34) * 2}")
    return (
        "Inventory: deploy.yml serves what the inventory says; so it serves what serves now, set "
        + ", ".join(settings)
        + " (and the image's archive or digest when the image source needs them). After `--confirm` (phase steady) "
        "an inventory left on the old values would put the old deployment back without a gate."
    )


def probe_input(result: Mapping[str, Any] | None) -> dict[str, Any]:
    """The gate's probe input (``PROBE_KEYS``) from the correctness_probe module's result, failed or not.

    A probe that could not judge (the module refused, or no result) is a failed
    probe: every flag false, its message the problem.
    """
    result = result or {}
    if "identical" not in result:
        problem = str(result.get("msg") or "the correctness probe did not run")
        return {"identical": False, "matches_reference": False, "tokens_sane": False, "problems": [problem]}
    return {
        "identical": result.get("identical") is True,
        "matches_reference": (
            result.get("matches_reference") if result.get("compared_with_reference") else None
        ),
        "tokens_sane": result.get("tokens_sane") is True,
        "problems": [str(p) for p in result.get("other_problems") or []],
    }


# -- downtime --------------------------------------------------------------------


def downtime_seconds(serve_stopped_at: str | None, first_healthy_at: str | None) -> float | None:
    """Seconds the endpoint was down: serve stopped until the first healthy answer; None when unknown.

    A first answer before the stop is a clock problem, not negative downtime: refused.
    """
    if not serve_stopped_at or not first_healthy_at:
        return None
    seconds = (parse_time(first_healthy_at) - parse_time(serve_stopped_at)).total_seconds()
    if seconds < 0:
        raise ValueError(
            f"the first healthy answer ({first_healthy_at}) is before serve stopped ({serve_stopped_at}); "
            "the times come from one clock (the controller's), so the record is wrong"
        )
    return round(seconds, 1)


def downtime_line(attempt: Mapping[str, Any] | None) -> str:
    """The sentence the output ends with: how long the endpoint was down, and why a full restart."""
    attempt = attempt or {}
    parts = []
    for label, key in (("upgrade", "downtime_seconds"), ("rollback", "rollback_downtime_seconds")):
        value = attempt.get(key)
        if isinstance(value, int | float):
            parts.append(f"{label}: {value:.1f} s")
    # An upgrade that never answered stayed down until the rollback's first answer: say it all.
    if attempt.get("kind") == "upgrade" and attempt.get("rollback_first_healthy_at"):
        if attempt.get("downtime_seconds") is None:
            parts.insert(0, "upgrade: never healthy")
        total = downtime_seconds(attempt.get("serve_stopped_at"), attempt.get("rollback_first_healthy_at"))
        if total is not None:
            parts.append(f"in all: {total:.1f} s")
    if not parts:
        return "The endpoint's downtime was not measured (no restart in this run)."
    return (
        "The endpoint was down " + ", ".join(parts) + " (serve stopped until its first healthy answer); "
        "tensor parallelism across nodes needs every rank on one image, so an upgrade is a full restart."
    )


# -- the gate --------------------------------------------------------------------


def _level_map(bench: Mapping[str, Any] | None) -> dict[int, Mapping[str, Any]]:
    levels = (bench or {}).get("levels")
    result = {}
    for level in levels if isinstance(levels, list) else []:
        if isinstance(level, Mapping) and isinstance(level.get("concurrency"), int):
            result[level["concurrency"]] = level
    return result


def _rate(level: Mapping[str, Any]) -> float | None:
    value = level.get("output_tokens_per_s")
    return None if isinstance(value, bool) or not isinstance(value, int | float) else float(value)


def gate(
    health: Mapping[str, Any] | None,
    probe: Mapping[str, Any] | None,
    bench: Mapping[str, Any] | None,
    baseline: Mapping[str, Any] | None,
    tolerance: float,
) -> dict[str, Any]:
    """The verdict on a deployment: ``{passed, reasons, warnings, checks}``.

    ``health``: ``{healthy: bool, detail: str}`` (vllm_serve's readiness: /health and a
    real completion). ``probe``: the correctness probe's result, ``{identical: bool,
    matches_reference: bool | None, tokens_sane: bool, problems: [str]}``;
    ``matches_reference`` is None when no reference was recorded. ``bench`` and
    ``baseline``: the benchmark's results, ``{levels: [{concurrency: int,
    output_tokens_per_s: float, errors: int, ...}]}``. ``tolerance``: the fraction of
    the baseline's output tokens/s a level may lose (0.10: at least 90 %).

    Health fails first and alone (nothing else can be measured on a dead
    endpoint). Without a baseline, the gate decides on health and the probe and
    warns. A missing input counts as failed, never as passed.
    """
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not 0 <= tolerance < 1:
        raise ValueError(f"the benchmark tolerance is a fraction in [0, 1), not {tolerance!r}")
    reasons: list[str] = []
    warnings: list[str] = []
    checks = {"health": False, "probe": None, "bench": None}
    if not health or health.get("healthy") is not True:
        detail = (health or {}).get("detail") or "no health result"
        reasons.append(f"health: the endpoint is not healthy ({detail})")
        return {"passed": False, "reasons": reasons, "warnings": warnings, "checks": checks}
    checks["health"] = True

    probe_reasons = []
    if not probe:
        probe_reasons.append("probe: no correctness probe result")
    else:
        if probe.get("identical") is not True:
            probe_reasons.append(
                "probe: the answers to the same prompt differ between requests (identical: no)"
            )
        if probe.get("matches_reference") is False:
            probe_reasons.append(
                "probe: the answers differ from the recorded reference (matches reference: no)"
            )
        elif probe.get("matches_reference") is None:
            warnings.append("probe: no correctness reference recorded; identical answers only were checked")
        if probe.get("tokens_sane") is not True:
            probe_reasons.append("probe: the tokens per answer are out of range (tokens sanity: no)")
        probe_reasons.extend(f"probe: {problem}" for problem in probe.get("problems") or [])
    checks["probe"] = not probe_reasons
    reasons.extend(probe_reasons)

    base_levels = _level_map(baseline)
    if not base_levels:
        warnings.append("bench: no benchmark baseline recorded; gated on health and the probe only")
    else:
        bench_reasons = []
        now_levels = _level_map(bench)
        for concurrency, base in sorted(base_levels.items()):
            level = now_levels.get(concurrency)
            base_rate = _rate(base)
            if level is None:
                bench_reasons.append(f"bench: concurrency {concurrency} was not measured")
                continue
            errors = level.get("errors")
            if isinstance(errors, int) and not isinstance(errors, bool) and errors > 0:
                bench_reasons.append(f"bench: concurrency {concurrency}: {errors} request(s) failed")
            rate = _rate(level)
            if base_rate is None or base_rate <= 0:
                warnings.append(
                    f"bench: concurrency {concurrency} has no baseline rate; its speed is not gated"
                )
                continue
            floor = base_rate * (1 - tolerance)
            if rate is None or rate < floor:
                shown = "none" if rate is None else f"{rate:.1f}"
                bench_reasons.append(
                    f"bench: concurrency {concurrency}: {shown} output tokens/s, under {floor:.1f} "
                    f"({base_rate:.1f} baseline less {tolerance:.0%})"
                )
        checks["bench"] = not bench_reasons
        reasons.extend(bench_reasons)
    return {"passed": not reasons, "reasons": reasons, "warnings": warnings, "checks": checks}
