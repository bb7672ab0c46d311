#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
module: image_archive_info
short_description: Read the image ID and tags held by a docker save archive, without loading it
version_added: 0.1.0
description:
  - Reads C(manifest.json) of a C(docker save) archive (plain, gzip, bzip2 or xz tar), seeking over the layers
    of a plain archive rather than reading them, and returns
    the ID Docker will report for the image once it is loaded (C(docker image inspect --format '{{.Id}}')),
    and its tags.
  - Both the classic layout (Docker 24 and earlier, config C(<hex>.json)) and the OCI layout of Docker 25
    and later (config C(blobs/sha256/<hex>)) are read.
  - With the containerd image store, Docker reports the manifest digest as the image ID instead; the
    C(vllm_image) role notices that after a load and says so.
  - The C(vllm_image) role compares this ID with each node's, so an archive is only copied and loaded
    where the node does not hold that image already.
author:
  - sparkops.vllm contributors
options:
  path:
    description:
      - The archive, on the host the module runs on (the controller in the C(vllm_image) role).
    type: path
    required: true
  reference:
    description:
      - The image reference to pick from the archive (C(repo:tag); a missing tag means C(latest)).
      - Empty takes the archive's only image, and fails when it holds several.
    type: str
    default: ""
extends_documentation_fragment:
  - sparkops.vllm.attributes.info
"""

EXAMPLES = r"""
- name: Read the lab image's archive on the controller
  sparkops.vllm.image_archive_info:
    path: .lab/images/vllm-lab.tar
    reference: sparkops/vllm-lab:cc9f594b5600
  delegate_to: localhost
  run_once: true
  register: archive

- name: Show the image ID the nodes must end with
  ansible.builtin.debug:
    msg: "{{ archive.image.image_id }}"
"""

RETURN = r"""
image:
  description: The image picked by O(reference).
  returned: success
  type: dict
  sample:
    image_id: sha256:a6e5f41634987f4cbf5d5d8d2ee4c2f51e2bd0b64a4b3e2d1e8c0e1ad4b0f0c1
    repo_tags: [sparkops/vllm-lab:cc9f594b5600]
    layers: 3
  contains:
    image_id: {description: "C(sha256:) and the digest of the image's config: its ID once loaded.", type: str}
    repo_tags: {description: The tags C(docker load) gives the image., type: list, elements: str}
    layers: {description: The number of layers., type: int}
images:
  description: Every image of the archive, in the archive's order.
  returned: success
  type: list
  elements: dict
size_bytes:
  description: The archive's size in bytes.
  returned: success
  type: int
  sample: 646973440
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils._image_archive import (
    ImageArchiveError,
    image_for_reference,
    images_from_manifest,
    read_manifest,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "reference": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    path = module.params["path"]
    if not os.path.isfile(path):
        module.fail_json(
            msg=f"{path}: no such archive. Fix: write it with `docker save -o {path} <image>`, "
            "or point the path at an existing archive."
        )
    try:
        images = images_from_manifest(read_manifest(path))
        image = image_for_reference(images, module.params["reference"])
    except ImageArchiveError as exc:
        module.fail_json(msg=f"{path}: {exc}. Fix: write it again with `docker save -o {path} <image>`.")
    module.exit_json(changed=False, image=image, images=images, size_bytes=os.path.getsize(path))


if __name__ == "__main__":
    main()
