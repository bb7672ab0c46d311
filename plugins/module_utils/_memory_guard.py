# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The node's out-of-memory guard when Ray's memory monitor is off: earlyoom, one source.

The memory plan and the ray_cluster role read the same figures from here: the plan keeps
its peak under earlyoom's SIGTERM threshold (less the safety margin), and the role writes
``EARLYOOM_ARGS`` from :func:`earlyoom_args` (the plan records it, ``earlyoom_args``).

earlyoom(1) (rfjakob/earlyoom MANPAGE.md; Debian/Ubuntu package ``earlyoom``):

* ``-m PERCENT[,KILL_PERCENT]``: SIGTERM once available memory (MemAvailable) and free swap
  are both below their PERCENT, SIGKILL below KILL_PERCENT (default PERCENT/2). Up to
  v1.7 the percentage is of MemTotal; from v1.8 of "user mem total" (MemAvailable +
  AnonPages), which is never more than MemTotal. So keeping MemAvailable at or above
  PERCENT x MemTotal keeps earlyoom quiet with either version: the plan's limit is
  ``MemTotal x (1 - PERCENT/100)``.
* ``-M SIZE[,KILL_SIZE]`` (KiB) is the same minimum as an absolute size; with both, the
  lower one wins. The project passes ``-m`` only.
* ``-s 100,100`` ignores swap (GB10 nodes run without swap); ``-r 0`` no periodic report.
* ``--prefer REGEX`` adds 300 to the oom_score of processes whose ``comm`` (the first 15
  bytes of the name, /proc/PID/comm) matches; ``--avoid REGEX`` subtracts 300.
* ``--dryrun``: choose a victim and report it, kill nothing. Debian 12's earlyoom 1.7 run with
  :func:`earlyoom_args` on a lab node reports the thresholds and regexes asked for
  (tests/fixtures/earlyoom/, read by :func:`parse_earlyoom_startup`); given a KILL above
  TERM it raises TERM to KILL with only a warning, so :func:`check_percents` refuses that.

