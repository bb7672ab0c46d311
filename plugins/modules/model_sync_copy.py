#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

DOCUMENTATION = r"""
module: model_sync_copy
short_description: Copy model files from the head to one worker in parallel rsync streams over the RoCE link
version_added: 0.1.0
description:
  - Runs on the head. Splits O(files) into O(streams) lists of nearly equal bytes and runs one rsync per list,
    all at once, to the worker's RoCE address O(host).
  - Links are dereferenced (C(-L)), so a Hugging Face cache snapshot arrives as real files. Interrupted files
    stay in O(partial_dir) on the worker and a rerun resumes them.
  - O(transport=ssh) uses the cluster key O(ssh_key), checks the worker's host key against O(ssh_known_hosts)
    (never C(StrictHostKeyChecking=no)), the O(ssh_cipher) cipher and no compression.
  - O(transport=rsyncd) talks to an rsync daemon on the worker (started by the role for the copy only); the
    password is passed in the environment, never on disk or in argv.
  - Appends a progress line per interval to O(progress_path) (bytes, percent, rate, streams running), so a
    long copy can be followed with C(tail -f) while the task is polled.
  - Only copies; checking the result against the manifest is C(sparkops.vllm.model_manifest)'s job.
author:
  - sparkops.vllm contributors
options:
  src:
    description: The model folder on the head (links are followed).
    type: path
    required: true
  dest:
    description: The model folder on the worker (ssh transport; the rsync daemon's module points there).
    type: path
    required: true
  host:
    description: The worker's RoCE (ib) address.
    type: str
    required: true
  label:
    description: The worker's name in progress lines and messages.
    type: str
  files:
    description: Paths relative to O(src) to copy.
    type: list
    elements: str
    required: true
  sizes:
    description:
      - Size of each file in O(files), in bytes, to balance the streams. The head manifest's C(files) mapping
        (entries holding C(size)) is accepted as it is.
    type: dict
    required: true
  transport:
    description: C(ssh), or C(rsyncd) (an rsync daemon on the worker, unencrypted on the private link).
    type: str
    choices: [ssh, rsyncd]
    default: rsyncd
  streams:
    description: Parallel rsync processes to this worker.
    type: int
    default: 2
  partial_dir:
    description: Where the worker keeps interrupted files (relative to O(dest)).
    type: str
    default: .sparkops-partial
  io_timeout:
    description: Seconds without I/O after which an rsync stream gives up (C(--timeout)).
    type: int
    default: 120
  bwlimit_kib:
    description: Bandwidth limit per stream in KiB/s (C(--bwlimit)); 0 for none.
    type: int
    default: 0
  ssh_key:
    description: Private key of the cluster key pair (O(transport=ssh)).
    type: path
  ssh_known_hosts:
    description: known_hosts file holding the workers' host keys (O(transport=ssh)).
    type: path
  ssh_cipher:
    description: SSH cipher (O(transport=ssh)).
    type: str
    default: aes128-gcm@openssh.com
  ssh_port:
    description: SSH port on the worker (O(transport=ssh)).
    type: int
    default: 22
  rsyncd_user:
    description: The rsync daemon's auth user (O(transport=rsyncd)).
    type: str
    default: sparkops
  rsyncd_password:
    description: The rsync daemon's password (O(transport=rsyncd)).
    type: str
  rsyncd_port:
    description: The rsync daemon's port (O(transport=rsyncd)).
    type: int
    default: 873
  rsyncd_module:
    description: The rsync daemon's module name (O(transport=rsyncd)).
    type: str
    default: sparkops-model
  progress_path:
    description: File to append progress lines to.
    type: path
attributes:
  check_mode:
    support: full
    description: Reports what it would copy (changed when O(files) is not empty) and copies nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    description: Copies exactly O(files); given none, it does nothing.
"""

