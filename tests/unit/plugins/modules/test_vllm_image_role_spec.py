"""roles/vllm_image: meta/argument_specs.yml mirrors defaults/main.yml; the sample sets each."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[4]
ROLE = ROOT / "roles" / "vllm_image"
TYPES = {"str": str, "path": str, "int": int, "bool": bool, "dict": dict, "list": list}


def _load(path):
    return yaml.safe_load(path.read_text())


def test_the_lab_uses_the_archive_path_without_the_gpu_check():
    lab = _load(ROOT / "inventory/lab/group_vars/all/vllm_image.yml")
    assert lab["vllm_image_source"] == "archive"
    # The role's ordinary input; playbooks/lab_up.yml builds that archive (roles/lab).
    assert lab["vllm_image_archive_src"] == "{{ sparkops_lab_dir }}/images/vllm-lab.tar"
    assert lab["vllm_image_require_nvidia_runtime"] is False
    assert set(lab) <= set(_load(ROLE / "defaults/main.yml"))
