"""After the model_sync scenario: the worker holds the head's model, byte for byte, and no daemon is left."""

import json

import testinfra

MODEL = "/srv/models/sparkops-lab-tiny-moe"
MANIFEST = "/srv/models/.sparkops-lab-tiny-moe.sparkops-manifest.json"

testinfra_hosts = ["ansible://spark-2"]


def _head(host):
    """The head, reached through the same inventory as the worker under test."""
    return testinfra.get_host("ansible://spark-1", ansible_inventory=host.backend.ansible_inventory)


def _sums(host, path):
    out = host.check_output(
        f"cd {path}/ && find -L . -type f ! -path './.sparkops-*' -print0 | xargs -0 sha256sum"
    )
    return dict(reversed(line.split(None, 1)) for line in out.splitlines())


def test_worker_files_identical_to_the_heads(host):
    head = _sums(_head(host), MODEL)
    assert len(head) == 11
    assert _sums(host, MODEL) == head


def test_worker_holds_real_files_not_links(host):
    assert not host.file(MODEL).is_symlink
    shard = host.file(f"{MODEL}/model-00003-of-00008.safetensors")
    assert shard.is_file and not shard.is_symlink and shard.size == 64 * 1024 * 1024


def test_worker_manifest_matches_the_heads(host):
    head = json.loads(_head(host).file(MANIFEST).content_string)["files"]
    worker = json.loads(host.file(MANIFEST).content_string)["files"]
    assert {k: v["sha256"] for k, v in worker.items()} == {k: v["sha256"] for k, v in head.items()}


def test_no_rsync_daemon_listening_and_no_secret_left(host):
    assert host.check_output("ss -Hltn 'sport = :873'").strip() == ""
    assert not host.service("sparkops-model-sync-rsyncd").is_running
    assert not host.file("/etc/sparkops/model-sync/rsyncd.secrets").exists
    conf = host.file("/etc/sparkops/model-sync/rsyncd.conf").content_string
    assert "hosts allow = 192.168.200.12" in conf and "address = 192.168.200.13" in conf


def test_head_key_authorized_from_the_heads_ib_address_only(host):
    keys = host.file("/root/.ssh/authorized_keys2").content_string
    assert 'from="192.168.200.12",restrict ssh-ed25519 ' in keys


def test_no_partial_left_after_the_resumed_copy(host):
    assert not host.file(f"{MODEL}/.sparkops-partial").exists