EXAMPLES = r"""
- name: Copy the missing files to a worker over its RoCE address, in 4 streams
  sparkops.vllm.model_sync_copy:
    src: /srv/models/Qwen3.5-122B-A10B-FP8
    dest: /srv/models/Qwen3.5-122B-A10B-FP8
    host: 192.168.100.11
    label: spark-2
    files: "{{ worker_check.mismatches | map(attribute='path') | list }}"
    sizes: "{{ head_manifest.manifest.files | dict2items | items2dict(value_name='value') }}"
    transport: ssh
    streams: 4
    ssh_key: /root/.ssh/sparkops_spark-vllm_ed25519
    ssh_known_hosts: /root/.ssh/sparkops_spark-vllm_known_hosts
  delegate_to: spark-1
"""

RETURN = r"""
files:
  description: The files copied.
  returned: success
  type: list
  elements: str
bytes:
  description: Bytes of the files copied.
  returned: success
  type: int
seconds:
  description: Wall time of the copy.
  returned: success
  type: float
rate_bytes_per_s:
  description: Throughput, bytes per second.
  returned: success
  type: int
streams:
  description: Each stream's files, bytes, exit code, argv and last error lines.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils._model_sync_copy import CopyError, copy


def _size(value):
    """A size, or a manifest entry holding one."""
    return value["size"] if isinstance(value, dict) else value


def main():
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "dest": {"type": "path", "required": True},
            "host": {"type": "str", "required": True},
            "label": {"type": "str"},
            "files": {"type": "list", "elements": "str", "required": True},
            "sizes": {"type": "dict", "required": True},
            "transport": {"type": "str", "choices": ["ssh", "rsyncd"], "default": "rsyncd"},
            "streams": {"type": "int", "default": 2},
            "partial_dir": {"type": "str", "default": ".sparkops-partial"},
            "io_timeout": {"type": "int", "default": 120},
            "bwlimit_kib": {"type": "int", "default": 0},
            "ssh_key": {"type": "path"},
            "ssh_known_hosts": {"type": "path"},
            "ssh_cipher": {"type": "str", "default": "aes128-gcm@openssh.com"},
            "ssh_port": {"type": "int", "default": 22},
            "rsyncd_user": {"type": "str", "default": "sparkops"},
            "rsyncd_password": {"type": "str", "no_log": True},
            "rsyncd_port": {"type": "int", "default": 873},
            "rsyncd_module": {"type": "str", "default": "sparkops-model"},
            "progress_path": {"type": "path"},
        },
        required_if=[
            ("transport", "ssh", ("ssh_key", "ssh_known_hosts")),
            ("transport", "rsyncd", ("rsyncd_password",)),
        ],
        supports_check_mode=True,
    )
    p = module.params
    unknown = [rel for rel in p["files"] if rel not in p["sizes"]]
    if unknown:
        module.fail_json(msg=f"sizes has no entry for {', '.join(unknown)}; pass the head manifest's sizes.")
    sizes = {rel: int(_size(p["sizes"][rel])) for rel in p["files"]}
    if not p["files"] or module.check_mode:
        module.exit_json(
            changed=bool(p["files"]),
            files=sorted(p["files"]),
            bytes=sum(sizes.values()),
            seconds=0.0,
            rate_bytes_per_s=0,
            streams=[],
        )
    rsync = module.get_bin_path("rsync", required=True)
    try:
        result = copy(
            p["src"],
            p["dest"],
            p["host"],
            p["files"],
            sizes,
            transport=p["transport"],
            streams=max(1, p["streams"]),
            partial_dir=p["partial_dir"],
            io_timeout=p["io_timeout"],
            bwlimit_kib=p["bwlimit_kib"],
            rsync=rsync,
            ssh={
                "key": p["ssh_key"],
                "known_hosts": p["ssh_known_hosts"],
                "cipher": p["ssh_cipher"],
                "port": p["ssh_port"],
            },
            rsyncd={
                "user": p["rsyncd_user"],
                "password": p["rsyncd_password"],
                "port": p["rsyncd_port"],
                "module": p["rsyncd_module"],
            },
            progress_path=p["progress_path"],
            label=p["label"],
        )
    except CopyError as exc:
        message, partial = exc.args
        module.fail_json(msg=message, **partial)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
