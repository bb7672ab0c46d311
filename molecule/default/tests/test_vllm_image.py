"""After deploy.yml: every node holds the lab image under one image ID, Ray inside (stage 3)."""

import os
import subprocess

import pytest
import testinfra
from testinfra.utils.ansible_runner import AnsibleRunner

testinfra_hosts = ["ansible://cluster"]

INVENTORY = os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])
PROJECT = os.environ["MOLECULE_PROJECT_DIRECTORY"]
_RUNNER = AnsibleRunner(INVENTORY)
CLUSTER = _RUNNER.get_variables(_RUNNER.get_hosts("head")[0])["sparkops_cluster_name"]


@pytest.fixture(scope="module")
def reference():
    """The lab image's tag, as lab/build-vllm-image names it (a hash of its sources)."""
    out = subprocess.run(
        [os.path.join(PROJECT, "lab", "build-vllm-image"), "--tag-only"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.splitlines()[-1].strip()


def image_id(node, reference):
    return node.check_output(f"docker image inspect --format '{{{{.Id}}}}' {reference}").strip()


@pytest.fixture(scope="module")
def head():
    name = _RUNNER.get_hosts("head")[0]
    return (
        name,
        _RUNNER.get_variables(name)["ib_address"],
        testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}"),
    )


def test_node_holds_the_heads_image_id(host, reference, head):
    expected = image_id(head[2], reference)
    assert expected.startswith("sha256:")
    assert image_id(host, reference) == expected


def test_ray_and_the_stand_in_are_inside_the_image(host, reference):
    label = f"io.sparkops.vllm.cluster={CLUSTER}"
    run = f"docker run --rm --network none --label {label} --entrypoint {{}} {reference} --version"
    assert host.check_output(run.format("ray")).strip() == "ray, version 2.60.0"
    assert host.check_output(run.format("vllm")).strip() == "0.17.1+sparkops.lab"


def test_workers_accept_the_cluster_key_only_from_the_heads_ib_address(host, head):
    variables = host.ansible.get_variables()
    if variables["inventory_hostname"] == head[0]:
        assert host.file(f"/root/.ssh/sparkops_{CLUSTER}_ed25519").mode == 0o600
        assert host.file(f"/root/.ssh/sparkops_{CLUSTER}_known_hosts").exists
        return
    keys = host.file("/root/.ssh/authorized_keys2").content_string
    entries = [line for line in keys.splitlines() if line.endswith(f" sparkops-{CLUSTER}")]
    assert len(entries) == 1, keys
    assert entries[0].startswith(f'from="{head[1]}",restrict ssh-ed25519 ')
