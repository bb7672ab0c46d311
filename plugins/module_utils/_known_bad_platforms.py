# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Known-bad platforms: one table, each row with its source and its fix.

Preflight evaluates the node rows (driver branch and flavour, the kernel's CMA
accounting) on every node before anything changes; the vllm_image stage evaluates the
image rows (which NCCL the image's torch loads) where it reads the image's vLLM
release. Every row gives one result per host:

``{id, status, host, value, message, fix, source}`` with status ``pass``, ``warn``,
``fail``, ``accepted`` (a ``fail`` the operator accepted on their own responsibility
with ``preflight_known_bad_accept``) or ``not_applicable`` (the row cannot be decided
here, and says why: a lab node without ``/proc/driver/nvidia/version``, an image
without NCCL). Nothing passes silently: a row that cannot be read is reported as such.

docs/known-bad-platforms.md renders this table for people; keep the two in step.
"""

from __future__ import annotations

import json
import re

from ansible_collections.sparkops.vllm.plugins.module_utils._nvidia_smi import driver_branch

STATUSES = ("pass", "warn", "fail", "accepted", "not_applicable")

# Driver branches seen working on GB10. Every GB10 nvidia-smi capture the project holds
# runs 580 (580.95.05 in tests/fixtures/real/01, 03, 04, 05; 580.173.02 in
# open-gpu-kernel-modules #1358 and Start9Labs/start-technologies PR #3693, whose
# author notes that DGX OS ships nvidia-driver-580-open).
KNOWN_GOOD_BRANCHES = (580,)
# The oldest branch accepted. No capture shows GB10 on a branch before 580, and the GB10
# captures report CUDA 13.0 (fixtures 01 and 05); that no older branch drives GB10 is a
# guess from those captures, not a statement of NVIDIA's.
MINIMUM_BRANCH = 580

DRIVER_SOURCES = (
    "tests/fixtures/real/01, 03, 04, 05 (GB10 on 580.95.05); "
    "https://github.com/Start9Labs/start-technologies/pull/3693 (DGX OS ships nvidia-driver-580-open)"
)

# The proprietary kernel-module flavour on GB10. Start9Labs/start-technologies PR #3693
# (2026-08-14): with 580.173.02's proprietary modules "the GPU is found but never
# initializes" (Xid 169, RmInitAdapter failed), the open flavour of the same version
# works; NVIDIA's README for 580.159.03 says Blackwell and later are supported by the open
# modules only (quoted in issue #3465). The same PR reports 580.159.03 working with the
# proprietary flavour, so below 580.173.02 the row warns; that every version from
# 580.173.02 on fails the same way is a guess from one version.
PROPRIETARY_FAILS_FROM = (580, 173, 2)
FLAVOUR_SOURCE = (
    "https://github.com/Start9Labs/start-technologies/pull/3693, "
    "https://github.com/Start9Labs/start-technologies/issues/3465"
)
# /proc/driver/nvidia/version names the flavour: "NVRM version: NVIDIA UNIX Open Kernel
# Module for x86_64  580.159.04 ..." (tests/fixtures/known_bad/h200_proc_driver_nvidia_version.txt)
# for the open modules, "NVRM version: NVIDIA UNIX x86_64 Kernel Module ..." for the
# proprietary ones (the two forms as quoted in LukeShortCloud/rootpages #812).
_NVRM_LINE = re.compile(
    r"^NVRM version:\s*NVIDIA UNIX\s+(?P<what>.*?Kernel Module)\b.*?(?P<version>\d+\.\d+(?:\.\d+)?)"
)

# Kexec HandOver (KHO) scratch memory counted as CMA. NVIDIA/NV-Kernels PR #590 and
# #591 (2026-09-13/14): on GB10 with Linux 7.0.0-1019.19~24.04.2 (drivers 595.84 and
# 580.173.02 alike) default-enabled KHO releases about 9.3 GiB as MIGRATE_CMA pageblocks,
# which long-term pins (RDMA memory registration, ibv_reg_mr) cannot use; /proc/meminfo
# then shows "CmaTotal=0 with approximately 9.7 GiB in CmaFree", and NCCL fails with
# "Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory". Booting with
# kho=off gives CmaTotal=0, CmaFree=0 and passes. Field reports of the same signature:
# MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark #259 (CmaTotal 0 kB, CmaFree 940604 kB
# on 7.0.0-1019-nvidia; CmaTotal 32 MiB with CmaFree 9.3 GiB on 7.0.0-31-generic),
# MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks #14 (7.0.0-1019-nvidia with 580.173.02,
# 6.17.0-1032-nvidia works), NVIDIA/open-gpu-kernel-modules #1358 (a comment of
# 2026-09-13: 7.0.0-1019-nvidia with nvidia-driver-580-open 580.173.02 fails within
# seconds of NCCL rendezvous with NV_ERR_NO_MEMORY; it does not quote /proc/meminfo).
# The rule is the signature, CmaFree above CmaTotal, not a kernel release: CmaTotal 0
# with CmaFree 0 is a kernel without a default CMA pool (NV-Kernels PR #404 sets
# CONFIG_CMA_SIZE_MBYTES=0 on purpose), which is fine.
CMA_SOURCE = (
    "https://github.com/NVIDIA/NV-Kernels/pull/591, "
    "https://github.com/MiaAI-Lab/DeepSeek-v4-Flash-DSpark-2x-DGX-Spark/issues/259, "
    "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1358"
)
CMA_FIX = (
    "boot with kho=off: add it to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, run `sudo update-grub`, "
    "reboot, and check `grep -i cma /proc/meminfo` shows CmaFree no larger than CmaTotal "
    "(or boot the previous kernel, 6.17.0-1032-nvidia in the reports)"
)

# Cross-node tensor parallelism with CUDA graphs deadlocks on NCCL 2.28.9 ("RPC call to
# sample_tokens timed out" within the first requests) and does not on 2.30.4, nothing
# else changed: vLLM #52504 (2026-08-16, 2x DGX Spark over RoCE). NVIDIA/nccl's log
# between v2.28.9-1 and v2.30.4-1 names no commit for it; the nearest is v2.29.3-1's
# "Fixes CAS usage in case of weak failure which was causing a hang on ARM" (builds with
# gcc before 10), so which release fixed it is the report's, and that versions between
# 2.28.9 and 2.30.4 deadlock too is a guess.
NCCL_GRAPH_FIXED = (2, 30, 4)
NCCL_GRAPH_SOURCE = "https://github.com/vllm-project/vllm/issues/52504"
# A pip NCCL and a system NCCL that are different builds: vLLM #42354 (comment of
# 2026-07-23, 2x DGX Spark, vLLM 0.25.1, TP=2 across nodes): the wheel nvidia-nccl-cu13
# and DGX OS's libnccl2 both report 2.28.9 but are different binaries; with the wheel's,
# generation wedged after about 20-26 minutes of load in ncclAllReduce; pointing the
# wheel's path at the system library fixed it (a 60-minute soak). vLLM #41725 repeats
# the fix. One field report with a controlled A/B, no maintainer's word: a warning.
NCCL_PAIR_SOURCE = "https://github.com/vllm-project/vllm/issues/42354"


def _result(row, host, status, value, message, *rest):
    """One result; ``rest`` is the fix and the source, each optional."""
    fix, source = (*rest, "", "")[:2]
    return {
        "id": row,
        "status": status,
        "host": host,
        "value": value,
        "message": message,
        "fix": fix,
        "source": source,
    }


def version_tuple(text):
    """``(2, 28, 9)`` from ``2.28.9`` or ``2.28.9+cuda13.0``; None when there is no version."""
    match = re.match(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?", str(text or ""))
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


def nccl_version_from_code(code):
    """NCCL's ``ncclGetVersion`` code as ``2.28.9``: X*10000+Y*100+Z since 2.9 (nccl.h.in's NCCL_VERSION)."""
    if not isinstance(code, int) or code <= 0:
        return None
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def driver_flavour(proc_version_text):
    """``open``, ``proprietary`` or None from /proc/driver/nvidia/version."""
    for line in (proc_version_text or "").splitlines():
        match = _NVRM_LINE.match(line.strip())
        if match:
            return "open" if "Open Kernel Module" in match.group("what") else "proprietary"
    return None


def _accept(result, accepted):
    if result["status"] == "fail" and result["id"] in accepted:
        result = dict(result, status="accepted")
        result["message"] += " Accepted on the operator's responsibility (preflight_known_bad_accept)."
    return result


def _driver_rows(host, driver_version, proc_version_text):
    branch = driver_branch(driver_version)
    rows = []
    value = f"driver {driver_version} (branch {branch})"
    if branch is None:
        rows.append(
            _result(
                "driver_branch",
                host,
                "fail",
                f"driver {driver_version!r}",
                f"{host}: the NVIDIA driver version {driver_version!r} has no branch.",
                "check `nvidia-smi --query-gpu=driver_version --format=csv,noheader` on the node",
                DRIVER_SOURCES,
            )
        )
    elif branch < MINIMUM_BRANCH:
        rows.append(
            _result(
                "driver_below_minimum",
                host,
                "fail",
                value,
                f"{host}: NVIDIA driver {driver_version} is older than the minimum branch {MINIMUM_BRANCH} "
                "for a unified-memory (GB10) node.",
                f"install a {MINIMUM_BRANCH} driver (DGX OS: nvidia-driver-{MINIMUM_BRANCH}-open), see "
                "docs/runbooks/driver.md, or accept it with preflight_known_bad_accept: [driver_below_minimum]",
                DRIVER_SOURCES,
            )
        )
    elif branch in KNOWN_GOOD_BRANCHES:
        rows.append(
            _result(
                "driver_branch",
                host,
                "pass",
                value,
                f"{host}: branch {branch} is known good on GB10.",
                "",
                DRIVER_SOURCES,
            )
        )
    else:
        rows.append(
            _result(
                "driver_branch",
                host,
                "warn",
                value,
                f"{host}: NVIDIA driver branch {branch} has not been validated with this project on GB10 "
                f"(known good: {', '.join(map(str, KNOWN_GOOD_BRANCHES))}); no known-bad row matches it.",
                "report how it runs (docs/known-bad-platforms.md); nothing needs to change to deploy",
                DRIVER_SOURCES,
            )
        )

    flavour = driver_flavour(proc_version_text)
    if proc_version_text is None:
        rows.append(
            _result(
                "driver_proprietary_flavour",
                host,
                "not_applicable",
                None,
                f"{host}: /proc/driver/nvidia/version is not readable, so the kernel module's flavour is not known.",
                "",
                FLAVOUR_SOURCE,
            )
        )
    elif flavour is None:
        rows.append(
            _result(
                "driver_proprietary_flavour",
                host,
                "not_applicable",
                proc_version_text.strip().splitlines()[0][:200] if proc_version_text.strip() else "",
                f"{host}: /proc/driver/nvidia/version has no NVRM version line this table understands.",
                "",
                FLAVOUR_SOURCE,
            )
        )
    elif flavour == "open":
        rows.append(
            _result(
                "driver_proprietary_flavour",
                host,
                "pass",
                "open",
                f"{host}: the open kernel modules are loaded.",
                "",
                FLAVOUR_SOURCE,
            )
        )
    else:
        version = version_tuple(driver_version)
        failing = version is not None and version >= PROPRIETARY_FAILS_FROM
        rows.append(
            _result(
                "driver_proprietary_flavour",
                host,
                "fail" if failing else "warn",
                f"proprietary, driver {driver_version}",
                f"{host}: the proprietary NVIDIA kernel modules are loaded with driver {driver_version}; GB10 "
                "(Blackwell) is supported by the open modules only, and with 580.173.02's proprietary modules the "
                "GPU never initializes.",
                f"install the open flavour of the same driver (DGX OS: nvidia-driver-{branch}-open) and reboot"
                + (
                    ", or accept it with preflight_known_bad_accept: [driver_proprietary_flavour]"
                    if failing
                    else ""
                ),
                FLAVOUR_SOURCE,
            )
        )
    return rows


def _cma_row(host, kernel_release, memory):
    kernel = f"kernel {kernel_release}" if kernel_release else "kernel unknown"
    total_bytes = (memory or {}).get("cma_total_bytes")
    free_bytes = (memory or {}).get("cma_free_bytes")
    if total_bytes is None or free_bytes is None:
        return _result(
            "kernel_kho_cma",
            host,
            "not_applicable",
            kernel,
            f"{host}: /proc/meminfo has no CmaTotal/CmaFree ({kernel}): the kernel has no CMA, so KHO scratch "
            "memory cannot be miscounted as CMA.",
            "",
            CMA_SOURCE,
        )
    total, free = total_bytes // 1024, free_bytes // 1024
    value = f"{kernel}, CmaTotal {total} kB, CmaFree {free} kB"
    if free > total:
        return _result(
            "kernel_kho_cma",
            host,
            "fail",
            value,
            f"{host}: /proc/meminfo shows CmaFree ({free} kB) above CmaTotal ({total} kB) on {kernel}: the kernel's "
            "Kexec HandOver scratch memory is counted as CMA, and RDMA memory registration (ibv_reg_mr, NCCL over "
            "RoCE) fails with ENOMEM under load.",
            CMA_FIX + ", or accept it with preflight_known_bad_accept: [kernel_kho_cma]",
            CMA_SOURCE,
        )
    return _result(
        "kernel_kho_cma",
        host,
        "pass",
        value,
        f"{host}: CmaFree is within CmaTotal ({kernel}).",
        "",
        CMA_SOURCE,
    )


def evaluate_node(
    host,
    *,
    unified_memory,
    driver_version,
    proc_driver_version=None,
    kernel_release=None,
    memory=None,
    accept=(),
):
    """Every node row for one host, in table order.

    ``proc_driver_version`` is the text of /proc/driver/nvidia/version or None when it
    cannot be read; ``memory`` is memory_info's ``memory`` (``_meminfo.memory_from_meminfo``).
    The driver rows are about GB10; on a discrete GPU they are not applicable.
    """
    accepted = set(accept or ())
    unknown = accepted - set(ROW_IDS)
    if unknown:
        raise ValueError(
            f"preflight_known_bad_accept names unknown rows {sorted(unknown)}; known rows: {', '.join(ROW_IDS)}"
        )
    if unified_memory:
        rows = _driver_rows(host, driver_version, proc_driver_version)
    else:
        rows = [
            _result(
                row,
                host,
                "not_applicable",
                f"driver {driver_version}",
                f"{host}: no unified-memory GPU; the driver rows are about GB10.",
                "",
                source,
            )
            for row, source in (
                ("driver_branch", DRIVER_SOURCES),
                ("driver_proprietary_flavour", FLAVOUR_SOURCE),
            )
        ]
    rows.append(_cma_row(host, kernel_release, memory))
    return [_accept(row, accepted) for row in rows]


class ProbeError(ValueError):
    """The image probe printed something that is not its JSON."""


def parse_probe(text):
    """The probe's JSON (``_nccl_probe.py``), from its stdout; the last JSON line counts."""
    for raw in reversed((text or "").strip().splitlines()):
        line = raw.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError as exc:
                raise ProbeError(f"the NCCL probe printed invalid JSON: {exc}") from None
            if not isinstance(data, dict):
                break
            return data
    raise ProbeError(f"the NCCL probe printed no JSON object: {(text or '').strip()[:300]!r}")


