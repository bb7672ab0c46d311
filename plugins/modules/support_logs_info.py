#!/usr/bin/python
# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors

from __future__ import annotations

DOCUMENTATION = r"""
module: support_logs_info
short_description: Collect a node's sparkops logs for a diagnosis and a support bundle
version_added: 0.1.0
description:
  - Reads, and returns as text, the journals of the given systemd units, the logs of every container that
    carries a label (running or stopped), every file under the given log directories (each cut to its tail),
    and the kernel log's lines that match a pattern.
  - A source that cannot be read is returned in RV(notes) and never fails the module; for example C(dmesg) is
    refused in an unprivileged container (then C(journalctl --dmesg) is tried), a unit that never ran on the
    node has no journal, and Ray's log directory is absent where Ray has not run.
  - Every file is redacted on the node, before it is returned, so before Ansible registers, logs or records it.
    Redacted are the values of O(secrets) and every secret form that C(plugins/module_utils/_redact.py)
    recognises (env, JSON and Python-repr forms of secret-named keys, URL credentials, bearer headers,
    Hugging Face tokens). M(sparkops.vllm.support_bundle) redacts again before it writes on the controller.
author:
  - sparkops.vllm contributors
options:
  units:
    description:
      - systemd units whose journals (C(journalctl -u UNIT -n O(max_lines))) and states (C(systemctl show)) to read.
    type: list
    elements: str
    default: []
  files:
    description:
      - Further files read whole (or their last O(max_bytes)), for example the deployed launch script; each is
        returned as C(config/<path>). A missing file is a note.
    type: list
    elements: path
    default: []
  container_label:
    description:
      - A C(key=value) label; the logs of every container carrying it are read (C(docker logs --timestamps)).
      - Empty reads no container.
    type: str
    default: ""
  log_dirs:
    description:
      - Directories whose regular files are read (recursively, binary files skipped), for example Ray's
        C(session_latest/logs).
    type: list
    elements: path
    default: []
  mounts:
    description:
      - Container path to host path, for links written inside a container. Ray's C(session_latest) is a link to
        C(/tmp/ray/session_...) inside the Ray container; with C(/tmp/ray) mapped to C(/var/lib/sparkops/lab/ray) the
        files under O(log_dirs) are found on the host.
    type: dict
    default: {}
  kernel_pattern:
    description:
      - A regular expression; the kernel log's lines that match it are returned. Empty skips the kernel log.
    type: str
    default: ""
  max_lines:
    description:
      - The last lines of each journal and container log, and of the kernel log's matches.
    type: int
    default: 5000
  max_bytes:
    description:
      - The last bytes of each file under O(log_dirs).
    type: int
    default: 1048576
  max_files:
    description:
      - The most files taken under each of O(log_dirs) (the first by name).
    type: int
    default: 200
  since:
    description:
      - Read journals from this time on (any C(journalctl --since) value, for example C(-2h) or C(@1767225600)).
        Empty reads the last O(max_lines) lines whenever they were written.
      - C(last-start) reads each unit's journal from that unit's last start (systemd's C(InactiveExitTimestamp);
        a unit in an auto-restart loop keeps the start of the loop); a unit that never started gives its last
        lines. Ray's log files are then limited to those written since the earliest of those starts.
      - Given as C(@EPOCH) or C(-N) with a unit (C(s), C(m), C(h), C(d)), it also limits the container logs
        (C(docker logs --since)) and leaves out files under O(log_dirs) last written before it.
    type: str
    default: ""
  secrets:
    description:
      - Secret values (the API key, the Hugging Face token) replaced by C([REDACTED]) wherever they appear, in any
        case. Values shorter than 6 characters are ignored. Never logged.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - sparkops.vllm.attributes.info
notes:
  - Everything read travels back to the controller in the module's result; O(max_lines), O(max_bytes) and
    O(max_files) bound its size.
seealso:
  - module: sparkops.vllm.support_bundle
  - module: sparkops.vllm.diagnose
"""

