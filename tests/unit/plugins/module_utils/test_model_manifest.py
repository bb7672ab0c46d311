"""Manifest logic: scanning through links, reuse by size and mtime, comparison, stream split, mount root."""

import hashlib
import json
import os
import struct

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _model_manifest as mm
from ansible_collections.sparkops.vllm.plugins.module_utils import _model_sync_copy as cp
from ansible_collections.sparkops.vllm.plugins.module_utils import _model_sync_synthetic as syn


@pytest.fixture
def hf_model(tmp_path):
    """A 3-shard synthetic model of 1 MiB shards in the HF cache layout, linked at tmp/models/tiny."""
    cache = tmp_path / "models" / "hf-cache" / "hub"
    link = tmp_path / "models" / "tiny"
    syn.create(str(cache), "lab/tiny", 3, 1, str(link))
    return link


def test_scan_follows_links_and_skips_own_state(hf_model):
    (hf_model / ".sparkops-partial").mkdir()
    (hf_model / ".sparkops-partial" / "x").write_bytes(b"partial")
    files = mm.scan(str(hf_model))
    assert sorted(files) == [
        "config.json",
        "generation_config.json",
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
    ]
    assert files["model-00001-of-00003.safetensors"]["size"] == 1024 * 1024
    assert all(info["link"] for info in files.values())


def test_scan_names_broken_links(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").symlink_to("../../blobs/abc")
    with pytest.raises(mm.ManifestError, match=r"broken links: model.safetensors -> \.\./\.\./blobs/abc"):
        mm.scan(str(model))


def test_scan_refuses_a_missing_folder(tmp_path):
    with pytest.raises(mm.ManifestError, match="is not a directory"):
        mm.scan(str(tmp_path / "nope"))


def test_build_hashes_once_then_reuses_by_size_and_mtime(hf_model, monkeypatch):
    first, hashed = mm.build(str(hf_model), {"files": {}}, workers=2)
    assert len(hashed) == 6
    assert first["total_bytes"] == 3 * 1024 * 1024 + sum(
        len(c) for c in syn.small_files("lab/tiny", 3, 1).values()
    )
    calls = []
    monkeypatch.setattr(mm, "sha256_file", lambda path, drop: calls.append(path) or "x")
    again, hashed = mm.build(str(hf_model), first, workers=2)
    assert hashed == [] and calls == []
    assert again == first
    # A rehash reads everything again.
    _, hashed = mm.build(str(hf_model), first, workers=2, rehash=True)
    assert len(hashed) == 6


def test_build_rehashes_only_the_changed_file(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "a.bin").write_bytes(b"a" * 10)
    (model / "b.bin").write_bytes(b"b" * 10)
    first, _ = mm.build(str(model), {"files": {}})
    with open(model / "b.bin", "r+b") as handle:
        handle.write(b"X")
    os.utime(model / "b.bin", ns=(0, first["files"]["b.bin"]["mtime_ns"] + 1))
    second, hashed = mm.build(str(model), first)
    assert hashed == ["b.bin"]
    assert second["files"]["a.bin"] == first["files"]["a.bin"]
    assert second["files"]["b.bin"]["sha256"] != first["files"]["b.bin"]["sha256"]


def test_sha256_file_matches_hashlib_and_drops_cache(tmp_path, monkeypatch):
    data = os.urandom(3 * 1024 * 1024 + 7)
    path = tmp_path / "f"
    path.write_bytes(data)
    advice = []
    real = os.posix_fadvise
    monkeypatch.setattr(
        os, "posix_fadvise", lambda fd, off, n, adv: advice.append(adv) or real(fd, off, n, adv)
    )
    assert mm.sha256_file(str(path)) == hashlib.sha256(data).hexdigest()
    assert advice == [os.POSIX_FADV_SEQUENTIAL, os.POSIX_FADV_DONTNEED]


@pytest.mark.parametrize(
    ("actual", "expected_reasons"),
    [
        ({}, [("a", "missing", None), ("b", "missing", None)]),
        ({"a": {"size": 4, "sha256": "1"}, "b": {"size": 8, "sha256": "2"}}, [("a", "truncated", 4)]),
        ({"a": {"size": 12, "sha256": "1"}, "b": {"size": 8, "sha256": "2"}}, [("a", "size differs", 12)]),
        ({"a": {"size": 10, "sha256": "9"}, "b": {"size": 8, "sha256": "2"}}, [("a", "sha256 differs", 10)]),
        ({"a": {"size": 10, "sha256": "1"}, "b": {"size": 8, "sha256": "2"}}, []),
    ],
)
def test_compare(actual, expected_reasons):
    expected = {"files": {"a": {"size": 10, "sha256": "1"}, "b": {"size": 8, "sha256": "2"}}}
    mismatches, extra = mm.compare(expected, {"files": actual})
    assert [(m["path"], m["reason"], m["actual_size"]) for m in mismatches] == expected_reasons
    assert extra == []


def test_compare_lists_extra_files():
    _, extra = mm.compare({"files": {}}, {"files": {"stale.bin": {"size": 1, "sha256": "x"}}})
    assert extra == ["stale.bin"]


@pytest.mark.parametrize(
    ("sizes", "streams", "expected"),
    [
        ({"a": 4, "b": 3, "c": 2, "d": 1}, 2, [["a", "d"], ["b", "c"]]),
        ({"a": 4, "b": 3}, 8, [["a"], ["b"]]),
        ({"a": 4, "b": 3, "c": 2}, 1, [["a", "b", "c"]]),
        ({f"s{i}": 10 for i in range(6)}, 3, [["s0", "s3"], ["s1", "s4"], ["s2", "s5"]]),
    ],
)
def test_split_streams_balances_bytes(sizes, streams, expected):
    assert mm.split_streams(list(sizes), sizes, streams) == expected


def test_mount_root_covers_snapshot_and_blobs(hf_model, tmp_path):
    files = mm.scan(str(hf_model))
    assert mm.mount_root(str(hf_model), files) == str(tmp_path / "models")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    assert mm.mount_root(str(plain), mm.scan(str(plain))) == str(plain)


def test_default_manifest_path_is_beside_the_model():
    assert mm.default_manifest_path("/srv/models/Qwen/") == "/srv/models/.Qwen.sparkops-manifest.json"


def test_load_manifest_tolerates_garbage(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text("{not json")
    assert mm.load_manifest(str(bad)) == {"version": 1, "files": {}}
    bad.write_text(json.dumps({"version": 99, "files": {}}))
    assert mm.load_manifest(str(bad))["version"] == 1


def test_synthetic_shards_are_valid_safetensors_of_exact_size(hf_model):
    path = hf_model / "model-00002-of-00003.safetensors"
    data = path.read_bytes()
    assert len(data) == 1024 * 1024
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    tensor = header["model.layers.1.mlp.experts.weight"]
    assert tensor["dtype"] == "U8"
    assert tensor["data_offsets"] == [0, len(data) - 8 - length]
    assert length % 8 == 0
    assert os.readlink(path).startswith("../../blobs/")
    config = json.loads((hf_model / "config.json").read_text())
    assert config["num_hidden_layers"] == 3


def test_synthetic_is_idempotent_and_deterministic(hf_model, tmp_path):
    cache = str(tmp_path / "models" / "hf-cache" / "hub")
    _, _, todo, link_todo = syn.plan(cache, "lab/tiny", 3, 1, str(hf_model))
    assert todo == [] and link_todo is None
    _, _, created, changed = syn.create(cache, "lab/tiny", 3, 1, str(hf_model))
    assert created == [] and changed is False
    other = tmp_path / "other"
    syn.create(str(other), "lab/tiny", 3, 1)
    snapshot = other / "models--lab--tiny" / "snapshots" / syn.revision("lab/tiny", 3, 1)
    name = "model-00003-of-00003.safetensors"
    assert (snapshot / name).read_bytes() == (hf_model / name).read_bytes()


def test_synthetic_repairs_a_truncated_blob(hf_model, tmp_path):
    cache = str(tmp_path / "models" / "hf-cache" / "hub")
    target = os.path.realpath(hf_model / "model-00001-of-00003.safetensors")
    os.truncate(target, 100)
    _, _, created, _ = syn.create(cache, "lab/tiny", 3, 1, str(hf_model))
    assert created == ["model-00001-of-00003.safetensors"]
    assert os.path.getsize(hf_model / "model-00001-of-00003.safetensors") == 1024 * 1024


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("    268,435,456  50%  210.53MB/s    0:00:01 (xfr#1, to-chk=3/8)", 268435456),
        ("          0   0%    0.00kB/s    0:00:00", 0),
        ("sending incremental file list", None),
        ("model-00001-of-00008.safetensors", None),
    ],
)
def test_progress_bytes(line, expected):
    assert cp.progress_bytes(line) == expected


