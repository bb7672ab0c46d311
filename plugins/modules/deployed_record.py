#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
module: deployed_record
short_description: Write one section of the node's record of what is deployed
version_added: 0.2.0
description:
  - Reads the JSON record at O(path) (C(<state dir>/deployed.json), docs/deployed-record.md), puts O(data) in as
    the section O(section), and writes it back only when that changes what is recorded.
  - O(compare) names the keys of O(data) that decide whether the section changes (the deployed choice); the other
    keys (a plan's predictions) keep the values of the run that deployed it. C(recorded_at) moves only with a change.
  - Without O(section), O(data) is the whole record (the measured record), with C(recorded_at) added.
  - Root's file, not world-readable (O(mode)); secrets never belong in it.
author:
  - sparkops.vllm contributors
options:
  path:
    description: The record's file. Its directory must exist.
    type: path
    required: true
  section:
    description: The section this stage owns (C(plan), C(image), C(network), C(serve)); omitted, the whole record.
    type: str
  data:
    description: The section's content (JSON-able; no C(recorded_at)).
    type: dict
    required: true
  identity:
    description: Top-level keys naming the record's node (C(cluster), C(host), C(role)).
    type: dict
    default: {}
  compare:
    description: The keys of O(data) that decide whether the section changes; omitted, all of them.
    type: list
    elements: str
  mode:
    description: The file's mode.
    type: raw
    default: "0640"
attributes:
  check_mode:
    support: full
    description: Reports whether the record would change, and how (with --diff), without writing it.
  diff_mode:
    support: full
    description: The record's text before and after.
  idempotent:
    support: full
    description: The same content is the same file; a rerun is changed=false.
"""

EXAMPLES = r"""
- name: Record the image the node's units run
  sparkops.vllm.deployed_record:
    path: /var/lib/sparkops/lab/deployed.json
    section: image
    identity: {cluster: lab, host: "{{ inventory_hostname }}"}
    data:
      ref: sparkops/vllm-lab:ef2343e6f453
      id: sha256:0123
      vllm_version: 0.11.0
"""

RETURN = r"""
record:
  description: The record as it is (or, in check mode, would be) after the task.
  returned: success
  type: dict
  sample:
    schema: 1
    cluster: lab
    host: spark-1
    recorded_at: "2026-12-01T18:40:00Z"
    sections:
      image: {ref: "sparkops/vllm-lab:ef2343e6f453", id: "sha256:0123", recorded_at: "2026-12-01T18:40:00Z"}
"""

import os
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils import _deployed_record as record
from ansible_collections.sparkops.vllm.plugins.module_utils._safe_read import open_regular


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "section": {"type": "str"},
            "data": {"type": "dict", "required": True},
            "identity": {"type": "dict", "default": {}},
            "compare": {"type": "list", "elements": "str"},
            "mode": {"type": "raw", "default": "0640"},
        },
        supports_check_mode=True,
    )
    path = module.params["path"]
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        if module.check_mode:
            # The stage that creates it has only reported that it would.
            module.exit_json(changed=True, record={}, path=path, msg=f"{directory} does not exist yet")
        module.fail_json(
            msg=f"deployed_record: the directory {directory} of {path} does not exist. Fix: run the ray_cluster stage "
            "first (it creates the state directory), or check ray_cluster_state_dir."
        )
    before = ""
    if os.path.exists(path):
        with open_regular(path, "r", encoding="utf-8") as handle:
            before = handle.read()
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        doc, changed = record.update(
            before,
            section=module.params["section"],
            data=module.params["data"],
            now=now,
            identity=module.params["identity"],
            compare=module.params["compare"],
        )
    except record.RecordError as exc:
        module.fail_json(msg=f"deployed_record: {exc}")
    after = record.dumps(doc)
    changed = changed or not before
    result = {"changed": changed, "record": doc, "path": path}
    if module._diff:
        result["diff"] = {
            "before": before,
            "after": after if changed else before,
            "before_header": path,
            "after_header": path,
        }
    if changed and not module.check_mode:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".deployed_record.")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(after)
        module.atomic_move(tmp, path)
    if os.path.exists(path) or not module.check_mode:
        file_args = module.load_file_common_arguments({"path": path, "mode": module.params["mode"]})
        result["changed"] = module.set_fs_attributes_if_different(file_args, result["changed"])
    elif module.check_mode:
        result["changed"] = True
    module.exit_json(**result)


if __name__ == "__main__":
    main()