EXAMPLES = r"""
- name: Collect the serve and Ray logs of the cluster "lab"
  sparkops.vllm.support_logs_info:
    units: [sparkops-lab-vllm.service, sparkops-lab-ray-head.service]
    container_label: io.sparkops.vllm.cluster=lab
    log_dirs: [/var/lib/sparkops/lab/ray/session_latest/logs]
    mounts: {/tmp/ray: /var/lib/sparkops/lab/ray}
    files: [/etc/sparkops/lab/launch.sh]
    kernel_pattern: "NVRM|Out of memory|oom-kill|oom_reaper|Killed process"
  register: logs
"""

RETURN = r"""
files:
  description: What was read, one entry per source.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: A relative file name for the bundle (C(journal/UNIT.log), C(containers/NAME.log), C(ray/...),
        C(kernel/dmesg-nvrm-oom.log)).
      type: str
      sample: journal/sparkops-lab-vllm.service.log
    source:
      description: Where it came from.
      type: str
      sample: journalctl -u sparkops-lab-vllm.service
    content:
      description: The text (a tail, when O(max_lines) or O(max_bytes) cut it).
      type: str
    truncated:
      description: Whether the text is only the tail of the source.
      type: bool
units:
  description: The state of each of O(units), as C(systemctl show) gives it.
  returned: always
  type: list
  elements: dict
  sample:
    - unit: sparkops-lab-vllm.service
      load_state: loaded
      active_state: activating
      sub_state: auto-restart
      result: exit-code
      restarts: 3
notes:
  description: Sources that could not be read, or held nothing, and why.
  returned: always
  type: list
  elements: dict
  sample:
    - source: dmesg --ctime
      note: "refused (rc 1): dmesg: read kernel buffer failed: Operation not permitted"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkops.vllm.plugins.module_utils import _support_bundle as support


def main():
    module = AnsibleModule(
        argument_spec={
            "units": {"type": "list", "elements": "str", "default": []},
            "files": {"type": "list", "elements": "path", "default": []},
            "container_label": {"type": "str", "default": ""},
            "log_dirs": {"type": "list", "elements": "path", "default": []},
            "mounts": {"type": "dict", "default": {}},
            "kernel_pattern": {"type": "str", "default": ""},
            "max_lines": {"type": "int", "default": 5000},
            "max_bytes": {"type": "int", "default": 1048576},
            "max_files": {"type": "int", "default": 200},
            "since": {"type": "str", "default": ""},
            "secrets": {"type": "list", "elements": "str", "default": [], "no_log": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    per_unit, earliest = support.resolve_since(params["units"], params["since"])
    files, notes = support.collect_journals(params["units"], params["max_lines"], per_unit)
    since = support.since_epoch(earliest)
    units = support.unit_states(params["units"])
    more, more_notes = support.collect_files(params["files"], params["max_bytes"])
    files += more
    notes += more_notes
    if params["container_label"]:
        docker = module.get_bin_path("docker")
        if docker:
            more, more_notes = support.collect_containers(
                params["container_label"], params["max_lines"], docker
            )
            files += more
            notes += more_notes
        else:
            notes.append({"source": "docker", "note": "docker is not installed on the node"})
    for directory in params["log_dirs"]:
        more, more_notes = support.collect_dir(
            directory, params["max_bytes"], params["max_files"], params["mounts"], since
        )
        files += more
        notes += more_notes
    if params["kernel_pattern"]:
        more, more_notes = support.collect_kernel(params["kernel_pattern"], params["max_lines"])
        files += more
        notes += more_notes
    secrets = params["secrets"]
    for item in files:
        item["content"] = support.redact(str(item.get("content") or ""), secrets)
    notes = [
        {key: support.redact(str(value), secrets) for key, value in note.items()}
        if isinstance(note, dict)
        else support.redact(str(note), secrets)
        for note in notes
    ]
    module.exit_json(changed=False, files=files, units=units, notes=notes)


if __name__ == "__main__":
    main()