def image_nccl(probe):
    """``{loaded_version, loaded_by, pip, system}`` summarising which NCCL the image's torch uses.

    ``loaded_by`` is ``torch`` when torch reported its NCCL, ``pip``/``system`` when only
    that library exists (vLLM's wrapper opens ``libnccl.so.2`` by name and gets the one on
    the loader's path), None when the image has none.
    """
    pip_libs = [
        dict(lib, package=entry.get("package"), package_version=entry.get("version"))
        for entry in probe.get("pip") or []
        for lib in entry.get("libraries") or []
    ]
    system_libs = []
    seen = set()
    for lib in probe.get("system") or []:
        key = lib.get("realpath") or lib.get("path")
        if key not in seen:
            seen.add(key)
            system_libs.append(lib)
    torch = probe.get("torch") or {}
    loaded_version, loaded_by, loaded_paths = None, None, list(torch.get("loaded") or [])
    if torch.get("nccl_version"):
        loaded_version, loaded_by = str(torch["nccl_version"]), "torch"
    elif pip_libs:
        loaded_version = nccl_version_from_code(pip_libs[0].get("version_code")) or pip_libs[0].get(
            "package_version"
        )
        loaded_by = "pip"
    elif system_libs:
        loaded_version = nccl_version_from_code(system_libs[0].get("version_code"))
        loaded_by = "system"
    return {
        "loaded_version": loaded_version,
        "loaded_by": loaded_by,
        "loaded_paths": loaded_paths,
        "torch_version": torch.get("version"),
        "pip": [
            {
                "package": lib["package"],
                "version": nccl_version_from_code(lib.get("version_code")) or lib["package_version"],
                "path": lib.get("realpath") or lib.get("path"),
                "sha256": lib.get("sha256"),
            }
            for lib in pip_libs
        ],
        "system": [
            {
                "version": nccl_version_from_code(lib.get("version_code")),
                "path": lib.get("realpath") or lib.get("path"),
                "sha256": lib.get("sha256"),
            }
            for lib in system_libs
        ],
    }


