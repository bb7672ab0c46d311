# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Model manifests: sizes and sha256 digests of a model folder's files.

A manifest is computed once on the head and kept beside the model. Every entry
is keyed by the file's size and mtime, so a rerun rehashes nothing when nothing
changed. Workers keep their own manifest (the same format) as a record of what
was verified there; comparing it with the head's names every file that is
missing, truncated or corrupted.

Reading a file for its digest fills the page cache, which on a unified-memory
node (GB10) is memory vLLM needs, so every hashed file is flushed
(``fdatasync``, because DONTNEED leaves dirty pages) and then dropped from the
page cache (``posix_fadvise(POSIX_FADV_DONTNEED)``). A freshly copied file is
still dirty in the cache: the flush writes it out before it is dropped.
"""

import contextlib
import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.sparkops.vllm.plugins.module_utils._safe_read import open_regular

MANIFEST_VERSION = 1
CHUNK_BYTES = 8 * 1024 * 1024
# Not part of the model: our own state (partial transfers, manifests) and the
# metadata `hf download --local-dir` keeps for resuming.
DEFAULT_EXCLUDES = (".sparkops-", ".cache")


class ManifestError(Exception):
    """A model folder that cannot be read as a model, with what to do about it."""


def default_manifest_path(model_path):
    """Beside the model (never inside it: an HF cache snapshot stays pristine)."""
    model_path = model_path.rstrip("/")
    return os.path.join(
        os.path.dirname(model_path), "." + os.path.basename(model_path) + ".sparkops-manifest.json"
    )


def _excluded(name, excludes):
    return any(name == pattern or name.startswith(pattern) for pattern in excludes)


def scan(model_path, excludes=DEFAULT_EXCLUDES):
    """Every file of the model, links followed: {relpath: {size, mtime_ns, link}}.

    ``link`` is true when the path or one of its parents inside the model is a
    symlink (the Hugging Face cache layout), so that reports can say so.
    """
    if not os.path.isdir(model_path):
        raise ManifestError(
            f"{model_path} is not a directory (or a link to one). Put the model there, or point "
            "sparkops_model_path at the folder that holds its config.json and weight files."
        )
    files = {}
    broken = []
    for root, dirs, names in os.walk(model_path, followlinks=True):
        rel_root = os.path.relpath(root, model_path)
        if rel_root == ".":
            dirs[:] = sorted(d for d in dirs if not _excluded(d, excludes))
            wanted = [n for n in names if not _excluded(n, excludes)]
        else:
            dirs.sort()
            wanted = names
        for name in sorted(wanted):
            full = os.path.join(root, name)
            rel = os.path.normpath(os.path.join(rel_root, name))
            try:
                st = os.stat(full)
            except FileNotFoundError:
                broken.append(f"{rel} -> {os.readlink(full)}" if os.path.islink(full) else rel)
                continue
            if not os.path.isfile(full):
                continue
            files[rel] = {
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                "link": os.path.realpath(full) != os.path.join(os.path.realpath(model_path), rel),
            }
    if broken:
        raise ManifestError(
            f"{model_path} has broken links: {', '.join(broken)}. A copy made with `rsync -a` (without -L) "
            "of a Hugging Face cache keeps the links and loses the blobs; copy it again dereferencing links, "
            "or download the model again."
        )
    return files


def drop_from_page_cache(fd):
    """Flush the file's dirty pages, then drop all its pages from the page cache."""
    # A read-only filesystem has nothing dirty to flush.
    with contextlib.suppress(OSError):
        os.fdatasync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def sha256_file(path, drop_cache=True):
    """The file's sha256 hex digest; with drop_cache, its pages leave the page cache afterwards."""
    digest = hashlib.sha256()
    # open_regular: a FIFO or device among the model's files is refused, never waited on.
    with open_regular(path, "rb") as handle:
        fd = handle.fileno()
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while True:
            chunk = handle.read(CHUNK_BYTES)
            if not chunk:
                break
            digest.update(chunk)
        if drop_cache:
            drop_from_page_cache(fd)
    return digest.hexdigest()


