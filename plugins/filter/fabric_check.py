# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Filters of fabric_check.yml: the plan, the report and its Markdown (plugins/module_utils/_fabric.py)."""

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkops.vllm.plugins.module_utils import _deployed_record as record
from ansible_collections.sparkops.vllm.plugins.module_utils import _fabric as fabric


def fabric_check_plan(hosts, hostvars, settings):
    """The tests to run, from each host's ``fabric_check_raw`` fact (its deployed record's text
    and whether ``/dev/infiniband`` exists)."""
    nodes = []
    try:
        for host in hosts:
            raw = hostvars[host].get("fabric_check_raw") or {}
            doc = record.load(raw.get("record"))
            sections = {name: record.section(doc, name) for name in ("network", "image")}
            nodes.append(fabric.node(host, sections, bool(raw.get("infiniband"))))
        return fabric.plan(nodes, dict(settings))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def fabric_check_rdma_result(test, server, client, min_gbps):
    """One ib_write_bw pair's verdict from the server's and the client's registered results."""
    return fabric.rdma_result(dict(test), dict(server or {}), dict(client or {}), float(min_gbps))


def fabric_check_allreduce_argv(fabric_plan, host, settings, paths, flags):
    """``docker run`` of ``host``'s rank; ``paths``: container, labels, env_file, scratch;
    ``flags``: gpus, memlock, rdma_devices (the Ray unit's)."""
    try:
        return fabric.allreduce_argv(
            fabric_plan,
            host,
            dict(settings),
            container=str(paths["container"]),
            labels=dict(paths["labels"]),
            env_file=str(paths["env_file"]),
            scratch=str(paths["scratch"]),
            gpus=bool(flags["gpus"]),
            memlock=bool(flags["memlock"]),
            rdma_devices=bool(flags["rdma_devices"]),
        )
    except ValueError as exc:
        raise AnsibleFilterError(f"{host}: {exc}") from exc


def fabric_check_report(fabric_plan, rdma_results, allreduce_raw, settings, hostvars=None):
    """The whole report from the plan, the RDMA verdicts, rank 0's registered all-reduce run
    and, from ``hostvars``, every node's (its ``__fabric_check_rank``)."""
    raw = dict(allreduce_raw or {})
    stdout = str(raw.get("stdout") or "").strip()
    if stdout:
        try:
            raw["report"] = json.loads(stdout)
        except ValueError:
            raw["stderr"] = f"{raw.get('stderr') or ''}\nrank 0 printed no JSON: {stdout[-300:]}"
    addresses = [n["address"] for n in fabric_plan["nodes"]]
    devices = sorted({hca for n in fabric_plan["nodes"] for hca in n["hcas"]})
    allreduce = fabric.allreduce_result(
        raw,
        fabric_plan["backend"],
        addresses,
        float(settings["allreduce_min_busbw_gbps"]),
        expected_devices=devices,
        ranks={
            n["host"]: dict(hostvars[n["host"]].get("__fabric_check_rank") or {})
            for n in fabric_plan["nodes"]
            if hostvars is not None
        },
    )
    return fabric.report(fabric_plan, list(rdma_results or []), allreduce, dict(settings))


def fabric_check_markdown(report):
    """The report as a Markdown document (the table fabric_check.yml prints and writes)."""
    return fabric.markdown(report)


class FilterModule:
    """sparkops.vllm fabric check filters."""

    def filters(self):
        return {
            "fabric_check_plan": fabric_check_plan,
            "fabric_check_rdma_result": fabric_check_rdma_result,
            "fabric_check_allreduce_argv": fabric_check_allreduce_argv,
            "fabric_check_report": fabric_check_report,
            "fabric_check_markdown": fabric_check_markdown,
        }
