#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
module: correctness_probe
short_description: Send identical greedy requests at once to vLLM and check their answers against the reference
version_added: 0.3.0
description:
  - For each of O(prompts), sends O(requests) identical chat completions at the same moment (C(temperature=0),
    O(seed), O(max_tokens)) to O(url) and checks that every one succeeded with non-empty text, that its
    C(usage.completion_tokens) is within [O(min_tokens), O(max_tokens)], and that the answers of one prompt are
    identical.
  - Reads the node's deployed record at O(record_path) (docs/deployed-record.md) for the deployment key (the image
    ID, the model, serve's launch argv, and the probe's own request) and the reference (section C(correctness)).
    When the reference is of this key, the answers must equal it; otherwise RV(reference) is this run's answers, for
    the caller to record with M(sparkops.vllm.deployed_record) (compare on C(deployment_key)).
  - Fails with every problem listed when a check fails. Logic in plugins/module_utils/_correctness.py.
author:
  - sparkops.vllm contributors
options:
  url:
    description: The chat completions URL (C(http://127.0.0.1:8000/v1/chat/completions) on the head).
    type: str
    required: true
  api_key:
    description: The API key, sent as a bearer token; empty sends none. Never returned or logged.
    type: str
    default: ""
  model:
    description: The served model name.
    type: str
    required: true
  prompts:
    description: The fixed prompts.
    type: list
    elements: str
    required: true
  requests:
    description: Identical requests sent at once per prompt.
    type: int
    default: 8
  seed:
    description: The per-request sampling seed.
    type: int
    default: 1234
  max_tokens:
    description: The answer's length limit.
    type: int
    default: 32
  min_tokens:
    description: The fewest completion tokens an answer may have.
    type: int
    default: 1
  timeout:
    description: Seconds each request may take.
    type: int
    default: 120
  record_path:
    description: The node's deployed record (its C(image), C(serve) and C(correctness) sections).
    type: path
    required: true
attributes:
  check_mode:
    support: full
    description: The probe only reads (it asks for completions); it runs the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    description: Never changes anything (changed=false).
"""

EXAMPLES = r"""
- name: Probe the answers
  sparkops.vllm.correctness_probe:
    url: http://127.0.0.1:8000/v1/chat/completions
    api_key: "{{ vllm_serve_api_key }}"
    model: lab-tiny-moe
    prompts: ["List the first five prime numbers."]
    requests: 8
    record_path: /var/lib/sparkops/lab/deployed.json
  no_log: false
"""

RETURN = r"""
ok:
  description: Whether every check passed.
  returned: always
  type: bool
problems:
  description: Each failed check, with its prompt.
  returned: always
  type: list
  elements: str
  sample: ["prompt 1: 3 different answers to 8 identical requests sent at once (temperature 0, fixed seed)"]
answers:
  description: Per prompt, the answer (null when the requests disagreed), its completion tokens and how many variants.
  returned: always
  type: list
  elements: dict
digest:
  description: The digest of the answers (null when they were inconsistent).
  returned: always
  type: str
deployment_key:
  description: The digest of what decides the answers.
  returned: always
  type: str
identical:
  description: Whether every prompt's identical requests got one answer.
  returned: always
  type: bool
tokens_sane:
  description: Whether every answer has text and its completion tokens within O(min_tokens)..O(max_tokens).
  returned: always
  type: bool
matches_reference:
  description: With RV(compared_with_reference), whether the answers equal the reference.
  returned: always
  type: bool
other_problems:
  description: The problems that are neither disagreement, token counts nor the reference (failed requests).
  returned: always
  type: list
  elements: str
compared_with_reference:
  description: Whether a reference of this deployment was found and compared with.
  returned: always
  type: bool
record_reference:
  description: Whether RV(reference) should be recorded (no reference of this deployment yet, and the answers agree).
  returned: always
  type: bool
reference:
  description: The C(correctness) section to record (deployment key, inputs, request, answers, digest).
  returned: always
  type: dict
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils import _correctness as probe
from ansible_collections.sparkops.vllm.plugins.module_utils._safe_read import open_regular


def read_record(path):
    try:
        with open_regular(path, "r", encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("schema") == 1 else {}


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "model": {"type": "str", "required": True},
            "prompts": {"type": "list", "elements": "str", "required": True},
            "requests": {"type": "int", "default": 8},
            "seed": {"type": "int", "default": 1234},
            "max_tokens": {"type": "int", "default": 32},
            "min_tokens": {"type": "int", "default": 1},
            "timeout": {"type": "int", "default": 120},
            "record_path": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    if (
        not params["prompts"]
        or params["requests"] < 2
        or not 1 <= params["min_tokens"] <= params["max_tokens"]
    ):
        module.fail_json(
            msg="correctness_probe: give at least one prompt, requests >= 2 (identical requests sent at once), "
            "and 1 <= min_tokens <= max_tokens."
        )
    record = read_record(params["record_path"])
    inputs = probe.deployment_inputs(record)
    missing = probe.missing_inputs(inputs)
    if missing:
        module.fail_json(
            msg=f"correctness_probe: the deployed record {params['record_path']} lacks {', '.join(missing)}: "
            "the deployment cannot be told apart. Fix: deploy (the ray_cluster and vllm_serve stages write it).",
            inputs=inputs,
        )
    request = probe.probe_request(params["prompts"], seed=params["seed"], max_tokens=params["max_tokens"])
    key = probe.deployment_key(inputs, request)
    results = [
        probe.send_identical(
            params["url"],
            probe.chat_body(params["model"], prompt, seed=params["seed"], max_tokens=params["max_tokens"]),
            count=params["requests"],
            timeout=params["timeout"],
            api_key=params["api_key"],
        )
        for prompt in params["prompts"]
    ]
    verdict = probe.judge(
        params["prompts"],
        results,
        key=key,
        reference=probe.reference_of(record),
        min_tokens=params["min_tokens"],
        max_tokens=params["max_tokens"],
    )
    result = dict(verdict, changed=False, reference=probe.reference_section(verdict, inputs, request))
    if not verdict["ok"]:
        module.fail_json(
            msg="correctness_probe: "
            + "; ".join(verdict["problems"])
            + '. Runbook: docs/bench.md ("When the probe fails").',
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
