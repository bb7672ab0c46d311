# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""A synthetic model in the Hugging Face cache layout, for the lab and the benchmark.

    <cache_dir>/models--<org>--<name>/
      refs/main                       the revision
      blobs/<sha256>                  the files' contents, named by their digest
      snapshots/<revision>/<file>     relative links into ../../blobs/
    <link>                            optional relative link to the snapshot

Shards are safetensors files: an 8-byte little-endian header length, a JSON
header (padded to 8 bytes) declaring one U8 tensor, then deterministic
pseudo-random bytes (incompressible, like real weights), so every run builds
byte-identical files and a shard's size is exactly shard_mib MiB.
"""

import hashlib
import json
import os
import random
import struct
import tempfile

MIB = 1024 * 1024


def revision(repo_id, shards, shard_mib):
    """A stable 40-hex revision for the model's parameters."""
    return hashlib.sha1(f"{repo_id}:{shards}x{shard_mib}".encode()).hexdigest()


def shard_name(index, shards):
    return f"model-{index + 1:05d}-of-{shards:05d}.safetensors"


def shard_header(index, shards, shard_mib):
    """The safetensors header bytes (length prefix included) for a shard of exactly shard_mib MiB."""
    total = shard_mib * MIB

    def encode(data_bytes):
        header = {
            "__metadata__": {"format": "pt", "sparkops": "synthetic"},
            f"model.layers.{index}.mlp.experts.weight": {
                "dtype": "U8",
                "shape": [data_bytes],
                "data_offsets": [0, data_bytes],
            },
        }
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        return text

    # The data size depends on the header's length, which depends on the digits of the data size.
    data_bytes = total - 8 - len(encode(total))
    text = encode(data_bytes)
    data_bytes = total - 8 - len(text)
    text = encode(data_bytes)
    if 8 + len(text) + data_bytes != total:
        raise ValueError(f"shard_mib {shard_mib} is too small for a safetensors header")
    return struct.pack("<Q", len(text)) + text, data_bytes


def shard_chunks(index, shards, shard_mib, variant=""):
    """The shard's bytes, in chunks of at most 1 MiB.

    ``variant`` (a revision's name; empty for the lab's model) seeds other bytes of the
    same size, so two revisions of one model differ in every shard.
    """
    header, data_bytes = shard_header(index, shards, shard_mib)
    yield header
    seed = f"sparkops-synthetic-{index}-{shards}-{shard_mib}" + (f"-{variant}" if variant else "")
    rng = random.Random(seed)
    while data_bytes > 0:
        size = min(MIB, data_bytes)
        yield rng.randbytes(size)
        data_bytes -= size


def small_files(repo_id, shards, shard_mib, variant=""):
    """config.json (a tiny MoE config), the safetensors index and generation_config.json.

    ``variant`` (a revision's name) is recorded in config.json's ``_sparkops_revision``.
    """
    config = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "_name_or_path": repo_id,
        "hidden_size": 256,
        "intermediate_size": 512,
        "moe_intermediate_size": 128,
        "num_hidden_layers": shards,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
    }
    if variant:
        config["_sparkops_revision"] = variant
    weight_map = {f"model.layers.{i}.mlp.experts.weight": shard_name(i, shards) for i in range(shards)}
    index = {"metadata": {"total_size": shards * shard_mib * MIB}, "weight_map": weight_map}
    return {
        "config.json": json.dumps(config, indent=2, sort_keys=True).encode() + b"\n",
        "generation_config.json": b'{"max_new_tokens": 16}\n',
        "model.safetensors.index.json": json.dumps(index, indent=2, sort_keys=True).encode() + b"\n",
    }


def repo_dir(cache_dir, repo_id):
    return os.path.join(cache_dir, "models--" + repo_id.replace("/", "--"))


def _blob_ok(link_path, expected_size, expected_head=None):
    try:
        if not os.path.islink(link_path) or os.path.getsize(link_path) != expected_size:
            return False
        if expected_head is not None:
            with open(link_path, "rb") as handle:
                return handle.read(len(expected_head)) == expected_head
        return True
    except OSError:
        return False


def _write_blob(blobs, chunks):
    """Write chunks to a temporary file in blobs/, then rename it to its digest; return the digest."""
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=blobs, prefix=".incomplete.")
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                digest.update(chunk)
                handle.write(chunk)
            handle.flush()
            os.fdatasync(handle.fileno())
            # A synthetic model is written once; keep it out of the page cache like a real one.
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(blobs, digest.hexdigest()))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return digest.hexdigest()


def _ensure_link(path, target):
    """Point path at target (a relative link); True when it changed."""
    if os.path.islink(path) and os.readlink(path) == target:
        return False
    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            # `docker run -v` leaves an empty directory when it mounts a model path that is not there yet.
            if os.listdir(path):
                raise ValueError(
                    f"{path} is a directory that is not empty; remove it or choose another link path"
                )
            os.rmdir(path)
        else:
            os.unlink(path)
    os.symlink(target, path)
    return True


def plan(cache_dir, repo_id, shards, shard_mib, link=None):
    """What is missing: (files to (re)create, link to (re)point or None)."""
    rev = revision(repo_id, shards, shard_mib)
    snapshot = os.path.join(repo_dir(cache_dir, repo_id), "snapshots", rev)
    todo = []
    for name, content in small_files(repo_id, shards, shard_mib).items():
        if not _blob_ok(os.path.join(snapshot, name), len(content), content):
            todo.append(name)
    for i in range(shards):
        header, _ = shard_header(i, shards, shard_mib)
        if not _blob_ok(os.path.join(snapshot, shard_name(i, shards)), shard_mib * MIB, header):
            todo.append(shard_name(i, shards))
    link_todo = None
    if link:
        target = os.path.relpath(snapshot, os.path.dirname(os.path.abspath(link)))
        if not (os.path.islink(link) and os.readlink(link) == target):
            link_todo = target
    return rev, snapshot, todo, link_todo


def create(cache_dir, repo_id, shards, shard_mib, link=None):
    """Create what plan() says is missing; returns (revision, snapshot, created files, link changed)."""
    rev, snapshot, todo, link_todo = plan(cache_dir, repo_id, shards, shard_mib, link)
    repo = repo_dir(cache_dir, repo_id)
    blobs = os.path.join(repo, "blobs")
    for directory in (blobs, snapshot, os.path.join(repo, "refs")):
        os.makedirs(directory, exist_ok=True)
    refs_main = os.path.join(repo, "refs", "main")
    try:
        with open(refs_main, encoding="utf-8") as handle:
            ref_ok = handle.read() == rev
    except OSError:
        ref_ok = False
    if not ref_ok:
        with open(refs_main, "w", encoding="utf-8") as handle:
            handle.write(rev)
    smalls = small_files(repo_id, shards, shard_mib)
    for name in todo:
        if name in smalls:
            digest = _write_blob(blobs, [smalls[name]])
        else:
            index = int(name.split("-")[1]) - 1
            digest = _write_blob(blobs, shard_chunks(index, shards, shard_mib))
        _ensure_link(os.path.join(snapshot, name), os.path.join("..", "..", "blobs", digest))
    link_changed = False
    if link_todo is not None:
        os.makedirs(os.path.dirname(os.path.abspath(link)), exist_ok=True)
        link_changed = _ensure_link(link, link_todo)
    return rev, snapshot, todo, link_changed or not ref_ok
