#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
module: model_manifest
short_description: Keep a manifest of a model's file sizes and sha256 digests; check a copy against one
version_added: 0.1.0
description:
  - Walks a model folder, following symlinks (a Hugging Face cache snapshot holds links into C(blobs/)), and
    records each file's size, mtime and sha256 in a manifest kept beside the model.
  - Entries are keyed by size and mtime, so a file whose size and mtime did not change is never hashed again.
    Files are hashed in parallel threads.
  - Every file it hashes is flushed (C(fdatasync)) and then dropped from the page cache (C(posix_fadvise
    DONTNEED)), because on unified-memory nodes (GB10) page cache counts against the memory vLLM needs.
    A file copied just before is still dirty in the cache; the flush is what lets it be dropped.
  - With O(expected) (the head's manifest), compares this node's files against it and returns every file that
    is missing, truncated or corrupted, the bytes a copy needs and the free space there.
  - Broken links fail, naming each one.
author:
  - sparkops.vllm contributors
options:
  path:
    description:
      - The model folder (or a link to it), as vLLM is given it.
    type: path
    required: true
  manifest_path:
    description:
      - Where the manifest is kept. Defaults to C(.<name>.sparkops-manifest.json) beside the model folder, so
        that the model folder itself (for example a Hugging Face cache snapshot) is never written to.
    type: path
  expected:
    description:
      - A manifest (the RV(manifest) of this module on the head) to check this node's files against.
    type: dict
  missing_ok:
    description:
      - Accept a model folder that does not exist yet (a worker before its first copy); every expected file is
        then missing. Without it a missing folder fails.
    type: bool
    default: false
  hash_workers:
    description:
      - Files hashed at the same time.
    type: int
    default: 4
  rehash:
    description:
      - Hash every file again, even when its size and mtime match the manifest (finds corruption that kept
        both).
    type: bool
    default: false
  drop_cache:
    description:
      - Flush and drop every hashed file from the page cache afterwards.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Hashes and compares as usual, and reports the manifest it would write without writing it.
  diff_mode:
    support: full
    description: Shows the manifest's entries before and after.
  idempotent:
    support: full
    description: With the model unchanged, the manifest is left as it is and nothing is hashed.
"""

EXAMPLES = r"""
- name: Manifest of the model on the head
  sparkops.vllm.model_manifest:
    path: /srv/models/Qwen3.5-122B-A10B-FP8
    hash_workers: 8
  register: head_manifest

- name: Check a worker's copy against the head's
  sparkops.vllm.model_manifest:
    path: /srv/models/Qwen3.5-122B-A10B-FP8
    expected: "{{ hostvars[groups['head'] | first].head_manifest.manifest }}"
    missing_ok: true
  register: worker_check

- name: Name the files a copy must bring
  ansible.builtin.debug:
    msg: "{{ worker_check.mismatches | map(attribute='path') | list }}"
"""

RETURN = r"""
manifest:
  description: The manifest of this node's files (what is written to RV(manifest_path)).
  returned: success
  type: dict
  sample:
    version: 1
    total_bytes: 5368709120
    linked_files: 3
    files:
      model-00001-of-00002.safetensors: {size: 2684354560, mtime_ns: 1764500000000000000, sha256: "9f86d0..."}
manifest_path:
  description: Where the manifest is kept.
  returned: success
  type: str
  sample: /srv/models/.Qwen3.5-122B-A10B-FP8.sparkops-manifest.json
hashed:
  description: Files that had to be hashed this run (new, or changed size or mtime); empty on a rerun.
  returned: success
  type: list
  elements: str
hashed_bytes:
  description: Bytes read to hash them.
  returned: success
  type: int
files:
  description: Number of files in the manifest.
  returned: success
  type: int
total_bytes:
  description: Bytes of all files in the manifest.
  returned: success
  type: int
mount_root:
  description:
    - The directory a container must bind-mount at the same path so that the model and everything its links
      point
      to are reachable (the model folder itself when it holds no links out of it).
  returned: success
  type: str
  sample: /srv/models
mismatches:
  description: With O(expected), the expected files this node lacks or holds differently.
  returned: when expected is given
  type: list
  elements: dict
  sample:
    - {path: model-00003-of-00008.safetensors, reason: truncated, expected_size: 67108864, actual_size:
      1048576}
  contains:
    path: {description: The file's path inside the model folder, type: str}
    reason: {description: "C(missing), C(truncated), C(size differs) or C(sha256 differs)", type: str}
    expected_size: {description: Its size on the head, type: int}
    actual_size: {description: Its size here; null when missing, type: int}
extra:
  description: With O(expected), files here that the head does not have (left in place).
  returned: when expected is given
  type: list
  elements: str
missing_bytes:
  description: With O(expected), the bytes a copy must bring (the expected sizes of the mismatched files).
  returned: when expected is given
  type: int
avail_bytes:
  description: Free bytes on the filesystem that holds (or will hold) the model.
  returned: success
  type: int
avail_path:
  description: The existing path whose filesystem was measured.
  returned: success
  type: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils._model_manifest import (
    ManifestError,
    build,
    compare,
    default_manifest_path,
    dumps,
    fs_free_bytes,
    load_manifest,
    mount_root,
)


def _write(path, text):
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".sparkops-manifest.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _diff_lines(manifest):
    return "".join(
        f"{rel} {e['size']} {e['sha256']}\n" for rel, e in sorted(manifest.get("files", {}).items())
    )


def run(params, check_mode):
    """The module's result as a dict (raises ManifestError)."""
    path = params["path"].rstrip("/") or "/"
    manifest_path = params["manifest_path"] or default_manifest_path(path)
    previous = load_manifest(manifest_path)
    present = os.path.isdir(path)
    if not present and not params["missing_ok"]:
        raise ManifestError(
            f"{path} does not exist. Put the model there (or set missing_ok for a node that has not "
            "received it yet)."
        )
    if present:
        manifest, hashed = build(
            path,
            previous,
            workers=params["hash_workers"],
            rehash=params["rehash"],
            drop_cache=params["drop_cache"],
        )
    else:
        manifest, hashed = (
            {"version": previous["version"], "files": {}, "total_bytes": 0, "linked_files": 0},
            [],
        )
    files = manifest["files"]
    old_text = dumps(previous) if previous.get("files") else ""
    new_text = dumps(manifest)
    changed = present and old_text != new_text
    if changed and not check_mode:
        _write(manifest_path, new_text)
    avail, avail_path = fs_free_bytes(path)
    result = {
        "changed": changed,
        "manifest": manifest,
        "manifest_path": manifest_path,
        "hashed": hashed,
        "hashed_bytes": sum(files[rel]["size"] for rel in hashed),
        "files": len(files),
        "total_bytes": manifest["total_bytes"],
        "mount_root": mount_root(path, files) if present else path,
        "avail_bytes": avail,
        "avail_path": avail_path,
        "diff": {
            "before_header": manifest_path,
            "after_header": manifest_path,
            "before": _diff_lines(previous),
            "after": _diff_lines(manifest),
        },
    }
    if params["expected"] is not None:
        mismatches, extra = compare(params["expected"], manifest)
        result["mismatches"] = mismatches
        result["extra"] = extra
        result["missing_bytes"] = sum(m["expected_size"] for m in mismatches)
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "manifest_path": {"type": "path"},
            "expected": {"type": "dict"},
            "missing_ok": {"type": "bool", "default": False},
            "hash_workers": {"type": "int", "default": 4},
            "rehash": {"type": "bool", "default": False},
            "drop_cache": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    if module.params["hash_workers"] < 1:
        module.fail_json(msg=f"hash_workers is {module.params['hash_workers']}; it must be 1 or more.")
    try:
        result = run(module.params, module.check_mode)
    except ManifestError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(
            msg=f"Cannot read the model at {module.params['path']}: {exc}. Check the path and its mode."
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
