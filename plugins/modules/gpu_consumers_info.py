#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
module: gpu_consumers_info
short_description: List the node's NVIDIA GPUs and the processes (and containers) holding them
version_added: 0.1.0
description:
  - Reads the GPUs and their compute and graphics processes through NVML (nvidia-ml-py) or
    C(nvidia-smi), and names the container of each process from C(/proc/<pid>/cgroup) and the Docker API.
  - Works on GB10 (DGX Spark) unified-memory GPUs, which report no framebuffer size;
    their memory values are null and O(gpus[].unified_memory) is true.
  - Fails with RV(driver_error) when the NVIDIA driver is missing or broken.
  - Fails closed. Output of nvidia-smi that cannot be read (a process or GPU line it does not understand) fails
    the module with the lines it could not read, never reports "no consumers".
  - Every command (nvidia-smi, docker inspect) has a time limit, O(timeout); one that does not answer in time is
    killed and fails the module with the command and the bound.
  - Read-only; never changes the node.
author:
  - sparkops.vllm contributors
options:
  backend:
    description:
      - How to read the GPUs.
      - V(auto) uses NVML through nvidia-ml-py when it is importable and libnvidia-ml loads, and
        falls back to C(nvidia-smi) otherwise.
    type: str
    choices: [auto, nvml, nvidia_smi]
    default: auto
  nvidia_smi_path:
    description:
      - Path of the C(nvidia-smi) binary. Defaults to the one found on E(PATH).
    type: path
  proc_root:
    description:
      - Root of the proc filesystem used to resolve process names and containers.
    type: path
    default: /proc
  docker_lookup:
    description:
      - Ask Docker (the docker SDK when importable, else C(docker inspect)) for each container's
        name, image and labels.
      - When false, or when Docker does not know the container, only its ID is returned.
    type: bool
    default: true
  timeout:
    description:
      - Seconds each command (nvidia-smi, docker inspect) may take before it is killed and the module fails.
    type: int
    default: 30
extends_documentation_fragment:
  - sparkops.vllm.attributes.info
requirements:
  - An NVIDIA driver with C(nvidia-smi), or nvidia-ml-py for O(backend=nvml).
  - The docker SDK or the C(docker) CLI for container names (optional).
notes:
  - Memory values are MiB. A per-process value nvidia-smi prints cut short (C(10707...)) is
    returned as null, never as the truncated number.
  - Processes in another PID namespace are not visible from inside a container; run on the host.
"""

EXAMPLES = r"""
- name: Read the GPUs and who holds them
  sparkops.vllm.gpu_consumers_info:
  register: gpu

- name: Fail on processes outside the project's containers
  ansible.builtin.assert:
    that: gpu.consumers | rejectattr('container.labels.sparkops.vllm', 'defined') | list | length == 0
    fail_msg: "Stale GPU consumers: {{ gpu.consumers }}"

- name: Use the nvidia-smi CLI only
  sparkops.vllm.gpu_consumers_info:
    backend: nvidia_smi
    nvidia_smi_path: /usr/bin/nvidia-smi
"""

RETURN = r"""
backend_used:
  description: The backend that produced the result.
  returned: success
  type: str
  sample: nvidia_smi
nvml_unavailable:
  description: Why O(backend=auto) did not use NVML (for example no libnvidia-ml); null otherwise.
  returned: success
  type: str
  sample: "NVML initialisation failed: NVMLError_LibraryNotFound: NVML Shared Library Not Found"
driver_version:
  description: The NVIDIA driver version.
  returned: success
  type: str
  sample: 580.95.05
driver_branch:
  description: The driver's major version (branch).
  returned: success
  type: int
  sample: 580
cuda_version:
  description: The CUDA version the driver supports, null when unknown.
  returned: success
  type: str
  sample: "13.0"
gpus:
  description: One entry per GPU.
  returned: success
  type: list
  elements: dict
  sample:
    - index: 0
      uuid: GPU-5c1e3d0a-1b2c-4d5e-8f90-123456789abc
      name: NVIDIA GB10
      driver_version: 580.95.05
      memory_total_mib: null
      memory_used_mib: null
      unified_memory: true
  contains:
    index: {description: GPU index, type: int}
    uuid: {description: GPU UUID, type: str}
    name: {description: Product name, type: str}
    driver_version: {description: Driver version, type: str}
    memory_total_mib: {description: Framebuffer MiB; null when the GPU cannot report it (GB10), type: int}
    memory_used_mib: {description: Framebuffer used in MiB; null when unknown, type: int}
    unified_memory: {description: True for GPUs sharing system memory (GB10 class), type: bool}
