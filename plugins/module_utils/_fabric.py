# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Fabric qualification (playbooks/fabric_check.yml, docs/rdma.md "Fabric qualification").

Pure logic, testable without Ansible: which tests run between which nodes (:func:`plan`),
the verdict of each (:func:`rdma_result`, :func:`allreduce_result`), the report
(:func:`report`) and its Markdown table (:func:`markdown`).

- RDMA: between every pair of nodes, perftest's ``ib_write_bw`` per HCA (the i-th device of
  the server's ``NCCL_IB_HCA`` against the i-th of the client's, from the deployed record's
  network environment), server on the pair's first node, client on the second, on the
  server's ib address. A node without RDMA devices (``NCCL_IB_HCA`` empty or
  ``/dev/infiniband`` missing) is a finding with its reason, never a pass.
- All-reduce: one process per node in the deployed image (``_allreduce_smoke.py``); with
  NCCL the transport must be ``NET/IB`` (``_nccl_transport`` verdict ``rdma``), with the
  ``tcp`` backend every socket's two ends must be ib addresses of the inventory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

from ansible_collections.sparkops.vllm.plugins.module_utils import _allreduce_smoke, _perftest

BACKENDS = ("nccl", "tcp")
SEVERITY_ORDER = ("error", "warning", "info")


class FabricError(ValueError):
    """Bad settings or a node the check cannot plan for; the message names the fix."""


def pairs(hosts: Sequence[str]) -> list[tuple[str, str]]:
    """Every unordered pair of ``hosts``, in inventory order (the first is the server)."""
    if len(set(hosts)) != len(hosts):
        raise FabricError(f"the hosts repeat: {list(hosts)}")
    return list(combinations(hosts, 2))


def _hca_list(value: Any) -> list[str]:
    """NCCL_IB_HCA as device names. NCCL v2.28.9-1 reads it in src/transport/net_ib.cc
    (line 701) with a leading ``^`` (exclude) or ``=`` (exact match) and parses the rest
    with ``parseStringList`` (src/misc/utils.cc: ``name[:port]``, comma separated). An
    exclude list names no device to test; the prefix and the port are not names."""
    text = str(value or "").strip()
    if not text or text.startswith("^"):
        return []
    names = []
    for item in text.lstrip("=").split(","):
        name = item.strip().split(":", 1)[0]
        if name and name not in names:
            names.append(name)
    return names


def node(host: str, record: Mapping[str, Any] | None, infiniband_present: bool) -> dict[str, Any]:
    """What the check needs of one node, from its deployed record (docs/deployed-record.md)."""
    network = (record or {}).get("network") or {}
    image = (record or {}).get("image") or {}
    if not network.get("address") or not image.get("ref"):
        raise FabricError(
            f"{host}: no deployed record with its network and image sections; deploy first "
            "(ansible-playbook deploy.yml), the fabric check tests what was deployed"
        )
    env = network.get("env") or {}
    hcas = _hca_list(env.get("NCCL_IB_HCA"))
    reason = None
    sysfs_root = network.get("sysfs_root")
    if not hcas:
        reason = "NCCL_IB_HCA is empty in the deployed record: roce_network found no RDMA device on the ib interface"
    elif sysfs_root not in (None, "", "/sys"):
        # roce_network_sysfs_root points elsewhere only for simulated devices (the lab's
        # ConnectX-7, docs/lab.md): they have a sysfs tree and uverbs nodes, no verbs.
        reason = (
            f"the RDMA devices {','.join(hcas)} are simulated (their sysfs is {sysfs_root}, not /sys): "
            "ib_write_bw needs a real HCA"
        )
    elif not infiniband_present:
        reason = f"/dev/infiniband is missing although NCCL_IB_HCA lists {','.join(hcas)}: the RDMA driver is not loaded"
    return {
        "host": host,
        "address": str(network["address"]),
        "interface": network.get("interface"),
        "hcas": hcas if reason is None else [],
        "listed_hcas": hcas,
        "rdma_reason": reason,
        "image": image.get("ref"),
        "image_id": image.get("id"),
    }


