"""The lab's scaffolding (its image build, its synthetic model) lives in roles/lab and
playbooks/lab_up.yml; the production roles take the lab's image and model through their
ordinary inputs (vllm_image_archive_src, sparkops_model_path)."""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
PRODUCTION_ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir() and p.name != "lab")
LAB_ONLY = ("build-vllm-image", "model_sync_synthetic", "_lab_", "lab_build", "lab_archive", "lab_synthetic")


@pytest.mark.parametrize("role", PRODUCTION_ROLES)
def test_no_production_role_builds_the_lab_image_or_model(role):
    found = [
        f"{path.relative_to(ROOT)}: {word}"
        for path in sorted((ROOT / "roles" / role).rglob("*"))
        if path.is_file() and path.suffix in {".yml", ".j2"}
        for word in LAB_ONLY
        if word in path.read_text()
    ]
    assert not found


def _lab_up_tasks():
    plays = yaml.safe_load((ROOT / "playbooks/lab_up.yml").read_text())
    return {task["name"]: task for play in plays for task in play.get("tasks", [])}


def test_lab_up_builds_the_archive_the_lab_inventory_points_deploy_at():
    task = _lab_up_tasks()["Build the lab's vLLM image and save its archive on the controller"]
    assert task["ansible.builtin.include_role"]["tasks_from"] == "vllm_image"
    assert task["vars"]["lab_vllm_image_archive"] == "{{ vllm_image_archive_src }}"
    lab = yaml.safe_load((ROOT / "inventory/lab/group_vars/all/vllm_image.yml").read_text())
    assert lab["vllm_image_source"] == "archive" and lab["vllm_image_archive_src"]


def test_lab_up_creates_the_model_at_the_inventory_model_path():
    task = _lab_up_tasks()["Create the lab's synthetic model on the head"]
    assert task["ansible.builtin.include_role"]["tasks_from"] == "model"
    defaults = yaml.safe_load((ROOT / "roles/lab/defaults/main.yml").read_text())
    assert defaults["lab_model_path"] == "{{ sparkops_model_path }}"
    assert defaults["lab_model_repo_id"] == "{{ sparkops_model_id }}"
    # The lab inventory's size of that model is what its declared size says (0.5 GiB).
    sync = yaml.safe_load((ROOT / "inventory/lab/group_vars/all/model_sync.yml").read_text())
    model = yaml.safe_load((ROOT / "inventory/lab/group_vars/all/model.yml").read_text())
    assert sync["lab_model_shards"] * sync["lab_model_shard_mib"] / 1024 == model["sparkops_model_size_gib"]