consumers:
  description: Processes holding a GPU context.
  returned: success
  type: list
  elements: dict
  sample:
    - pid: 114687
      process_name: /usr/local/bin/python
      used_memory_mib: 12288
      gpu_uuid: GPU-5c1e3d0a-1b2c-4d5e-8f90-123456789abc
      gpu_index: 0
      type: C
      container:
        id: 3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100
        name: embeddings
        image: ghcr.io/example/embeddings:1.2
        labels: {}
  contains:
    pid: {description: Process ID as seen from this node, type: int}
    process_name: {description: Executable path; null when not visible, type: str}
    used_memory_mib: {description: GPU memory held in MiB; null when unknown or truncated, type: int}
    gpu_uuid: {description: UUID of the GPU, type: str}
    gpu_index: {description: Index of the GPU, type: int}
    type: {description: C (compute), G (graphics) or C+G, type: str}
    container:
      description: The container running the process (id, name, image, labels), or null on the host.
      type: dict
driver_error:
  description: Set when the module fails because the NVIDIA driver is missing or broken.
  returned: failure
  type: dict
  sample:
    kind: version_mismatch
    message: "Failed to initialize NVML: Driver/library version mismatch"
  contains:
    kind:
      description: One of not_installed, driver_unreachable, version_mismatch, no_devices, gpu_lost.
      type: str
    message: {description: The driver's own message, type: str}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils import _bounded
from ansible_collections.sparkops.vllm.plugins.module_utils._containers import (
    DockerLookup,
    docker_client_factory,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._gpu_consumers import (
    NvidiaSmiFailed,
    NvmlUnavailable,
    collect_gpu_consumers,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._nvidia_smi import DriverError
from ansible_collections.sparkops.vllm.plugins.module_utils._nvml import load_pynvml


def main():
    module = AnsibleModule(
        argument_spec={
            "backend": {"type": "str", "choices": ["auto", "nvml", "nvidia_smi"], "default": "auto"},
            "nvidia_smi_path": {"type": "path"},
            "proc_root": {"type": "path", "default": "/proc"},
            "docker_lookup": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": _bounded.DEFAULT_TIMEOUT_SECONDS},
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["timeout"] < 1:
        module.fail_json(
            msg=f"timeout is {params['timeout']}: give the seconds each command may take (1 or more)"
        )
    env = {"LC_ALL": "C", "LANG": "C"}

    def run(argv):
        return _bounded.run(argv, timeout=params["timeout"], env_update=env)

    nvidia_smi = params["nvidia_smi_path"] or module.get_bin_path("nvidia-smi")
    if params["nvidia_smi_path"] and not os.access(nvidia_smi, os.X_OK):
        nvidia_smi = None
    docker_lookup = None
    if params["docker_lookup"]:
        docker_lookup = DockerLookup(
            run_command=run,
            docker_bin=module.get_bin_path("docker"),
            client_factory=docker_client_factory(),
        )
    nvml = load_pynvml() if params["backend"] != "nvidia_smi" else None
    try:
        result = collect_gpu_consumers(
            params["backend"],
            run=run,
            nvidia_smi=nvidia_smi,
            nvml=nvml,
            proc_root=params["proc_root"],
            docker_lookup=docker_lookup,
        )
    except DriverError as exc:
        module.fail_json(msg=exc.summary(), driver_error=exc.as_dict(), **exc.details)
    except NvmlUnavailable as exc:
        module.fail_json(msg=str(exc))
    except _bounded.CommandTimedOut as exc:
        module.fail_json(msg=str(exc), cmd=exc.cmd, timeout=exc.seconds)
    except NvidiaSmiFailed as exc:
        module.fail_json(
            msg=f"{exc} Check that nvidia-smi works on this node.",
            cmd=exc.cmd,
            rc=exc.rc,
            stdout=exc.stdout,
            stderr=exc.stderr,
        )
    for warning in result.pop("warnings"):
        module.warn(warning)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