def test_rsync_argv_and_urls():
    ssh = cp.ssh_command("/k", "/kh", "aes128-gcm@openssh.com", 22)
    assert "StrictHostKeyChecking=yes" in ssh and "StrictHostKeyChecking=no" not in ssh
    assert "-c aes128-gcm@openssh.com" in ssh and "Compression=no" in ssh
    argv = cp.rsync_argv("rsync", "/m", "root@10.0.0.2:/m/", "/l", partial_dir=".p", io_timeout=60, ssh=ssh)
    assert argv[:3] == ["rsync", "-aL", "--partial-dir=.p"]
    assert "--ignore-times" in argv and "-W" not in argv
    assert argv[-2:] == ["/m/", "root@10.0.0.2:/m/"]
    assert (
        cp.dest_url("rsyncd", "10.0.0.2", "/m", user="u", port=873, module="mod")
        == "rsync://u@10.0.0.2:873/mod/"
    )


def test_synthetic_link_replaces_an_empty_directory_only(tmp_path):
    cache = str(tmp_path / "hub")
    link = tmp_path / "model"
    link.mkdir()
    syn.create(cache, "lab/tiny", 1, 1, str(link))
    assert link.is_symlink()
    other = tmp_path / "busy"
    other.mkdir()
    (other / "keep").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        syn.create(cache, "lab/tiny", 1, 1, str(other))