Why prefer/avoid matter on a GB10: cudaMalloc memory is not in a process's RSS, so
oom_score alone does not point at the process holding the unified memory. The holders
are Ray's GPU workers (setproctitle ``ray::RayWorkerWrapper`` -> comm ``ray::RayWorkerW``)
and vLLM's engine (``VLLM::EngineCore`` -> comm ``VLLM::EngineCor``; vLLM's own
``vllm`` and PyTorch's ``pt_main_thread``). Never the node's access and runtime (sshd,
systemd, dockerd, containerd) nor Ray's head processes, whose loss takes the whole
cluster down (gcs_server, raylet, the dashboard and log monitor).
"""

from __future__ import annotations

import math
import re

# The SIGTERM and SIGKILL thresholds in percent of memory the project gives earlyoom.
# 4 % of a 119.70 GiB GB10 is 4.79 GiB: room for the kernel and sshd when the guard fires.
DEFAULT_EARLYOOM_TERM_PERCENT = 4.0
DEFAULT_EARLYOOM_KILL_PERCENT = 2.0

# Prefer the memory holders only: Ray's GPU workers, not every "ray::" process. The lab's
# serving nodes (tests/fixtures/earlyoom/comm_lab_*_serving.tsv) also run ray::DashboardA
# and ray::RuntimeEnv, Ray's per-node agents; Ray 2.60.0's raylet fate-shares with them
# (killing the dashboard agent took the raylet and the node's vLLM rank down, measured:
# tests/fixtures/earlyoom/ray_2.60_dashboard_agent_killed_raylet.out). So they, and the
# `ray start --block` process (comm "ray"), are avoided like the head's processes.
EARLYOOM_PREFER = r"^(ray::RayWorkerW.*|VLLM::.*|vllm|pt_main_thread)$"
EARLYOOM_AVOID = (
    r"^(sshd|systemd|systemd-.*|dockerd|containerd|containerd-shim.*|earlyoom|"
    r"gcs_server|raylet|ray|ray::DashboardA.*|ray::RuntimeEnv.*|dashboard|log_monitor.*|ray_client_ser.*)$"
)


class GuardError(ValueError):
    """A guard setting that earlyoom would refuse; the message names it and the fix."""


def check_percents(term: float, kill: float) -> None:
    """Refuse thresholds earlyoom refuses (exit 15) or that make no sense to plan with."""
    for name, value in (("earlyoom_term_percent", term), ("earlyoom_kill_percent", kill)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise GuardError(
                f"{name} is {value!r}: give a percentage such as {DEFAULT_EARLYOOM_TERM_PERCENT}."
            )
        if not 0 < value < 100:
            raise GuardError(
                f"{name} {value} is outside (0, 100): earlyoom's -m takes a percentage of memory."
            )
    if kill > term:
        raise GuardError(
            f"earlyoom_kill_percent {kill} is above earlyoom_term_percent {term}: SIGKILL comes after SIGTERM, "
            "give a kill percent at most the term percent (earlyoom's default is half)."
        )


def _number(value: float) -> str:
    return f"{value:g}"


def earlyoom_args(
    term: float = DEFAULT_EARLYOOM_TERM_PERCENT, kill: float = DEFAULT_EARLYOOM_KILL_PERCENT
) -> str:
    """EARLYOOM_ARGS for /etc/default/earlyoom (the Debian package's unit reads it)."""
    check_percents(term, kill)
    return f"-m {_number(term)},{_number(kill)} -s 100,100 -r 0 --prefer '{EARLYOOM_PREFER}' --avoid '{EARLYOOM_AVOID}'"


# earlyoom's startup lines (earlyoom 1.7, Debian 12's package; captured on a lab node:
# tests/fixtures/earlyoom/): what it parsed from its arguments.
_EARLYOOM_STARTUP = {
    "version": re.compile(r"^earlyoom v?(\S+)$", re.MULTILINE),
    "prefer": re.compile(r"^Preferring to kill process names that match regex '(.*)'$", re.MULTILINE),
    "avoid": re.compile(r"^Will avoid killing process names that match regex '(.*)'$", re.MULTILINE),
    "term_percent": re.compile(r"^sending SIGTERM when mem <=\s*([0-9.]+)% and swap <=", re.MULTILINE),
    "kill_percent": re.compile(r"^\s*SIGKILL when mem <=\s*([0-9.]+)% and swap <=", re.MULTILINE),
    "mem_total_mib": re.compile(r"^mem total:\s*([0-9]+) MiB", re.MULTILINE),
}


def parse_earlyoom_startup(text: str) -> dict:
    """What earlyoom reported at startup: version, dryrun, thresholds (percent), prefer/avoid (None: not set)."""
    found = {}
    for key, pattern in _EARLYOOM_STARTUP.items():
        match = pattern.search(text)
        found[key] = match.group(1) if match else None
    for key, signal in (("term_percent", "SIGTERM"), ("kill_percent", "SIGKILL")):
        if found[key] is None:
            raise GuardError(f"earlyoom reported no {signal} threshold: {text[:200]!r}")
        found[key] = float(found[key])
    found["mem_total_mib"] = int(found["mem_total_mib"]) if found["mem_total_mib"] else None
    found["dryrun"] = "dryrun mode enabled, will not kill anything" in text
    found["warnings"] = re.findall(r"^warning: (.*)$", text, re.MULTILINE)
    return found


_VICTIM_RE = re.compile(
    r'^sending (?P<signal>SIG[A-Z]+) to process (?P<pid>\d+) uid (?P<uid>\d+) "(?P<comm>[^"]*)": '
    r"badness (?P<badness>-?\d+), VmRSS (?P<rss_mib>\d+) MiB",
    re.MULTILINE,
)


def parse_earlyoom_victims(text: str) -> list[dict]:
    """Every victim earlyoom 1.7 chose in a text (``sending SIGTERM to process ...``), in order."""
    victims = []
    for match in _VICTIM_RE.finditer(text or ""):
        found = match.groupdict()
        for key in ("pid", "uid", "badness", "rss_mib"):
            found[key] = int(found[key])
        victims.append(found)
    return victims


def earlyoom_badness(
    comm: str, oom_score: int, prefer: str = EARLYOOM_PREFER, avoid: str = EARLYOOM_AVOID
) -> int:
    """earlyoom 1.7's badness of a process: its oom_score, +300 on --prefer, -300 on --avoid (kill.c)."""
    badness = int(oom_score)
    if prefer and re.search(prefer, comm):
        badness += 300
    if avoid and re.search(avoid, comm):
        badness -= 300
    return badness


def earlyoom_limit(sys_total: float, term: float) -> float:
    """The most the node may use, in the unit of ``sys_total``, before earlyoom sends SIGTERM."""
    return sys_total * (1.0 - term / 100.0)


# --- page cache on unified memory ------------------------------------------------------------
#
# What vLLM and the driver do with the page cache on a GB10, per version (docs/memory-plan.md,
# "GB10 facts"):
# * cudaMemGetInfo on an integrated GPU reports MemFree: page cache counts as used (NVIDIA's
#   CUDA for Tegra application note; DGX Spark known issues, "memory reporting differences
#   with unified memory architecture").
# * vLLM from about 0.12 replaces it with MemAvailable at its startup snapshot
#   (vllm/utils/mem_utils.py MemorySnapshot.measure(); PR #35356 keys it on is_integrated;
#   confirmed on a GB10 with 0.24.0 in vllm-project/vllm#48140). Before, MemFree decided.
# * Either way the driver does not reliably reclaim page cache for its own allocations:
#   NV_ERR_NO_MEMORY with MemAvailable still about 22 GiB (vllm-project/vllm#56824, vLLM
#   0.29.0, driver 580.173.02; NVIDIA/open-gpu-kernel-modules#1358 wedges the host).
#   Dropping the page cache right before the memory is claimed is the fix NVIDIA's Spark
#   guidance gives; the ray_cluster role does it in the Ray unit's ExecStartPre.
MEMAVAILABLE_SINCE = (0, 12)


def _version_key(version):
    match = re.search(r"(\d+)\.(\d+)", str(version or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


# The drop itself: one shell command for the Ray and serve units' ExecStartPre and the
# serve stage's drop on the workers, and the lines it prints, which the serve summary reads
# back (page_cache_outcome). No "$" or "%": systemd expands both in Exec lines.
DROP_CACHES_FILE = "/proc/sys/vm/drop_caches"
DROPPED = "sparkops: page cache dropped before the {what} start"
NOT_DROPPED = (
    "sparkops: page cache NOT dropped before the {what} start: " + DROP_CACHES_FILE + " is not writable"
)
_OUTCOME_RE = re.compile(
    r"^sparkops: page cache (?P<state>dropped|NOT dropped) before the (?P<what>[\w ]+?) start(?::.*)?$",
    re.MULTILINE,
)


def drop_caches_script(what):
    """The shell script that drops the page cache (``echo 1``: clean page cache only) and says so."""
    if not re.fullmatch(r"[\w ]+", str(what or "")):
        raise ValueError(f"what={what!r}: letters, digits, underscores and spaces only")
    return (
        f'sync; if echo 1 > {DROP_CACHES_FILE}; then echo "{DROPPED.format(what=what)}"; '
        f'else echo "{NOT_DROPPED.format(what=what)}"; fi'
    )


def drop_caches_command(what, form="exec"):
    """The script as an ``ExecStartPre=`` command line (``exec``) or an argv list (``argv``)."""
    script = drop_caches_script(what)
    if form == "argv":
        return ["/bin/sh", "-c", script]
    if form == "exec":
        return f"/bin/sh -c '{script}'"
    raise ValueError(f"form={form!r}: exec or argv")


def page_cache_outcome(text):
    """``{"dropped": bool, "what": str}`` of the last drop line in a log or output, or None."""
    found = None
    for match in _OUTCOME_RE.finditer(text or ""):
        found = {"dropped": match.group("state") == "dropped", "what": match.group("what")}
    return found


def page_cache_report(outcomes):
    """One summary line from ``{host: outcome or None}`` (None: that node logged no drop)."""
    if not any(outcomes.values()):
        return "page cache: no drop in this run (serve did not start)"
    dropped = sorted(h for h, o in outcomes.items() if o and o["dropped"])
    refused = sorted(h for h, o in outcomes.items() if o and not o["dropped"])
    silent = sorted(h for h, o in outcomes.items() if not o)
    parts = []
    if dropped:
        parts.append("dropped before serve claimed memory on " + ", ".join(dropped))
    if refused:
        parts.append(
            "NOT dropped on " + ", ".join(refused) + f" ({DROP_CACHES_FILE} is not writable: a container, or "
            "/proc/sys read-only; on a real node root can write it)"
        )
    if silent:
        parts.append("no drop logged on " + ", ".join(silent))
    return "page cache: " + "; ".join(parts)


def page_cache_risks(vllm_version, startup_needed_gib, memory_free_gib, drop_caches=True):
    """The page-cache risks on unified memory for this vLLM version, in plain words."""
    key = _version_key(vllm_version)
    if drop_caches:
        drop = (
            "the Ray and serve units drop the page cache in their ExecStartPre and the serve stage on every "
            f"worker before serve starts (preflight_plan_drop_caches; sync; echo 1 > {DROP_CACHES_FILE})"
        )
    else:
        drop = (
            "preflight_plan_drop_caches is off, so nothing drops it: run "
            f"`sync; echo 1 > {DROP_CACHES_FILE}` on every node right before the start, or turn the setting on"
        )
    risks = []
    if key is not None and key < MEMAVAILABLE_SINCE:
        if memory_free_gib is None or memory_free_gib < startup_needed_gib:
            risks.append(
                f"page cache: vLLM {vllm_version} reads CUDA's free memory at its startup check, which on an "
                "integrated GPU is MemFree (page cache counts as used); the check fails when the model copy's "
                f"page cache fills memory ({startup_needed_gib:.2f} GiB must be free): {drop}"
            )
    else:
        risks.append(
            f"page cache: vLLM {vllm_version or '(version unknown)'} reads MemAvailable at its startup check on an "
            "integrated GPU, so page cache passes the check, but the driver does not reliably reclaim it for its "
            f"allocations (NV_ERR_NO_MEMORY with MemAvailable left, vLLM #56824): {drop}"
        )
    return risks
