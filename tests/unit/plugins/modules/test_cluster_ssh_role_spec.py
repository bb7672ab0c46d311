"""roles/cluster_ssh: meta/argument_specs.yml mirrors defaults/main.yml; the sample sets each; one key per cluster."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[4]
ROLE = ROOT / "roles" / "cluster_ssh"
TYPES = {"str": str, "path": str, "int": int, "bool": bool, "dict": dict, "list": list}
# The settings the other roles had before the cluster's key was one role.
RETIRED = (
    "vllm_image_ssh_key",
    "vllm_image_ssh_key_comment",
    "vllm_image_ssh_known_hosts",
    "vllm_image_ssh_authorized_keys",
    "vllm_image_ssh_port",
    "model_sync_ssh_key",
    "model_sync_ssh_known_hosts",
    "model_sync_ssh_authorized_keys",
    "model_sync_ssh_port",
)


def _load(path):
    return yaml.safe_load(path.read_text())


def test_the_lab_authorizes_the_key_in_authorized_keys2():
    lab = _load(ROOT / "inventory/lab/group_vars/all/cluster_ssh.yml")
    assert lab == {"cluster_ssh_authorized_keys": "/root/.ssh/authorized_keys2"}


def test_the_stages_that_copy_between_nodes_include_this_role_and_no_copy_of_it():
    for role in ("vllm_image", "model_sync"):
        tasks = ROOT / "roles" / role / "tasks"
        assert not (tasks / "ssh.yml").exists(), role
        main = _load(tasks / "main.yml")
        includes = [t for t in main if "ansible.builtin.include_role" in t]
        assert [t["ansible.builtin.include_role"]["name"] for t in includes] == [
            "sparkops.vllm.cluster_ssh"
        ], role
        for path in tasks.glob("*.yml"):
            text = path.read_text()
            assert "openssh_keypair" not in text and "authorized_key" not in text, path


def test_no_role_or_inventory_still_sets_the_retired_settings():
    paths = [*ROOT.glob("roles/*/defaults/main.yml"), *ROOT.glob("roles/*/meta/argument_specs.yml")]
    paths += [*ROOT.glob("inventory/*/group_vars/**/*.yml"), *ROOT.glob("roles/*/tasks/*.yml")]
    for path in paths:
        text = path.read_text()
        for name in RETIRED:
            assert name not in text, (path, name)
