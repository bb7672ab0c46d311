"""After deploy.yml on the lab: stage 4 left the head's model on every worker, verified, as real files."""

import json
import os

import testinfra
from testinfra.utils.ansible_runner import AnsibleRunner

MODEL = "/srv/models/sparkops-lab-tiny-moe"
MANIFEST = "/srv/models/.sparkops-lab-tiny-moe.sparkops-manifest.json"

testinfra_hosts = ["ansible://workers"]

HEAD = AnsibleRunner(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"])).get_hosts("head")[0]


def _head(host):
    """The head, reached through the same inventory as the worker under test."""
    return testinfra.get_host(f"ansible://{HEAD}", ansible_inventory=host.backend.ansible_inventory)


def test_head_keeps_the_hf_cache_layout(host):
    head = _head(host)
    assert head.file(MODEL).is_symlink
    assert head.file(f"{MODEL}/model-00001-of-00008.safetensors").linked_to.startswith(
        "/srv/models/hf-cache/hub/models--sparkops-lab--tiny-moe/blobs/"
    )


def test_worker_has_every_file_with_the_heads_sha256(host):
    head = json.loads(_head(host).file(MANIFEST).content_string)["files"]
    assert len(head) == 11
    for name, entry in head.items():
        f = host.file(f"{MODEL}/{name}")
        assert f.is_file and not f.is_symlink, name
        assert f.size == entry["size"], name
        assert f.sha256sum == entry["sha256"], name


def test_no_rsync_daemon_left_listening(host):
    assert host.check_output("ss -Hltn 'sport = :873'").strip() == ""
