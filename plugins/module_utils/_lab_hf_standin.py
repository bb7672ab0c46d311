# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The lab's stand-in for the Hugging Face CLI: ``hf download REPO --local-dir DIR [--revision REV]``.

The lab cannot reach huggingface.co, so model_sync's download (roles/model_sync/tasks/
download.yml) runs this instead of ``hf`` on the lab's head (the lab inventory's
``model_sync_hf_cli``). It "downloads" revision REV of the lab's synthetic model
(``_model_sync_synthetic``: the same files and sizes, other shard bytes per revision)
into DIR the way ``hf download --local-dir`` lays a download out in huggingface_hub
0.23 and later (src/huggingface_hub/_local_folder.py, read at commit 02c8d0a:
``get_local_download_paths``, ``write_download_metadata``, ``_huggingface_dir``):

    DIR/<file>                                         plain files, no links
    DIR/.cache/huggingface/.gitignore                  "*"
    DIR/.cache/huggingface/download/<file>.metadata    commit hash, etag, timestamp, one a line

The commit hash is a stable 40-hex of the repository and revision; the etag of a
file is its sha256 (what the Hub gives for LFS files). A file already complete with
its metadata is not written again, so a rerun (a resumed download) writes nothing.
Shipped to the lab head as a plain script with ``_model_sync_synthetic.py`` beside it
(roles/lab/tasks/hf_standin.yml); stdlib only. It never reads a token.

Options it takes (the others ``hf download`` has are refused): REPO, ``--local-dir``,
``--revision`` (default ``main``); the shard count and size come from
``SPARKOPS_LAB_SHARDS`` and ``SPARKOPS_LAB_SHARD_MIB`` (the lab role writes them into
the wrapper it installs).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time

try:
    from ansible_collections.sparkops.vllm.plugins.module_utils import _model_sync_synthetic as synthetic
except ImportError:  # shipped as plain files, beside this one
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _model_sync_synthetic as synthetic  # type: ignore[no-redef]

HF_DIR = os.path.join(".cache", "huggingface")
GITIGNORE = "*"


def commit_hash(repo_id: str, revision: str) -> str:
    """A stable 40-hex commit for a revision of the lab's model."""
    return hashlib.sha1(f"sparkops-lab:{repo_id}@{revision}".encode()).hexdigest()


def files(repo_id: str, revision: str, shards: int, shard_mib: int) -> dict:
    """Each file's name and a function giving its bytes in chunks."""
    smalls = synthetic.small_files(repo_id, shards, shard_mib, variant=revision)
    out = {name: (lambda content=content: iter([content])) for name, content in smalls.items()}
    for index in range(shards):
        name = synthetic.shard_name(index, shards)
        out[name] = lambda index=index: synthetic.shard_chunks(index, shards, shard_mib, variant=revision)
    return out


def _metadata_path(local_dir: str, name: str) -> str:
    return os.path.join(local_dir, HF_DIR, "download", f"{name}.metadata")


def _complete(local_dir: str, name: str, commit: str) -> bool:
    """Whether the file is there with metadata of this commit, not modified since (huggingface_hub's test)."""
    try:
        with open(_metadata_path(local_dir, name), encoding="utf-8") as handle:
            recorded_commit = handle.readline().strip()
            handle.readline()
            timestamp = float(handle.readline().strip())
        return recorded_commit == commit and os.stat(os.path.join(local_dir, name)).st_mtime - 1 <= timestamp
    except (OSError, ValueError):
        return False


def download(repo_id: str, local_dir: str, revision: str, shards: int, shard_mib: int) -> list[str]:
    """Write what is missing into local_dir; the names written."""
    commit = commit_hash(repo_id, revision)
    hf_dir = os.path.join(local_dir, HF_DIR)
    os.makedirs(os.path.join(hf_dir, "download"), exist_ok=True)
    gitignore = os.path.join(hf_dir, ".gitignore")
    if not os.path.exists(gitignore):
        with open(gitignore, "w", encoding="utf-8") as handle:
            handle.write(GITIGNORE)
    written = []
    for name, chunks in sorted(files(repo_id, revision, shards, shard_mib).items()):
        if _complete(local_dir, name, commit):
            continue
        digest = hashlib.sha256()
        fd, tmp = tempfile.mkstemp(
            dir=os.path.join(hf_dir, "download"), prefix=f".{name}.", suffix=".incomplete"
        )
        try:
            with os.fdopen(fd, "wb") as handle:
                for chunk in chunks():
                    digest.update(chunk)
                    handle.write(chunk)
            os.chmod(tmp, 0o644)
            os.replace(tmp, os.path.join(local_dir, name))
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        with open(_metadata_path(local_dir, name), "w", encoding="utf-8") as handle:
            handle.write(f"{commit}\n{digest.hexdigest()}\n{time.time()}\n")
        written.append(name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hf", description="The sparkops lab's stand-in for `hf download`.")
    sub = parser.add_subparsers(dest="command", required=True)
    dl = sub.add_parser("download", help="write a revision of the lab's synthetic model into --local-dir")
    dl.add_argument("repo_id")
    dl.add_argument("--local-dir", required=True)
    dl.add_argument("--revision", default="main")
    args = parser.parse_args(argv)
    shards = int(os.environ.get("SPARKOPS_LAB_SHARDS", "8"))
    shard_mib = int(os.environ.get("SPARKOPS_LAB_SHARD_MIB", "64"))
    if not os.path.isabs(args.local_dir):
        parser.error(f"--local-dir {args.local_dir!r}: the lab's stand-in takes an absolute directory")
    written = download(args.repo_id, args.local_dir, args.revision, shards, shard_mib)
    # hf download prints the local directory last.
    print(f"lab stand-in: {args.repo_id}@{args.revision}: wrote {len(written)} file(s)", file=sys.stderr)
    print(args.local_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
