# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Filters over the known-bad platform table (plugins/module_utils/_known_bad_platforms.py)."""

from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkops.vllm.plugins.module_utils import _known_bad_platforms as table
from ansible_collections.sparkops.vllm.plugins.module_utils import _nccl_probe

# The probe runs in the image as text, so the image needs no copy of the collection.
_PROBE_SOURCE = Path(_nccl_probe.__file__).read_text(encoding="utf-8")


def known_bad_node(
    host,
    unified_memory,
    driver_version,
    *,
    proc_driver_version=None,
    kernel_release=None,
    memory=None,
    accept=(),
):
    """Every node row for one host (preflight)."""
    try:
        return table.evaluate_node(
            host,
            unified_memory=bool(unified_memory),
            driver_version=driver_version,
            proc_driver_version=proc_driver_version,
            kernel_release=(kernel_release or "").strip() or None,
            memory=memory,
            accept=list(accept or ()),
        )
    except ValueError as exc:
        raise AnsibleFilterError(f"{host}: {exc}") from None


def nccl_probe_argv(image, label_args=()):
    """``docker run`` argv that runs the NCCL probe with the image's python3, without network."""
    return [
        "docker",
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "python3",
        *list(label_args or ()),
        image,
        "-c",
        _PROBE_SOURCE,
    ]


def known_bad_image(  # noqa: PLR0917 - the filter's documented positional interface
    probe_stdout, host, cuda_graphs, tensor_parallel_size, gpus_per_node, probe_stderr=""
):
    """``{nccl, results}``: what the image's NCCL is, and the image rows (vllm_image)."""
    try:
        nccl = table.image_nccl(table.parse_probe(probe_stdout))
    except table.ProbeError as exc:
        stderr = (probe_stderr or "").strip()
        raise AnsibleFilterError(
            f"{host}: {exc}{'; stderr: ' + stderr[-300:] if stderr else ''}. "
            "Fix: the image needs python3 (every vLLM image has it); run the probe by hand: "
            'docs/runbooks/nccl-errors.md, "Known-bad NCCL in the image"'
        ) from None
    results = table.evaluate_image(
        host,
        nccl,
        cuda_graphs=bool(cuda_graphs),
        tensor_parallel_size=int(tensor_parallel_size),
        gpus_per_node=int(gpus_per_node),
    )
    return {"nccl": nccl, "results": results}


def known_bad_report(results):
    """One line per row: id, status, message, and for a problem its fix and source."""
    return table.report_lines(results or [])


def known_bad_failures(results):
    """The rows that stop the run (status fail)."""
    return table.failures(results or [])


class FilterModule:
    """sparkops.vllm known-bad platform filters."""

    def filters(self):
        return {
            "known_bad_node": known_bad_node,
            "known_bad_image": known_bad_image,
            "known_bad_report": known_bad_report,
            "known_bad_failures": known_bad_failures,
            "nccl_probe_argv": nccl_probe_argv,
        }
