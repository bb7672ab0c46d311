#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
module: launch_script
short_description: Render the vLLM launch script with the memory plan's flags
version_added: 0.1.0
description:
  - Writes the C(vllm serve) launch script of the serve stage from the collection's C(templates/vllm-launch.sh.j2),
    with the memory flags of the cluster's memory plan (the preflight stage's C(preflight_memory_plan)).
  - The flags that feed the plan (C(--gpu-memory-utilization), C(--kv-cache-memory-bytes), C(--max-model-len),
    C(--enforce-eager), C(--tensor-parallel-size), C(--pipeline-parallel-size), C(--kv-cache-dtype),
    C(--max-num-seqs)) come only from the plan and the stage's settings; passing one in O(extra_args) fails and
    names the setting to change, so every change is planned.
  - Fails when the plan does not fit, with the plan's reasons, unless O(force=true), which starts anyway with a
    warning.
  - Every value reaches bash single-quoted, so nothing in a setting is expanded or run by the shell.
  - The API key is neither in the script nor on vLLM's command line; vLLM reads C(VLLM_API_KEY) from the
    serve container's environment (the unit's 0600 environment file).
  - An action plugin. It builds the command on the controller and writes the file with C(ansible.builtin.template),
    so check mode and C(--diff) work as they do there, and an identical script changes nothing.
author:
  - sparkops.vllm contributors
options:
  dest:
    description: Path of the script on the node.
    type: path
    required: true
  plan:
    description: The cluster's memory plan (C(preflight_memory_plan)); uses C(fits), C(reasons), C(vllm_args), C(env).
    type: dict
    required: true
  model:
    description: The model path (identical on every node and in the containers).
    type: str
    required: true
  served_model_name:
    description: The name clients send as C(model).
    type: str
    required: true
  tensor_parallel_size:
    description: C(--tensor-parallel-size).
    type: int
    required: true
  pipeline_parallel_size:
    description: C(--pipeline-parallel-size).
    type: int
    default: 1
  host:
    description: Address the API server binds.
    type: str
    default: 0.0.0.0
  port:
    description: Port of the API server.
    type: int
    default: 8000
  max_model_len:
    description: C(--max-model-len) (the plan checked the KV cache holds it).
    type: int
  cuda_graphs:
    description: False adds C(--enforce-eager).
    type: bool
    default: true
  kv_cache_dtype:
    description: C(--kv-cache-dtype), when set.
    type: str
  max_num_seqs:
    description: C(--max-num-seqs), when set.
    type: int
  extra_args:
    description: Further C(vllm serve) arguments that do not feed the memory plan.
    type: list
    elements: str
    default: []
  cluster:
    description: The cluster's name, for the script's header.
    type: str
    required: true
  unit:
    description: The systemd unit that runs the script, for the script's header.
    type: str
    required: true
  force:
    description: Write the script even when the plan does not fit (with a warning).
    type: bool
    default: false
  mode:
    description: File mode of the script.
    type: raw
    default: "0750"
  owner:
    description: Owner of the script.
    type: str
  group:
    description: Group of the script.
    type: str
attributes:
  check_mode:
    support: full
    description: Reports whether the script would change, as C(ansible.builtin.template) does.
  diff_mode:
    support: full
  idempotent:
    support: full
    description: An identical rendered script changes nothing.
  action:
    support: full
"""

EXAMPLES = r"""
- name: Render the launch script from the memory plan
  sparkops.vllm.launch_script:
    dest: /etc/sparkops/spark-vllm/launch.sh
    plan: "{{ preflight_memory_plan }}"
    model: /srv/models/Qwen3.5-122B-A10B-FP8
    served_model_name: qwen3.5-122b
    tensor_parallel_size: 2
    max_model_len: 32768
    cluster: spark-vllm
    unit: sparkops-spark-vllm-vllm.service
"""

RETURN = r"""
argv:
  description: The command the script runs.
  returned: success
  type: list
  elements: str
  sample: [vllm, serve, /srv/models/Qwen3.5-122B-A10B-FP8, --served-model-name, qwen3.5-122b, --gpu-memory-utilization, "0.85"]
changed:
  description: Whether the script changed (or would, in check mode).
  returned: always
  type: bool
diff:
  description: Before and after text of the script, with C(--diff).
  returned: when diff mode is on
  type: dict
"""