def load_manifest(path):
    """The manifest at path, or an empty one when there is none or it is unreadable."""
    try:
        with open_regular(path, "r", encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {"version": MANIFEST_VERSION, "files": {}}
    if (
        not isinstance(data, dict)
        or data.get("version") != MANIFEST_VERSION
        or not isinstance(data.get("files"), dict)
    ):
        return {"version": MANIFEST_VERSION, "files": {}}
    return data


def build(model_path, previous, *, workers=4, rehash=False, drop_cache=True, excludes=DEFAULT_EXCLUDES):
    """A fresh manifest of model_path, reusing previous digests whose size and mtime still match.

    Returns (manifest, hashed): the relative paths that had to be hashed.
    """
    current = scan(model_path, excludes)
    old = previous.get("files", {})
    entries = {}
    to_hash = []
    for rel, info in current.items():
        known = old.get(rel)
        if (
            not rehash
            and known
            and known.get("size") == info["size"]
            and known.get("mtime_ns") == info["mtime_ns"]
            and known.get("sha256")
        ):
            entries[rel] = {"size": info["size"], "mtime_ns": info["mtime_ns"], "sha256": known["sha256"]}
        else:
            to_hash.append(rel)
    # Largest first, so the last file hashed is not a big one alone on one thread.
    to_hash.sort(key=lambda rel: -current[rel]["size"])
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        digests = pool.map(lambda rel: sha256_file(os.path.join(model_path, rel), drop_cache), to_hash)
        for rel, digest in zip(to_hash, digests, strict=True):
            entries[rel] = {
                "size": current[rel]["size"],
                "mtime_ns": current[rel]["mtime_ns"],
                "sha256": digest,
            }
    manifest = {
        "version": MANIFEST_VERSION,
        "files": dict(sorted(entries.items())),
        "total_bytes": sum(e["size"] for e in entries.values()),
        "linked_files": sum(1 for info in current.values() if info["link"]),
    }
    return manifest, sorted(to_hash)


def dumps(manifest):
    """The manifest as written to disk: stable, so an unchanged model rewrites nothing."""
    return json.dumps(manifest, indent=1, sort_keys=True) + "\n"


def compare(expected, actual):
    """Files of ``expected`` (the head's manifest) that ``actual`` lacks or holds differently.

    Returns (mismatches, extra): mismatches is a sorted list of
    {path, reason, expected_size, actual_size}; extra lists files the head does not have.
    """
    exp = expected.get("files", {})
    act = actual.get("files", {})
    mismatches = []
    for rel, want in sorted(exp.items()):
        have = act.get(rel)
        if have is None:
            reason = "missing"
        elif have["size"] != want["size"]:
            reason = "truncated" if have["size"] < want["size"] else "size differs"
        elif have.get("sha256") != want.get("sha256"):
            reason = "sha256 differs"
        else:
            continue
        mismatches.append(
            {
                "path": rel,
                "reason": reason,
                "expected_size": want["size"],
                "actual_size": None if have is None else have["size"],
            }
        )
    extra = sorted(set(act) - set(exp))
    return mismatches, extra


def split_streams(files, sizes, streams):
    """Split files into at most ``streams`` lists of nearly equal bytes (largest first, to the lightest)."""
    streams = max(1, min(streams, len(files)))
    buckets = [[] for _ in range(streams)]
    loads = [0] * streams
    for rel in sorted(files, key=lambda rel: (-sizes[rel], rel)):
        index = loads.index(min(loads))
        buckets[index].append(rel)
        loads[index] += sizes[rel]
    return [sorted(bucket) for bucket in buckets if bucket]


def mount_root(model_path, manifest_files):
    """The directory a container must bind-mount (at the same path) so the model's links resolve inside it.

    That is the common ancestor of the model path itself and the real path of
    every file: for a plain folder the folder, for a Hugging Face cache snapshot
    the folder holding both the snapshot and its ``blobs/``.
    """
    model_path = os.path.abspath(model_path.rstrip("/") or "/")
    paths = [model_path, os.path.realpath(model_path)]
    paths.extend(os.path.realpath(os.path.join(model_path, rel)) for rel in manifest_files)
    return os.path.commonpath(paths)


def fs_free_bytes(path):
    """(free bytes, checked path): f_bavail as df reports it, at the nearest existing parent of path."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, path
