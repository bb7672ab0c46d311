#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

from __future__ import annotations

DOCUMENTATION = r"""
module: support_bundle
short_description: Stage collected logs with secrets redacted, and pack them with the report into a support bundle
version_added: 0.1.0
description:
  - Runs on the controller (C(delegate_to=localhost)), in two steps around M(sparkops.vllm.diagnose).
  - O(state=staged) writes every host's files (the RV(sparkops.vllm.support_logs_info#module:files) of each node,
    and any further files given) under O(staging)C(/<host>/), each redacted first, in a 0700 directory with 0600
    files, and returns their RV(paths) and RV(path_hosts) for C(sparkops.vllm.diagnose)'s C(paths) and
    C(context.path_hosts).
  - O(state=packed) adds O(extra_files) (the report, the findings as JSON), redacted, packs the staging directory
    into O(bundle) (a C(.tar.gz), mode 0600, in a 0700 directory) and removes the staging directory.
  - Redaction replaces with C([REDACTED]) every value in O(secrets) (the inventory's API key and Hugging Face
    token) and what these patterns recognise, whatever the file -
    C(--api-key X), C(--hf-token X), C(NAME_TOKEN=X), C(NAME_API_KEY=X), C(NAME_SECRET=X), C(NAME_PASSWORD=X),
    C(Authorization Bearer X) headers and C(hf_...) tokens.
author:
  - sparkops.vllm contributors
options:
  state:
    description:
      - V(staged) writes the collected files; V(packed) writes the bundle.
    type: str
    choices: [staged, packed]
    required: true
  staging:
    description:
      - The private directory the files are staged in. O(state=packed) removes it.
    type: path
    required: true
  collected:
    description:
      - With O(state=staged), host name to C({files, notes}) (the result of sparkops.vllm.support_logs_info, or any
        C(files) list of C({name, content})).
    type: dict
    default: {}
  extra_files:
    description:
      - Bundle-relative name to text, written (redacted) beside the hosts' folders; with O(state=staged) too.
    type: dict
    default: {}
  bundle:
    description:
      - With O(state=packed), the path of the C(.tar.gz) to write.
    type: path
  secrets:
    description:
      - Secret values to redact wherever they appear (values shorter than 6 characters are ignored, they would
        redact ordinary words).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: none
    description: The bundle is the output the run exists for; a check run calls it with C(check_mode=false).
  diff_mode:
    support: none
  idempotent:
    support: none
    description: Each run writes a new bundle (name it with a timestamp).
notes:
  - Nothing is written before it is redacted; the staging directory holds only redacted text.
seealso:
  - module: sparkops.vllm.support_logs_info
  - module: sparkops.vllm.diagnose
"""

EXAMPLES = r"""
- name: Stage every node's logs, redacted
  sparkops.vllm.support_bundle:
    state: staged
    staging: /tmp/sparkops-support/stage
    collected: "{{ dict(groups['cluster'] | zip(groups['cluster'] | map('extract', hostvars, '__logs'))) }}"
    secrets: ["{{ sparkops_api_key }}"]
  register: staged
  delegate_to: localhost
  no_log: true

- name: Pack the bundle
  sparkops.vllm.support_bundle:
    state: packed
    staging: /tmp/sparkops-support/stage
    bundle: /tmp/sparkops-support/sparkops-lab-20260101T000000Z.tar.gz
    extra_files:
      report.txt: "{{ report_lines | join('\n') }}"
    secrets: ["{{ sparkops_api_key }}"]
  delegate_to: localhost
"""

RETURN = r"""
paths:
  description: With O(state=staged), the staged files, hosts in name order.
  returned: state is staged
  type: list
  elements: str
  sample: [/tmp/sparkops-support/stage/spark-1/journal/sparkops-lab-vllm.service.log]
path_hosts:
  description: With O(state=staged), each staged file's host.
  returned: state is staged
  type: dict
  sample: {/tmp/sparkops-support/stage/spark-1/journal/sparkops-lab-vllm.service.log: spark-1}
bundle:
  description: With O(state=packed), the bundle written.
  returned: state is packed
  type: str
  sample: /tmp/sparkops-support/sparkops-lab-20260101T000000Z.tar.gz
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils import _support_bundle as support


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["staged", "packed"], "required": True},
            "staging": {"type": "path", "required": True},
            "collected": {"type": "dict", "default": {}},
            "extra_files": {"type": "dict", "default": {}},
            "bundle": {"type": "path"},
            "secrets": {"type": "list", "elements": "str", "default": [], "no_log": True},
        },
        required_if=[("state", "packed", ["bundle"])],
        supports_check_mode=False,
    )
    params = module.params
    try:
        if params["state"] == "staged":
            paths, path_hosts = support.stage(params["collected"], params["staging"], params["secrets"])
            for name, text in params["extra_files"].items():
                support.write_private(
                    support.inside(params["staging"], name), support.redact(str(text), params["secrets"])
                )
            module.exit_json(changed=True, paths=paths, path_hosts=path_hosts)
        bundle = support.pack(params["staging"], params["bundle"], params["extra_files"], params["secrets"])
    except (OSError, ValueError) as exc:
        module.fail_json(
            msg=f"support bundle: {exc}. Check that the controller can write {params['staging']}."
        )
    module.exit_json(changed=True, bundle=bundle)


if __name__ == "__main__":
    main()