def evaluate_image(host, nccl, *, cuda_graphs, tensor_parallel_size, gpus_per_node):
    """The image rows for the image on ``host`` (the head: every node holds its image ID)."""
    spans_nodes = int(tensor_parallel_size) > int(gpus_per_node)
    version = nccl.get("loaded_version")
    rows = []
    if not version:
        rows.append(
            _result(
                "nccl_graph_cross_node",
                host,
                "not_applicable",
                None,
                f"{host}: not applicable: no NCCL in the image (no torch NCCL, no nvidia-nccl-cu* wheel, no libnccl "
                "on the loader's path).",
                "",
                NCCL_GRAPH_SOURCE,
            )
        )
    else:
        value = f"NCCL {version} ({nccl['loaded_by']})"
        old = (version_tuple(version) or (0,)) < NCCL_GRAPH_FIXED
        fixed = ".".join(map(str, NCCL_GRAPH_FIXED))
        if old and cuda_graphs and spans_nodes:
            rows.append(
                _result(
                    "nccl_graph_cross_node",
                    host,
                    "warn",
                    value,
                    f"{host}: the image's NCCL is {version}, older than {fixed}, with CUDA graphs on and tensor "
                    f"parallelism across nodes (TP {tensor_parallel_size}, {gpus_per_node} GPU(s) per node): cross-node "
                    'CUDA-graph replay deadlocks on NCCL 2.28.9 ("RPC call to sample_tokens timed out").',
                    f"use an image whose torch loads NCCL {fixed} or newer (pip install 'nvidia-nccl-cu13>={fixed}' "
                    "in the image), or set sparkops_cuda_graphs: false (--enforce-eager)",
                    NCCL_GRAPH_SOURCE,
                )
            )
        else:
            why = (
                f"{version} is {fixed} or newer"
                if not old
                else ("CUDA graphs are off" if not cuda_graphs else "tensor parallelism stays within a node")
            )
            rows.append(
                _result(
                    "nccl_graph_cross_node", host, "pass", value, f"{host}: {why}.", "", NCCL_GRAPH_SOURCE
                )
            )

    pip_libs, system_libs = nccl.get("pip") or [], nccl.get("system") or []
    if not pip_libs and not system_libs:
        rows.append(
            _result(
                "nccl_pip_system_pair",
                host,
                "not_applicable",
                None,
                f"{host}: not applicable: no NCCL in the image.",
                "",
                NCCL_PAIR_SOURCE,
            )
        )
    elif not pip_libs or not system_libs:
        only = "a pip wheel's" if pip_libs else "a system"
        rows.append(
            _result(
                "nccl_pip_system_pair",
                host,
                "pass",
                f"{only} NCCL only",
                f"{host}: the image holds {only} NCCL only.",
                "",
                NCCL_PAIR_SOURCE,
            )
        )
    else:
        pip_lib, system_lib = pip_libs[0], system_libs[0]
        same = pip_lib.get("sha256") and pip_lib.get("sha256") == system_lib.get("sha256")
        torch_paths = nccl.get("loaded_paths") or []
        uses_pip = not torch_paths or pip_lib["path"] in torch_paths
        value = (
            f"pip {pip_lib['package']} {pip_lib['version']} at {pip_lib['path']}; "
            f"system {system_lib['version']} at {system_lib['path']}"
        )
        if same or not uses_pip:
            why = "the same file" if same else f"torch loads the system library ({', '.join(torch_paths)})"
            rows.append(
                _result("nccl_pip_system_pair", host, "pass", value, f"{host}: {why}.", "", NCCL_PAIR_SOURCE)
            )
        else:
            rows.append(
                _result(
                    "nccl_pip_system_pair",
                    host,
                    "warn",
                    value,
                    f"{host}: the image holds two different NCCL builds and its torch loads the pip one: {value}. "
                    "On two DGX Sparks a pip NCCL that differs from the system's (even at the same version) wedged "
                    "generation in ncclAllReduce after 20-26 minutes of load.",
                    f"in the image, point the wheel's library at the system one (`ln -sf {system_lib['path']} "
                    f"{pip_lib['path']}`) and rebuild, or remove the system libnccl; docs/runbooks/nccl-errors.md",
                    NCCL_PAIR_SOURCE,
                )
            )
    return rows


def failures(results):
    """The results that stop the run."""
    return [result for result in results if result["status"] == "fail"]


def report_lines(results):
    """One line per result: ``host row status: message [fix] (source)``."""
    lines = []
    for result in results:
        line = f"{result['id']} {result['status']}: {result['message']}"
        if result["status"] in ("warn", "fail", "accepted") and result["fix"]:
            line += f" Fix: {result['fix']}."
        if result["status"] != "pass":
            line += f" Source: {result['source']}"
        lines.append(line)
    return lines


ROW_IDS = (
    "driver_branch",
    "driver_below_minimum",
    "driver_proprietary_flavour",
    "kernel_kho_cma",
    "nccl_graph_cross_node",
    "nccl_pip_system_pair",
)