def plan(nodes: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The tests to run: ``rdma`` (one per pair and device index), the all-reduce's ranks."""
    backend = settings.get("allreduce_backend")
    if backend not in BACKENDS:
        raise FabricError(f"fabric_check_allreduce_backend={backend!r}: choose one of {', '.join(BACKENDS)}")
    _perftest.check_bounds(int(settings["rdma_duration_seconds"]), int(settings["rdma_message_bytes"]))
    by_host = {n["host"]: n for n in nodes}
    images = sorted({str(n["image_id"] or n["image"]) for n in nodes})
    if len(images) > 1:
        raise FabricError(
            f"the nodes run different images ({', '.join(images)}); redeploy so every node holds the same one"
        )
    tests = []
    base_port = int(settings.get("rdma_port", _perftest.DEFAULT_PORT))
    for server, client in pairs([n["host"] for n in nodes]):
        for index, (sdev, cdev) in enumerate(
            zip(by_host[server]["hcas"], by_host[client]["hcas"], strict=False)
        ):
            tests.append(
                {
                    "server": server,
                    "client": client,
                    "server_device": sdev,
                    "client_device": cdev,
                    "server_address": by_host[server]["address"],
                    "port": base_port + index,
                    "server_argv": _perftest.argv(
                        sdev,
                        duration_seconds=int(settings["rdma_duration_seconds"]),
                        message_bytes=int(settings["rdma_message_bytes"]),
                        port=base_port + index,
                    ),
                    "client_argv": _perftest.argv(
                        cdev,
                        duration_seconds=int(settings["rdma_duration_seconds"]),
                        message_bytes=int(settings["rdma_message_bytes"]),
                        port=base_port + index,
                        server=by_host[server]["address"],
                    ),
                }
            )
    ranks = {n["host"]: rank for rank, n in enumerate(nodes)}
    return {
        "nodes": list(nodes),
        "rdma": tests,
        "ranks": ranks,
        "master_address": nodes[0]["address"] if nodes else None,
        "backend": backend,
        # The files shipped into the image's container (the smoke test and its siblings).
        "bundle": list(_allreduce_smoke.BUNDLE),
    }


# Where the bundle is mounted in the container, read-only.
BUNDLE_MOUNT = "/opt/sparkops-fabric"


def allreduce_argv(
    fabric_plan: Mapping[str, Any],
    host: str,
    settings: Mapping[str, Any],
    *,
    container: str,
    labels: Mapping[str, str],
    env_file: str,
    scratch: str,
    gpus: bool,
    memlock: bool,
    rdma_devices: bool,
) -> list[str]:
    """``docker run`` of one rank in the deployed image, as the Ray unit runs its container
    (roles/ray_cluster/templates/ray.service.j2: host network, the node's ray.env, ``--gpus
    all``, ``/dev/infiniband``, an unlimited memlock), bounded twice: ``timeout`` inside the
    container ends the test (so the container ends with it), the caller's outside it."""
    by_host = {n["host"]: n for n in fabric_plan["nodes"]}
    me = by_host[host]
    size = int(settings["allreduce_bytes"])
    _allreduce_smoke.check_plan(
        size, int(settings["allreduce_warmup"]), int(settings["allreduce_iters"]), len(by_host)
    )
    seconds = int(settings["allreduce_timeout_seconds"])
    argv = ["docker", "run", "--rm", "--name", container]
    for key, value in sorted(labels.items()):
        argv += ["--label", f"{key}={value}"]
    argv += ["--network", "host", "--ipc", "host", "--env-file", env_file]
    if fabric_plan["backend"] == "nccl":
        if memlock:
            argv += ["--ulimit", "memlock=-1", "--cap-add", "IPC_LOCK"]
        if gpus:
            argv += ["--gpus", "all"]
        if rdma_devices:
            argv += ["--device", "/dev/infiniband"]
    env = {
        "RANK": fabric_plan["ranks"][host],
        "LOCAL_RANK": 0,
        "WORLD_SIZE": len(by_host),
        "MASTER_ADDR": fabric_plan["master_address"],
        "MASTER_PORT": int(settings["allreduce_port"]),
    }
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    argv += ["-v", f"{scratch}:{BUNDLE_MOUNT}:ro", str(me["image"])]
    argv += ["timeout", str(seconds), "python3", f"{BUNDLE_MOUNT}/_allreduce_smoke.py"]
    argv += ["--backend", fabric_plan["backend"], "--size-bytes", str(size)]
    argv += ["--warmup", str(settings["allreduce_warmup"]), "--iters", str(settings["allreduce_iters"])]
    if fabric_plan["backend"] == "tcp":
        argv += ["--bind-address", me["address"], "--timeout", str(seconds)]
    else:
        argv += ["--log-dir", "/tmp/sparkops-fabric-nccl"]
        if me["hcas"]:
            argv += ["--expect-devices", ",".join(me["hcas"])]
    return argv


def _finding(severity: str, code: str, host: str | None, message: str, fix: str) -> dict[str, Any]:
    return {"severity": severity, "code": code, "host": host, "message": message, "fix": fix}


def rdma_result(
    test: Mapping[str, Any],
    server: Mapping[str, Any],
    client: Mapping[str, Any],
    min_gbps: float,
) -> dict[str, Any]:
    """One ib_write_bw pair's verdict from the two sides' registered results (rc, stdout, stderr)."""
    out = {key: test[key] for key in ("server", "client", "server_device", "client_device")}
    out.update({"bw_average_gbps": None, "passed": False, "message": ""})
    try:
        parsed = _perftest.parse_bw(str(client.get("stdout") or ""))
    except _perftest.PerftestError as exc:
        tail = [
            line
            for side in (client, server)
            for line in str(side.get("stderr") or "").strip().splitlines()[-2:]
        ]
        rc = client.get("rc")
        reason = "timed out" if rc == 124 else f"rc={rc}"
        out["message"] = (
            f"ib_write_bw gave no result ({reason}: {exc}){': ' + ' | '.join(tail) if tail else ''}"
        )
        return out
    out["bw_average_gbps"] = parsed["bw_average_gbps"]
    out["passed"] = parsed["bw_average_gbps"] >= min_gbps and client.get("rc") == 0
    out["message"] = (
        f"{parsed['bw_average_gbps']} Gb/s average over {parsed['rows'][-1]['bytes']}-byte writes "
        f"({'>=' if out['passed'] else 'below'} {min_gbps} Gb/s)"
    )
    return out


def allreduce_result(
    raw: Mapping[str, Any] | None,
    backend: str,
    addresses: Sequence[str],
    min_busbw_gbps: float,
    *,
    expected_devices: Sequence[str] = (),
    ranks: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The all-reduce's verdict from rank 0's JSON report (``raw``: rc and the parsed report);
    ``ranks``: every node's registered run ({host: rc, stderr}), whose failures are named."""
    raw = raw or {}
    report = raw.get("report")
    out: dict[str, Any] = {"backend": backend, "passed": False, "busbw_gbps": None, "problems": []}
    for host, run in sorted((ranks or {}).items()):
        if run.get("rc") not in (0, None):
            tail = str(run.get("stderr") or "").strip().splitlines()[-2:]
            why = "timed out" if run.get("rc") == 124 else f"rc={run.get('rc')}"
            out["problems"].append(f"{host}'s rank ended {why}{': ' + ' | '.join(tail) if tail else ''}")
    if not isinstance(report, Mapping):
        tail = str(raw.get("stderr") or "").strip().splitlines()[-3:]
        reason = "timed out" if raw.get("rc") == 124 else f"rc={raw.get('rc')}"
        out["problems"].append(f"rank 0 gave no report ({reason}){': ' + ' | '.join(tail) if tail else ''}")
        return out
    out.update(
        busbw_gbps=report.get("busbw_gbps"),
        algbw_gbps=report.get("algbw_gbps"),
        time_us=report.get("time_us"),
        size_bytes=report.get("size_bytes"),
        world_size=report.get("world_size"),
        correct=bool(report.get("correct")),
    )
    if not report.get("correct"):
        out["problems"].append(
            f"the all-reduce's sum was wrong (max relative error {report.get('max_rel_error')})"
        )
    if report.get("world_size") != len(addresses):
        out["problems"].append(
            f"{report.get('world_size')} ranks took part, the cluster has {len(addresses)} nodes"
        )
    if backend == "nccl":
        transport = report.get("transport") or {}
        out["transport"] = transport.get("verdict")
        if transport.get("verdict") != "rdma":
            causes = "; ".join(f.get("message", "") for f in transport.get("findings") or [])
            out["problems"].append(
                f"NCCL transport is {transport.get('verdict')!r}, not NET/IB on {','.join(expected_devices)}"
                + (f": {causes}" if causes else "")
            )
    else:
        sockets = report.get("sockets") or []
        out["sockets"] = sockets
        allowed = set(addresses)
        stray = [s for s in sockets if s.get("local") not in allowed or s.get("peer") not in allowed]
        # Every non-zero rank holds one connection and rank 0 its other end: 2(n-1) ends.
        if len(sockets) != 2 * (len(addresses) - 1):
            out["problems"].append(
                f"{len(sockets)} socket ends reported, expected {2 * (len(addresses) - 1)}"
            )
        if stray:
            out["problems"].append(
                "sockets outside the ib addresses: "
                + ", ".join(f"rank {s.get('rank')} {s.get('local')}->{s.get('peer')}" for s in stray)
            )
    busbw = report.get("busbw_gbps")
    if busbw is None or busbw < min_busbw_gbps:
        out["problems"].append(f"bus bandwidth {busbw} GB/s is below {min_busbw_gbps} GB/s")
    out["passed"] = not out["problems"]
    return out


def report(
    fabric_plan: Mapping[str, Any],
    rdma_results: Sequence[Mapping[str, Any]],
    allreduce: Mapping[str, Any],
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """The whole result: per node, per RDMA pair, the all-reduce, findings, and ``passed``."""
    findings = []
    require_rdma = bool(settings.get("require_rdma", True))
    for n in fabric_plan["nodes"]:
        if n["rdma_reason"]:
            findings.append(
                _finding(
                    "error" if require_rdma else "warning",
                    "rdma_not_tested",
                    n["host"],
                    f"RDMA not tested on {n['host']}: {n['rdma_reason']}",
                    "see docs/runbooks/nccl-errors.md (NCCL fell back to sockets); on a node meant to have no "
                    "RDMA (the lab) set fabric_check_require_rdma: false",
                )
            )
    for result in rdma_results:
        if not result["passed"]:
            findings.append(
                _finding(
                    "error",
                    "rdma_bandwidth",
                    result["client"],
                    f"ib_write_bw {result['server']}:{result['server_device']} <- "
                    f"{result['client']}:{result['client_device']}: {result['message']}",
                    "docs/runbooks/fabric.md: check the link speed, MTU and PCIe state of both devices",
                )
            )
    for problem in allreduce.get("problems") or []:
        findings.append(
            _finding(
                "error",
                "allreduce",
                None,
                f"all-reduce ({allreduce['backend']}): {problem}",
                "docs/runbooks/fabric.md",
            )
        )
    findings.sort(key=lambda f: SEVERITY_ORDER.index(f["severity"]))
    thresholds = {
        "rdma_min_gbps": float(settings["rdma_min_gbps"]),
        "allreduce_min_busbw_gbps": float(settings["allreduce_min_busbw_gbps"]),
    }
    return {
        "passed": not any(f["severity"] == "error" for f in findings),
        "thresholds": thresholds,
        "nodes": [
            {key: n[key] for key in ("host", "address", "interface", "hcas", "rdma_reason", "image")}
            for n in fabric_plan["nodes"]
        ],
        "rdma": list(rdma_results),
        "allreduce": dict(allreduce),
        "findings": findings,
    }


def _cell(value: Any) -> str:
    return "—" if value is None or value == "" else str(value).replace("|", "\\|")


def markdown(doc: Mapping[str, Any]) -> str:
    """The report as Markdown: the verdict, a table per test kind, the findings with fixes."""
    th = doc["thresholds"]
    lines = [f"# Fabric check: {'passed' if doc['passed'] else 'FAILED'}", ""]
    lines += [
        "## RDMA (ib_write_bw, per HCA)",
        "",
        "| server | device | client | device | Gb/s | result |",
        "|---|---|---|---|---:|---|",
    ]
    for r in doc["rdma"]:
        lines.append(
            f"| {_cell(r['server'])} | {_cell(r['server_device'])} | {_cell(r['client'])} | "
            f"{_cell(r['client_device'])} | {_cell(r['bw_average_gbps'])} | "
            f"{'pass' if r['passed'] else 'FAIL'} (min {th['rdma_min_gbps']}) |"
        )
    for n in doc["nodes"]:
        if n["rdma_reason"]:
            lines.append(f"| {_cell(n['host'])} | — | — | — | — | not tested: {_cell(n['rdma_reason'])} |")
    a = doc["allreduce"]
    lines += [
        "",
        "## All-reduce (in the deployed image, one rank per node)",
        "",
        "| backend | ranks | bytes | transport | busbw GB/s | result |",
        "|---|---:|---:|---|---:|---|",
    ]
    transport = a.get("transport") or (
        "TCP between ib addresses" if a.get("backend") == "tcp" and a.get("sockets") else None
    )
    lines.append(
        f"| {_cell(a.get('backend'))} | {_cell(a.get('world_size'))} | {_cell(a.get('size_bytes'))} | "
        f"{_cell(transport)} | {_cell(a.get('busbw_gbps'))} | "
        f"{'pass' if a.get('passed') else 'FAIL'} (min {th['allreduce_min_busbw_gbps']}) |"
    )
    if doc["findings"]:
        lines += ["", "## Findings", ""]
        for f in doc["findings"]:
            lines.append(f"- **{f['severity']}** `{f['code']}`: {f['message']}. Fix: {f['fix']}")
    return "\n".join(lines) + "\n"
