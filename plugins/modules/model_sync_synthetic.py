#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
module: model_sync_synthetic
short_description: Create a synthetic safetensors model in the Hugging Face cache layout (lab and benchmarks)
version_added: 0.1.0
description:
  - Builds C(<cache_dir>/models--<org>--<name>/) with C(refs/main), C(blobs/<sha256>) and
    C(snapshots/<revision>/) whose files are relative links into C(../../blobs/), as C(hf download) leaves a
    model.
  - The snapshot holds C(config.json) (a tiny MoE config), C(generation_config.json),
    C(model.safetensors.index.json) and O(shards) C(*.safetensors) files of exactly O(shard_mib) MiB each,
    with a valid safetensors header and deterministic incompressible bytes, so every run builds byte-identical
    files.
  - Optionally points O(link) (the model path vLLM is given) at the snapshot with a relative link.
  - Idempotent in effect, since files whose link, size and header are right are left alone (a rerun
    writes nothing).
  - For the lab only; a real cluster's model is already on the head or downloaded with C(hf download).
author:
  - sparkops.vllm contributors
options:
  cache_dir:
    description: The Hugging Face hub cache directory (what C(HF_HUB_CACHE) would be).
    type: path
    required: true
  repo_id:
    description: The model's repository id, C(org/name).
    type: str
    required: true
  shards:
    description: Number of safetensors shards.
    type: int
    required: true
  shard_mib:
    description: Size of each shard in MiB.
    type: int
    required: true
  link:
    description: A path to point at the snapshot with a relative link (the model path), or none.
    type: path
attributes:
  check_mode:
    support: full
    description: Reports what it would create without writing.
  diff_mode:
    support: none
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: A 512 MiB synthetic model in the HF cache layout, linked at the model path
  sparkops.vllm.model_sync_synthetic:
    cache_dir: /srv/models/hf-cache/hub
    repo_id: sparkops-lab/tiny-moe
    shards: 8
    shard_mib: 64
    link: /srv/models/sparkops-lab-tiny-moe
"""

RETURN = r"""
revision:
  description: The snapshot's revision (stable for the same repo_id, shards and shard_mib).
  returned: success
  type: str
  sample: 3f786850e387550fdab836ed7e6dc881de23001b
snapshot:
  description: The snapshot directory.
  returned: success
  type: str
  sample: /srv/models/hf-cache/hub/models--lab--tiny/snapshots/3f786850e387550fdab836ed7e6dc881de23001b
created:
  description: Files (re)created this run, or that would be in check mode.
  returned: success
  type: list
  elements: str
total_bytes:
  description: Bytes of the shards.
  returned: success
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils._model_sync_synthetic import MIB, create, plan


def main():
    module = AnsibleModule(
        argument_spec={
            "cache_dir": {"type": "path", "required": True},
            "repo_id": {"type": "str", "required": True},
            "shards": {"type": "int", "required": True},
            "shard_mib": {"type": "int", "required": True},
            "link": {"type": "path"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["shards"] < 1 or p["shard_mib"] < 1 or p["repo_id"].count("/") != 1:
        module.fail_json(
            msg=f"shards ({p['shards']}) and shard_mib ({p['shard_mib']}) must be 1 or more and repo_id "
            f"({p['repo_id']}) of the form org/name."
        )
    args = (p["cache_dir"], p["repo_id"], p["shards"], p["shard_mib"], p["link"])
    try:
        if module.check_mode:
            rev, snapshot, created, link_todo = plan(*args)
            changed = bool(created) or link_todo is not None
        else:
            rev, snapshot, created, other_changed = create(*args)
            changed = bool(created) or other_changed
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"Cannot create the synthetic model under {p['cache_dir']}: {exc}")
    module.exit_json(
        changed=changed,
        revision=rev,
        snapshot=snapshot,
        created=created,
        total_bytes=p["shards"] * p["shard_mib"] * MIB,
    )


if __name__ == "__main__":
    main()
