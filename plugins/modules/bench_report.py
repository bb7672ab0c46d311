#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
module: bench_report
short_description: Turn llama-benchy's output into the bench's report (JSON, Markdown table, PNG chart)
version_added: 0.3.0
description:
  - Reads, for each level of O(concurrency), llama-benchy's progress events C(c<N>.jsonl) and result C(c<N>.json) in
    O(source_dir), and writes C(bench.json), C(bench.md) and C(bench.png) (throughput against concurrency, latency
    percentiles) into O(dest). Figures and rules in plugins/module_utils/_bench.py; docs/bench.md.
  - Runs on the controller (matplotlib, pinned in requirements.txt, draws the chart).
author:
  - sparkops.vllm contributors
options:
  source_dir:
    description: The directory of llama-benchy's files.
    type: path
    required: true
  concurrency:
    description: The levels that were run.
    type: list
    elements: int
    required: true
  dest:
    description: The directory the report is written to (it must exist).
    type: path
    required: true
  endpoint:
    description: The endpoint that was measured, for the report.
    type: str
    required: true
  model:
    description: The served model name, for the report.
    type: str
    required: true
  simulated:
    description: The endpoint is the lab's stand-in; the report says its figures are simulated.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: The report is an artifact of the run on the controller; it is written in check mode too.
  diff_mode:
    support: none
  idempotent:
    support: none
    description: Each bench is a new measurement; the report is rewritten (changed=false, it changes no node).
"""

EXAMPLES = r"""
- name: Write the report
  sparkops.vllm.bench_report:
    source_dir: /tmp/bench/llama-benchy
    concurrency: [1, 4, 8]
    dest: /tmp/bench
    endpoint: http://spark-1:8000
    model: lab-tiny-moe
    simulated: true
  delegate_to: localhost
"""

RETURN = r"""
report:
  description: The report (bench.json's content).
  returned: success
  type: dict
  sample:
    ok: true
    tool: llama-benchy 0.4.0
    levels:
      - concurrency: 1
        requests: 3
        errors: 0
        output_tokens_per_s: 95.2
        total_tokens_per_s: 475.9
        ttft_ms: {p50: 14.2, p95: 14.2, samples: 3}
        itl_ms: {p50: 10.2, p95: 12.8, samples: 45}
markdown:
  description: bench.md's text.
  returned: success
  type: str
files:
  description: The files written.
  returned: success
  type: list
  elements: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils import _bench as bench


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


def write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def main():
    module = AnsibleModule(
        argument_spec={
            "source_dir": {"type": "path", "required": True},
            "concurrency": {"type": "list", "elements": "int", "required": True},
            "dest": {"type": "path", "required": True},
            "endpoint": {"type": "str", "required": True},
            "model": {"type": "str", "required": True},
            "simulated": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    runs = [
        (
            read(os.path.join(params["source_dir"], f"c{level}.jsonl")),
            read(os.path.join(params["source_dir"], f"c{level}.json")),
        )
        for level in params["concurrency"]
    ]
    report = bench.summarize(
        runs, endpoint=params["endpoint"], model=params["model"], simulated=params["simulated"]
    )
    text = bench.markdown(report)
    files = [os.path.join(params["dest"], name) for name in ("bench.json", "bench.md", "bench.png")]
    write(files[0], json.dumps(report, indent=2) + "\n")
    write(files[1], text)
    try:
        bench.render_chart(report, files[2])
    except ImportError as exc:
        module.fail_json(
            msg=f"bench_report: matplotlib is missing ({exc}). Fix: install requirements.txt into the controller's "
            "environment (make venv).",
            report=report,
        )
    os.chmod(files[2], 0o600)
    module.exit_json(changed=False, report=report, markdown=text, files=files)


if __name__ == "__main__":
    main()
