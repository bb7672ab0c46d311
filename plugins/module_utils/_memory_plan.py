# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The vLLM memory plan: pure arithmetic, no Ansible, nothing touched on the node.

The model follows how vLLM V1 budgets memory (docs/memory-plan.md has the full
derivation, every default and its source, and a worked example):

* vLLM claims ``claim = gpu_memory_utilization x memory_total`` (memory_total is
  cudaMemGetInfo's total, which on a GB10 is the system's MemTotal; one total per node,
  119.70 GiB on the seeds' head as Ray printed it).
* Inside the claim, per rank: the shard's weights, the non-torch memory measured while
  profiling (NCCL buffers, cuBLAS workspaces), the activation peak of the profiling
  run and, from vLLM 0.21 on, the estimated CUDA-graph memory. The KV cache gets the rest.
* Outside the claim: the CUDA context (created before vLLM's baseline snapshot) and,
  before vLLM 0.21, the CUDA graphs captured after the KV cache is allocated.
* On unified memory all of it is system memory, so Ray's memory monitor sees
  ``used before launch + CUDA context + claim + graphs outside the claim + Ray and
  vLLM host processes`` and kills a worker above ``ray_memory_threshold x MemTotal``.

Callers: the ``memory_plan`` module, the launch-script action and the preflight role.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, fields

from ansible_collections.sparkops.vllm.plugins.module_utils._memory_guard import (
    DEFAULT_EARLYOOM_KILL_PERCENT,
    DEFAULT_EARLYOOM_TERM_PERCENT,
    GuardError,
    check_percents,
    earlyoom_args,
    earlyoom_limit,
    page_cache_risks,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._memory_plan_model import (  # noqa: F401 (re-exported)
    _NUMBERS,
    _RANGED,
    GIB,
    MemoryPlanError,
    _number,
    kv_cache_bytes_per_token,
    kv_cache_layers,
    load_model_config,
    weight_files,
    weights_bytes_from_path,
)
from ansible_collections.sparkops.vllm.plugins.module_utils._vllm_memory_log import (
    MEASURED_KEYS,
    parse_memory_lines,
)

# Defaults; each one's source is in docs/memory-plan.md ("Reserves and their sources").
# Seed (vLLM 0.17, GB10, TP=2), one total per node: claim 0.90 x 119.70 = 107.73 GiB,
# weights 119 GB / 2 = 55.41 GiB, KV 49.12 GiB logged -> activation + non-torch = 3.20 GiB
# per rank; the defaults keep 4.00 (KV predicted 48.32 GiB, 1.6 % under the log).
DEFAULT_ACTIVATION_GIB = 2.0
# Non-torch memory inside the claim (cuBLAS workspaces and what grows after the snapshot).
# NCCL's communicators are not in it: vLLM creates them before its startup snapshot (below).
DEFAULT_NON_TORCH_GIB_UNIFIED = 2.0
# Fixture 28 (v0.10.2, L40S, TP=8): non-torch 0.21 GiB, rounded up for larger NCCL groups.
DEFAULT_NON_TORCH_GIB_DISCRETE = 0.5
# Fixture 28: "Free memory on device (43.93/44.42 GiB)" at vLLM's snapshot -> 0.49 GiB context.
DEFAULT_CUDA_CONTEXT_GIB = 0.5
# NCCL's communicators per rank (vLLM's pynccl one and torch's process group) when the
# engine spans more than one rank. vLLM's Worker.init_device() initializes the distributed
# environment BEFORE its memory snapshot ("This ensures NCCL buffers are allocated before we
# measure available memory": vllm/v1/worker/gpu_worker.py in 0.12.0, 0.17.1 and 0.34.0), so
# they are outside the --gpu-memory-utilization claim, like the CUDA context, and lower the
# free memory the startup check sees. Cross-node, custom all-reduce is off (0.12/0.17:
# parallel.py "nnodes > 1: disable_custom_all_reduce"; 0.34: MNNVL only), so no IPC buffers.
# vLLM logs no figure for it; vllm-project/vllm PR #45517 reports 1-2 GiB on rank 0 (TP=2,
# PP=2). Measured on the lent H200 (tests/fixtures/nccl_real/nccl_memory.sh, NCCL 2.28.9,
# two NCCL hosts over NET/Socket, 2 channels): the two communicators added 0.38 GiB of GPU
# memory and 0.50 GiB of VmRSS per rank, 0.87 GiB together, which on a GB10 is one pool.
# NET/IB over a Spark's two HCAs may open more channels: 1.0 GiB keeps a small margin, an
# estimate for ranks on several nodes (the default applies on unified memory, see
# terms()) until measured on a Spark: override with nccl_reserve_gib.
DEFAULT_NCCL_GIB = 1.0
# The highest RAY_memory_usage_threshold a lever offers (docs/memory-plan.md, "Levers").
MAX_RAY_MEMORY_THRESHOLD = 0.99
# Fixture 28: "Graph capturing finished in 53 secs, took 3.45 GiB".
DEFAULT_CUDA_GRAPH_GIB = 3.5
# Ray head (GCS, raylet, dashboard) + vLLM API server + EngineCore + the GPU worker's host
# side; a worker has raylet, agent and its GPU worker. Estimates: measure and override.
DEFAULT_RAY_HEAD_GIB = 3.0
DEFAULT_RAY_WORKER_GIB = 1.5
DEFAULT_SAFETY_MARGIN_GIB = 1.0
# Weight post-processing (FP8/NVFP4 MoE conversion) holds a module's original and converted
# copy at once, before the KV cache exists (vLLM PR #45179: a Ray OOM kill during the
# conversion on two Sparks, TP=2). Estimate: two MoE layers of a 55 GiB shard over 42
# layers, about 2 x 1.3 GiB, rounded up. vLLM prints no figure for it: measure and override.
DEFAULT_LOAD_RESERVE_GIB = 3.0
DEFAULT_RAY_MEMORY_THRESHOLD = 0.95
# vLLM's default KV block size; token counts are whole blocks.
KV_BLOCK_SIZE = 16
# vLLM 0.21.0 made CUDA-graph memory profiling the default (fixture 15 says so).
CUDA_GRAPH_PROFILED_SINCE = (0, 21)


@dataclass(frozen=True)
class MemoryPlanInput:
    """Everything the plan needs. GiB are 2**30 bytes; file sizes in GB are 10**9."""

    memory_total_gib: float
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    weights_gib: float | None = None
    memory_available_gib: float | None = None
    memory_free_gib: float | None = None
    system_memory_total_gib: float | None = None
    unified_memory: bool = True
    node_role: str = "head"
    gpu_memory_utilization: float | None = None
    cuda_graphs: bool = True
    cuda_graph_memory_profiled: bool | None = None
    vllm_version: str | None = None
    activation_reserve_gib: float | None = None
    non_torch_reserve_gib: float | None = None
    cuda_graph_reserve_gib: float | None = None
    cuda_context_reserve_gib: float = DEFAULT_CUDA_CONTEXT_GIB
    nccl_reserve_gib: float | None = None
    ray_reserve_gib: float | None = None
    ray_memory_threshold: float = DEFAULT_RAY_MEMORY_THRESHOLD
    ray_memory_monitor: bool = True
    earlyoom_term_percent: float = DEFAULT_EARLYOOM_TERM_PERCENT
    earlyoom_kill_percent: float = DEFAULT_EARLYOOM_KILL_PERCENT
    running_stack_host_gib: float | None = None
    drop_caches: bool = True
    load_reserve_gib: float | None = None
    safety_margin_gib: float = DEFAULT_SAFETY_MARGIN_GIB
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    kv_cache_bytes_per_token: int | None = None
    kv_cache_dtype: str = "auto"
    model_config: dict | None = None
    measured: dict = field(default_factory=dict)
    weights_source: str = "weights_gib"


def parse_version(version: str | None) -> tuple[int, int] | None:
    if not version:
        return None
    m = re.search(r"(\d+)\.(\d+)", str(version))
    return (int(m.group(1)), int(m.group(2))) if m else None


def cuda_graphs_profiled(version: str | None) -> bool | None:
    """True from vLLM 0.21 on (graph memory estimated into the claim); None if unknown."""
    parsed = parse_version(version)
    if parsed is None:
        return None
    return parsed >= CUDA_GRAPH_PROFILED_SINCE


# ---------------------------------------------------------------- the arithmetic


@dataclass(frozen=True)
class _Terms:
    total: float
    sys_total: float | None
    os_used: float
    gpu_used_before: float
    startup_room: float
    weights: float
    activation: float
    non_torch: float
    graph_in: float
    graph_out: float
    context: float
    ray: float
    margin: float
    kv_need: float
    threshold: float
    monitor: bool
    unified: bool
    guard_percent: float = DEFAULT_EARLYOOM_TERM_PERCENT
    own_host: float = 0.0
    load: float = 0.0
    nccl: float = 0.0

    @property
    def before_snapshot(self) -> float:
        """What a rank allocates before vLLM's startup snapshot: CUDA context and NCCL communicators."""
        return self.context + self.nccl

    @property
    def load_peak(self) -> float:
        """While the weights load and are post-processed: before the KV cache and the graphs."""
        before = (
            self.os_used + self.before_snapshot + self.ray
            if self.unified
            else self.gpu_used_before + self.before_snapshot
        )
        return before + self.weights + self.load

    @property
    def in_claim(self) -> float:
        return self.weights + self.activation + self.non_torch + self.graph_in

    @property
    def outside_claim(self) -> float:
        if self.unified:
            return self.os_used + self.before_snapshot + self.graph_out + self.ray
        return self.gpu_used_before + self.before_snapshot + self.graph_out

    @property
    def guard_limit(self) -> float | None:
        """Ray's monitor's threshold, or with it off earlyoom's SIGTERM threshold."""
        if self.sys_total is None:
            return None
        if self.monitor:
            return self.threshold * self.sys_total
        return earlyoom_limit(self.sys_total, self.guard_percent)

    @property
    def limit(self) -> float:
        return self.guard_limit if self.unified else self.total

    @property
    def host_peak(self) -> float:
        return self.os_used + self.ray

    @property
    def host_limit(self) -> float | None:
        return None if self.unified else self.guard_limit


def _floor2(value: float) -> float:
    return math.floor(value * 100 + 1e-9) / 100


def _ceil2(value: float) -> float:
    return math.ceil(value * 100 - 1e-9) / 100


def _utilization_bounds(t: _Terms) -> tuple[float, float]:
    """(largest utilization the peak and startup allow, smallest that leaves the KV needed)."""
    by_peak = (t.limit - t.margin - t.outside_claim) / t.total
    by_startup = t.startup_room / t.total
    upper = _floor2(min(1.0, by_peak, by_startup))
    # KV must hold max_model_len tokens, or at least one block when that is unknown.
    lower = _ceil2((t.in_claim + max(t.kv_need, 0.0)) / t.total)
    if t.kv_need <= 0 and lower * t.total - t.in_claim <= 0:
        lower = _ceil2(lower + 0.01)
    return upper, lower


def _host_fits(t: _Terms) -> bool:
    return t.host_limit is None or t.host_peak <= t.host_limit


def _load_fits(t: _Terms, margin: float = 0.0) -> bool:
    return t.load_peak + margin <= t.limit + 1e-9


def _recommend(t: _Terms) -> float | None:
    upper, lower = _utilization_bounds(t)
    if upper >= 0.01 and upper >= lower and _host_fits(t) and _load_fits(t, t.margin):
        return upper
    return None


def _evaluate(t: _Terms, u: float, margin: float = 0.0) -> dict:
    """Checks at ``u``; a recommendation also keeps ``margin`` under the limit."""
    claim = u * t.total
    kv = claim - t.in_claim
    peak = t.outside_claim + claim
    checks = {
        "peak": peak + margin <= t.limit + 1e-9,
        "startup": claim <= t.startup_room + 1e-9,
        "kv": kv > 0 and kv + 1e-9 >= t.kv_need,
        "host": _host_fits(t),
        "load": _load_fits(t, margin),
    }
    return {"claim": claim, "kv": kv, "peak": peak, "checks": checks, "margin": margin}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


class _Planner:
    def __init__(self, inp: MemoryPlanInput):
        self.inp = inp
        self.risks: list[str] = []
        self.sources: dict[str, str] = {}
        self._validate()
        self.profiled = self._graph_profiled()
        self.kv_info = (
            kv_cache_bytes_per_token(
                inp.model_config, inp.tensor_parallel_size, inp.pipeline_parallel_size, inp.kv_cache_dtype
            )
            if inp.model_config and not inp.kv_cache_bytes_per_token
            else None
        )

    def _validate(self) -> None:
        inp = self.inp
        for f in fields(MemoryPlanInput):
            value = getattr(inp, f.name)
            if f.name in _NUMBERS and value is not None:
                _number(f.name, value, negative_ok=f.name in _RANGED)
        for key, value in (inp.measured or {}).items():
            if value is not None:
                _number(f"measured.{key}", value)
        try:
            check_percents(inp.earlyoom_term_percent, inp.earlyoom_kill_percent)
        except GuardError as exc:
            raise MemoryPlanError(str(exc)) from None
        if not inp.memory_total_gib or inp.memory_total_gib <= 0:
            raise MemoryPlanError(
                "memory_total_gib must be > 0: give the memory total vLLM sees (cudaMemGetInfo; "
                "on a GB10 its MemTotal, e.g. 119.70)."
            )
        if inp.tensor_parallel_size < 1 or inp.pipeline_parallel_size < 1:
            raise MemoryPlanError("tensor_parallel_size and pipeline_parallel_size must be at least 1.")
        u = inp.gpu_memory_utilization
        if u is not None and not 0 < u <= 1:
            raise MemoryPlanError(
                f"gpu_memory_utilization {u} is outside (0, 1]: give a fraction such as 0.85, "
                "or leave it out and the plan recommends one."
            )
        if not 0 < inp.ray_memory_threshold <= 1:
            raise MemoryPlanError(
                f"ray_memory_threshold {inp.ray_memory_threshold} is outside (0, 1]: Ray's default is 0.95."
            )
        if inp.node_role not in ("head", "worker"):
            raise MemoryPlanError(f"node_role {inp.node_role!r} is not head or worker.")
        if inp.weights_gib is None and "weights_gib" not in (inp.measured or {}):
            raise MemoryPlanError(
                "no model size: give weights_gib (total of the weight files in GiB; 119 GB = 110.83 GiB), "
                "model_path (a directory of weight files), or measured.weights_gib from a previous start."
            )
        if inp.weights_gib is not None and inp.weights_gib <= 0:
            raise MemoryPlanError("weights_gib must be > 0 (the total of all weight files, in GiB).")
        if inp.max_model_len is not None and inp.max_model_len < 1:
            raise MemoryPlanError("max_model_len must be a positive number of tokens.")

    def _term(self, key: str, given: float | None, default: float, measured_key: str | None = None) -> float:
        measured = self.inp.measured or {}
        if measured_key and measured.get(measured_key) is not None:
            self.sources[key] = "measured"
            return float(measured[measured_key])
        if given is not None:
            self.sources[key] = "input"
            return float(given)
        self.sources[key] = "default"
        return default

    def _graph_profiled(self) -> bool:
        inp = self.inp
        by_version = cuda_graphs_profiled(inp.vllm_version)
        if inp.cuda_graph_memory_profiled is not None:
            self.sources["cuda_graph_memory_profiled"] = "input"
            if inp.cuda_graph_memory_profiled and by_version is False:
                self.risks.append(
                    f"cuda_graph_memory_profiled is true but vLLM {inp.vllm_version} does not profile "
                    "CUDA-graph memory (that began in 0.21): the real peak is higher than planned."
                )
            return inp.cuda_graph_memory_profiled
        if by_version is None:
            self.sources["cuda_graph_memory_profiled"] = "assumed (no vllm_version)"
            if inp.cuda_graphs:
                self.risks.append(
                    "vllm_version unknown: CUDA graphs are assumed to be captured outside the claim "
                    "(vLLM before 0.21), the safer assumption for the peak. Give vllm_version."
                )
            return False
        if by_version and inp.unified_memory:
            # vLLM's CUDA-graph estimate is unreliable on GB10 (negative estimates: vLLM #44740,
            # #46932; under-counts: #51590): the plan turns it off (VLLM_MEMORY_PROFILER_ESTIMATE_
            # CUDAGRAPHS=0, vllm/envs.py) and keeps its own reserve outside the claim.
            self.sources["cuda_graph_memory_profiled"] = (
                f"vllm_version {inp.vllm_version}; estimate turned off on unified memory"
            )
            return False
        self.sources["cuda_graph_memory_profiled"] = f"vllm_version {inp.vllm_version}"
        return by_version

    def terms(
        self,
        tensor_parallel_size: int | None = None,
        cuda_graphs: bool | None = None,
        threshold: float | None = None,
        monitor: bool | None = None,
    ) -> _Terms:
        inp = self.inp
        tp = tensor_parallel_size or inp.tensor_parallel_size
        ranks = tp * inp.pipeline_parallel_size
        measured = inp.measured or {}
        if measured.get("weights_gib") is not None:
            # Measured per rank at the input's TP; another TP shares the same total.
            weights = float(measured["weights_gib"]) * inp.tensor_parallel_size / tp
            self.sources["weights_gib"] = "measured"
        else:
            weights = float(inp.weights_gib) / ranks
            self.sources["weights_gib"] = f"{inp.weights_source} / (TP x PP)"
        activation = self._term(
            "activation_gib", inp.activation_reserve_gib, DEFAULT_ACTIVATION_GIB, "activation_gib"
        )
        nt_default = DEFAULT_NON_TORCH_GIB_UNIFIED if inp.unified_memory else DEFAULT_NON_TORCH_GIB_DISCRETE
        non_torch = self._term("non_torch_gib", inp.non_torch_reserve_gib, nt_default, "non_torch_gib")
        graph = self._term(
            "cuda_graph_gib", inp.cuda_graph_reserve_gib, DEFAULT_CUDA_GRAPH_GIB, "cuda_graph_gib"
        )
        graphs_on = inp.cuda_graphs if cuda_graphs is None else cuda_graphs
        profiled = self.profiled
        if not graphs_on:
            graph = 0.0
        ray_default = DEFAULT_RAY_HEAD_GIB if inp.node_role == "head" else DEFAULT_RAY_WORKER_GIB
        ray = self._term("ray_gib", inp.ray_reserve_gib, ray_default)
        load = self._term("load_gib", inp.load_reserve_gib, DEFAULT_LOAD_RESERVE_GIB)
        sys_total = inp.system_memory_total_gib
        if sys_total is None and inp.unified_memory:
            sys_total = inp.memory_total_gib
        os_used = 0.0
        # A rerun on a serving node: the running stack's own containers (their cgroups'
        # memory less page cache) come back when they restart, like their GPU memory.
        own_host = float(inp.running_stack_host_gib or 0.0)
        if inp.memory_available_gib is not None and sys_total is not None:
            os_used = max(0.0, sys_total - inp.memory_available_gib - own_host)
        context = float(inp.cuda_context_reserve_gib)
        # On unified memory (one GB10 per node) more than one rank means ranks on other nodes,
        # NCCL over the network. On discrete GPUs the plan assumes one node: fixture 28
        # (L40S, TP=8, one node) had 0.49 GiB gone at vLLM's snapshot, context and NCCL
        # together, which the context default covers.
        nccl_default = DEFAULT_NCCL_GIB if inp.unified_memory and ranks > 1 else 0.0
        nccl = self._term("nccl_gib", inp.nccl_reserve_gib, nccl_default)
        if inp.unified_memory:
            # vLLM's check needs free >= claim at its snapshot; after dropping caches free ~ MemAvailable.
            room = (
                (inp.memory_available_gib + own_host) if inp.memory_available_gib is not None else sys_total
            )
            startup_room = room - context - nccl
            gpu_used_before = 0.0
        else:
            free = inp.memory_free_gib if inp.memory_free_gib is not None else inp.memory_total_gib
            gpu_used_before = max(0.0, inp.memory_total_gib - free)
            startup_room = free - context - nccl
        kv_need = 0.0
        bpt = self.bytes_per_token(tp)
        if bpt and inp.max_model_len:
            kv_need = inp.max_model_len * bpt / GIB
        return _Terms(
            total=float(inp.memory_total_gib),
            sys_total=sys_total,
            os_used=os_used,
            gpu_used_before=gpu_used_before,
            startup_room=startup_room,
            weights=weights,
            activation=activation,
            non_torch=non_torch,
            graph_in=graph if profiled else 0.0,
            graph_out=0.0 if profiled else graph,
            context=context,
            ray=ray,
            margin=float(inp.safety_margin_gib),
            kv_need=kv_need,
            threshold=inp.ray_memory_threshold if threshold is None else threshold,
            monitor=inp.ray_memory_monitor if monitor is None else monitor,
            unified=inp.unified_memory,
            guard_percent=float(inp.earlyoom_term_percent),
            own_host=own_host,
            load=load,
            nccl=nccl,
        )

    def bytes_per_token(self, tp: int | None = None) -> int | None:
        """KV bytes per token on one rank at ``tp`` (default: the input's TP)."""
        inp = self.inp
        tp = tp or inp.tensor_parallel_size
        if inp.kv_cache_bytes_per_token:
            # Given per rank at the input's TP; another TP splits the same heads.
            return math.ceil(inp.kv_cache_bytes_per_token * inp.tensor_parallel_size / tp)
        if inp.model_config:
            return kv_cache_bytes_per_token(
                inp.model_config, tp, inp.pipeline_parallel_size, inp.kv_cache_dtype
            )["bytes_per_token"]
        return None


def _tokens(kv_gib: float, bpt: int | None) -> int | None:
    if not bpt or kv_gib <= 0:
        return 0 if bpt else None
    block = bpt * KV_BLOCK_SIZE
    return int(kv_gib * GIB // block) * KV_BLOCK_SIZE


def plan_memory(inp: MemoryPlanInput) -> dict:
    """Evaluate a given utilization, or recommend one. Returns the documented result dict."""
    planner = _Planner(inp)
    t = planner.terms()
    recommended = _recommend(t)
    upper, lower = _utilization_bounds(t)
    if inp.gpu_memory_utilization is not None:
        u = float(inp.gpu_memory_utilization)
    elif recommended is not None:
        u = recommended
    else:
        # Nothing fits: show the plan at the least utilization that still leaves the KV needed.
        u = min(1.0, max(0.01, lower))
    ev = _evaluate(t, u, 0.0 if inp.gpu_memory_utilization is not None else t.margin)
    fits = all(ev["checks"].values())
    bpt = planner.bytes_per_token()
    kv_bytes = max(0, int(ev["kv"] * GIB))
    tokens = _tokens(ev["kv"], bpt)

    reasons = _reasons(inp, t, u, ev, recommended=recommended, bounds=(upper, lower))
    risks = planner.risks + _risks(inp, t, ev, planner)
    env = _env(inp, planner.profiled)
    # Args for the given utilization, or the recommended one; none when nothing fits.
    planned = inp.gpu_memory_utilization is not None or recommended is not None
    vllm_args, args_kv = _vllm_args(inp, u, kv_bytes) if planned else ([], [])
    shortfall = None
    levers: list[dict] = []
    if not fits:
        shortfall = _shortfall(t, ev)
        levers = _levers(planner, t, u, ev)

    breakdown = {
        "memory_total_gib": _r(t.total),
        "gpu_memory_utilization": u,
        "claim_gib": _r(ev["claim"]),
        "weights_gib": _r(t.weights),
        "activation_gib": _r(t.activation),
        "non_torch_gib": _r(t.non_torch),
        "cuda_graph_in_claim_gib": _r(t.graph_in),
        "kv_cache_gib": _r(ev["kv"]),
        "cuda_context_gib": _r(t.context),
        "nccl_gib": _r(t.nccl),
        "cuda_graph_outside_claim_gib": _r(t.graph_out),
        "used_before_launch_gib": _r(t.os_used if t.unified else t.gpu_used_before),
        "running_stack_host_gib": _r(t.own_host),
        "load_reserve_gib": _r(t.load),
        "load_peak_gib": _r(t.load_peak),
        "ray_and_host_processes_gib": _r(t.ray),
        "system_memory_total_gib": _r(t.sys_total),
        "ray_memory_threshold": t.threshold if t.monitor else None,
        "earlyoom_term_percent": None if t.monitor else t.guard_percent,
        "safety_margin_gib": _r(t.margin),
        "startup_free_needed_gib": _r(ev["claim"] + t.before_snapshot),
        "startup_room_gib": _r(t.startup_room + t.before_snapshot),
        "kv_cache_needed_gib": _r(t.kv_need),
        "sources": dict(planner.sources),
    }
    if not t.unified:
        breakdown["host_peak_gib"] = _r(t.host_peak)
        breakdown["host_limit_gib"] = _r(t.host_limit)
    result = {
        "gpu_memory_utilization": u if planned else None,
        "recommended_gpu_memory_utilization": recommended,
        "kv_cache_gib": _r(ev["kv"]),
        "kv_cache_memory_bytes": kv_bytes,
        "kv_cache_tokens": tokens,
        "kv_cache_bytes_per_token": bpt,
        "max_concurrency": (
            round(tokens / inp.max_model_len, 2) if tokens is not None and inp.max_model_len else None
        ),
        "peak_gib": _r(ev["peak"]),
        "limit_gib": _r(t.limit),
        "fits": fits,
        "reasons": reasons,
        "risks": risks,
        "vllm_args": vllm_args,
        "vllm_args_kv_cache_memory_bytes": args_kv,
        "env": env,
        # The guard that replaces Ray's monitor, from the same percentages as the limit.
        "earlyoom_args": (
            None
            if inp.ray_memory_monitor
            else earlyoom_args(inp.earlyoom_term_percent, inp.earlyoom_kill_percent)
        ),
        # Drop the page cache right before the memory is claimed (unified memory only).
        "drop_caches": bool(inp.unified_memory and inp.drop_caches),
        "cuda_graph_memory_profiled": planner.profiled,
        "breakdown": breakdown,
        "shortfall_gib": shortfall,
        "levers": levers,
    }
    return result


def _limit_words(t: _Terms) -> str:
    if not t.unified:
        return f"the device's {t.total:.2f} GiB"
    if t.monitor:
        return (
            f"Ray's memory-monitor limit {t.limit:.2f} GiB ({t.threshold} x {t.sys_total:.2f} GiB MemTotal)"
        )
    return (
        f"earlyoom's SIGTERM threshold {t.limit:.2f} GiB (MemTotal {t.sys_total:.2f} GiB less "
        f"{t.guard_percent:g} %; Ray's monitor is off)"
    )


def _reasons(inp, t: _Terms, u, ev, *, recommended, bounds) -> list[str]:
    upper, lower = bounds
    reasons: list[str] = []
    checks = ev["checks"]
    where = "graph-capture peak" if t.graph_out > 0 else "peak"
    if not checks["peak"] and ev["peak"] > t.limit:
        reasons.append(
            f"the {where} of {ev['peak']:.2f} GiB is over {_limit_words(t)} by {ev['peak'] - t.limit:.2f} GiB"
            + (
                (
                    ": Ray's memory monitor would kill a worker during startup"
                    if t.monitor
                    else ": earlyoom would kill"
                )
                if t.unified
                else ""
            )
        )
    elif not checks["peak"]:
        reasons.append(
            f"the {where} of {ev['peak']:.2f} GiB leaves less than the {ev['margin']:.2f} GiB safety margin "
            f"under {_limit_words(t)}"
        )
    if not checks["startup"]:
        reasons.append(
            f"vLLM's startup check fails: the claim of {ev['claim']:.2f} GiB ({u} x {t.total:.2f}) "
            f"is more than the {t.startup_room:.2f} GiB free after the CUDA context and NCCL's communicators"
        )
    if not checks["kv"]:
        if ev["kv"] <= 0:
            reasons.append(
                f"no memory is left for the KV cache: the claim of {ev['claim']:.2f} GiB is used up by "
                f"{t.in_claim:.2f} GiB of weights, activations, non-torch memory and CUDA graphs"
            )
        else:
            reasons.append(
                f"the KV cache of {ev['kv']:.2f} GiB cannot hold one sequence of max_model_len "
                f"{inp.max_model_len} tokens ({t.kv_need:.2f} GiB)"
            )
    if not checks["load"]:
        reasons.append(
            f"the load-time peak of {t.load_peak:.2f} GiB ({t.weights:.2f} GiB of weights and {t.load:.2f} GiB of "
            f"weight post-processing, before the KV cache) is over {_limit_words(t)}"
            + (f" less the {ev['margin']:.2f} GiB margin" if ev["margin"] else "")
        )
    if not checks["host"]:
        reasons.append(
            f"host memory in use ({t.host_peak:.2f} GiB with Ray and vLLM's host processes) is over "
            f"Ray's limit of {t.host_limit:.2f} GiB"
        )
    if inp.gpu_memory_utilization is None and recommended is None:
        reasons.append(
            f"no --gpu-memory-utilization fits: the limit allows at most {max(upper, 0):.2f}, "
            f"the KV cache needs at least {lower:.2f}"
        )
    if all(checks.values()):
        head = "recommended" if inp.gpu_memory_utilization is None else "given"
        reasons.append(
            f"fits: with the {head} --gpu-memory-utilization {u} the {where} of {ev['peak']:.2f} GiB "
            f"stays under {_limit_words(t)}, and {ev['kv']:.2f} GiB remain for the KV cache"
        )
    if not t.monitor:
        reasons.append(
            "Ray's memory monitor is off (RAY_memory_monitor_refresh_ms=0): earlyoom guards the node, so the "
            f"limit is its SIGTERM threshold, MemTotal less {t.guard_percent:g} % (earlyoom -m), less the "
            f"{t.margin:.2f} GiB safety margin"
        )
    return reasons


def _risks(inp, t: _Terms, ev, planner: _Planner) -> list[str]:
    sources = planner.sources
    risks: list[str] = []
    claim = ev["claim"]
    if t.unified:
        risks.extend(
            page_cache_risks(
                inp.vllm_version, claim + t.before_snapshot, inp.memory_free_gib, inp.drop_caches
            )
        )
        if inp.memory_available_gib is None:
            risks.append(
                "memory_available_gib not given: the plan assumes nothing else uses memory on the node"
            )
    elif t.sys_total is None:
        risks.append("system_memory_total_gib not given: Ray's monitor on host memory is not checked")
    if ev["checks"]["peak"] and ev["peak"] > t.limit - t.margin:
        risks.append(
            f"the peak is within the {t.margin:.2f} GiB safety margin of the limit: small drifts in other "
            "memory use can tip it over"
        )
    defaults = [
        k for k in ("activation_gib", "non_torch_gib", "cuda_graph_gib") if sources.get(k) == "default"
    ]
    if defaults:
        risks.append(
            "defaults used for " + ", ".join(defaults) + ": pass the previous start's log as measured_log "
            "(or measured) to plan with this model's real figures"
        )
    if planner.kv_info and planner.kv_info["hybrid"]:
        risks.append(
            "hybrid model: its linear-attention/mamba layers keep per-sequence state in the same pool, "
            "so vLLM reports fewer KV tokens than kv_cache_tokens"
        )
    if not t.monitor:
        risks.append(
            "Ray's memory monitor is off: earlyoom must run with earlyoom_args (the ray_cluster role writes "
            "them), or the node has no guard and a runaway allocation wedges it"
        )
    return risks


def _env(inp, profiled: bool) -> dict:
    env: dict[str, str] = {}
    if not inp.ray_memory_monitor:
        env["RAY_memory_monitor_refresh_ms"] = "0"
    elif inp.ray_memory_threshold != DEFAULT_RAY_MEMORY_THRESHOLD:
        env["RAY_memory_usage_threshold"] = str(inp.ray_memory_threshold)
    if not profiled and cuda_graphs_profiled(inp.vllm_version) and inp.cuda_graphs:
        env["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"] = "0"
    return env


def _vllm_args(inp, u: float, kv_bytes: int) -> tuple[list[str], list[str]]:
    tail: list[str] = []
    if inp.max_model_len:
        tail += ["--max-model-len", str(inp.max_model_len)]
    if inp.max_num_seqs:
        tail += ["--max-num-seqs", str(inp.max_num_seqs)]
    if inp.kv_cache_dtype and inp.kv_cache_dtype != "auto":
        tail += ["--kv-cache-dtype", inp.kv_cache_dtype]
    if not inp.cuda_graphs:
        tail += ["--enforce-eager"]
    return ["--gpu-memory-utilization", f"{u:.2f}", *tail], ["--kv-cache-memory-bytes", str(kv_bytes), *tail]


def _shortfall(t: _Terms, ev) -> float:
    gaps = [0.0]
    if not ev["checks"]["peak"]:
        gaps.append(ev["peak"] + ev["margin"] - t.limit)
    if not ev["checks"]["startup"]:
        gaps.append(ev["claim"] - t.startup_room)
    if not ev["checks"]["kv"]:
        gaps.append(max(t.kv_need, 0.01) - ev["kv"])
    if not ev["checks"]["host"]:
        gaps.append(t.host_peak - t.host_limit)
    if not ev["checks"]["load"]:
        gaps.append(t.load_peak + ev["margin"] - t.limit)
    return round(max(gaps), 2)


def _at_utilization(rec: float | None) -> str:
    return f" with --gpu-memory-utilization {rec:.2f}" if rec is not None else ""


def _levers(planner: _Planner, t: _Terms, u: float, ev) -> list[dict]:
    inp = planner.inp
    levers: list[dict] = []
    upper, _lower = _utilization_bounds(t)
    rec = _recommend(t)
    if rec is not None:
        levers.append(
            {
                "lever": "gpu_memory_utilization",
                "value": rec,
                "closes_gap": True,
                "detail": f"--gpu-memory-utilization {rec:.2f}: KV cache "
                f"{rec * t.total - t.in_claim:.2f} GiB",
            }
        )
    elif upper >= 0.01 and _host_fits(t):
        levers.append(
            {
                "lever": "gpu_memory_utilization",
                "value": upper,
                "closes_gap": False,
                "detail": f"at most {upper:.2f} fits the limit, but leaves only "
                f"{upper * t.total - t.in_claim:.2f} GiB of KV cache where {t.kv_need:.2f} GiB are needed",
            }
        )
    bpt = planner.bytes_per_token()
    if bpt and inp.max_model_len and upper >= 0.01 and rec is None and _host_fits(t):
        kv_at_upper = upper * t.total - t.in_claim
        tokens = _tokens(kv_at_upper, bpt) or 0
        if tokens > 0:
            levers.append(
                {
                    "lever": "max_model_len",
                    "value": tokens,
                    "closes_gap": True,
                    "detail": f"--max-model-len {tokens} with --gpu-memory-utilization {upper:.2f}",
                }
            )
    if inp.cuda_graphs:
        no_graphs = planner.terms(cuda_graphs=False)
        rec_eager = _recommend(no_graphs)
        levers.append(
            {
                "lever": "cuda_graphs",
                "value": False,
                "closes_gap": rec_eager is not None,
                "detail": (
                    "--enforce-eager"
                    + (f" with --gpu-memory-utilization {rec_eager:.2f}" if rec_eager else "")
                    + f": saves {t.graph_in + t.graph_out:.2f} GiB of CUDA-graph memory, at a latency cost"
                ),
            }
        )
    for tp in (2, 4, 8, 16):
        # More ranks only shrink what lies inside the claim; worth naming when utilization alone fails.
        if tp <= inp.tensor_parallel_size or rec is not None:
            continue
        rec_tp = _recommend(planner.terms(tensor_parallel_size=tp))
        if rec_tp is not None:
            levers.append(
                {
                    "lever": "tensor_parallel_size",
                    "value": tp,
                    "closes_gap": True,
                    "detail": f"--tensor-parallel-size {tp} ({tp * inp.pipeline_parallel_size} GPUs) with "
                    f"--gpu-memory-utilization {rec_tp:.2f}",
                }
            )
            break
    if t.monitor and t.sys_total and (not ev["checks"]["peak"] if t.unified else not ev["checks"]["host"]):
        peak = ev["peak"] if t.unified else t.host_peak
        # Past 0.99 the threshold alone cannot hold the given claim; 0.99 (the most the plan
        # offers: the kernel and sshd need the rest) still may, at a lower utilization.
        needed = min(_ceil2((peak + t.margin) / t.sys_total), MAX_RAY_MEMORY_THRESHOLD)
        if needed > inp.ray_memory_threshold:
            rec_threshold = _recommend(planner.terms(threshold=needed))
            levers.append(
                {
                    "lever": "ray_memory_threshold",
                    "value": needed,
                    "closes_gap": rec_threshold is not None,
                    "detail": f"RAY_memory_usage_threshold={needed} on every Ray node (before ray start)"
                    + _at_utilization(rec_threshold),
                }
            )
        # The limit with the monitor off is earlyoom's SIGTERM threshold, not MemTotal: the
        # given utilization may still not fit, so the lever names the one that does.
        rec_off = _recommend(planner.terms(monitor=False))
        levers.append(
            {
                "lever": "ray_memory_monitor",
                "value": False,
                "closes_gap": rec_off is not None,
                "detail": "RAY_memory_monitor_refresh_ms=0 on every Ray node"
                + _at_utilization(rec_off)
                + "; earlyoom then guards the node",
                "env": {"RAY_memory_monitor_refresh_ms": "0"},
            }
        )
    return levers


def input_field_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(MemoryPlanInput))


def build_input(params: dict) -> MemoryPlanInput:
    """Resolve file-based inputs into a MemoryPlanInput.

    ``params`` uses the module's option names; ``None`` means not given. Besides the
    dataclass fields it understands ``model_path`` (weights summed from the files, and
    its ``config.json`` when ``model_config_path`` is not given), ``model_config_path``
    and ``measured_log`` (vLLM log text; explicit ``measured`` keys win over it).
    """
    known = set(input_field_names())
    values = {k: v for k, v in params.items() if k in known and v is not None}
    model_path = params.get("model_path")
    if values.get("weights_gib") is None and model_path:
        values["weights_gib"] = weights_bytes_from_path(model_path) / GIB
        values["weights_source"] = "model_path"
    config_path = params.get("model_config_path")
    if not config_path and model_path and not values.get("kv_cache_bytes_per_token"):
        for candidate in (os.path.join(model_path, "config.json"),):
            if os.path.isfile(candidate):
                config_path = candidate
        if config_path is None:
            files = weight_files(model_path) if os.path.isdir(model_path) else []
            if files and os.path.isfile(os.path.join(os.path.dirname(files[0]), "config.json")):
                config_path = os.path.join(os.path.dirname(files[0]), "config.json")
    if config_path:
        values["model_config"] = load_model_config(config_path)
    measured: dict = {}
    log = params.get("measured_log")
    if log:
        parsed = parse_memory_lines(log)
        measured.update({k: parsed[k] for k in MEASURED_KEYS if k in parsed})
        if "cuda_graph_memory_profiled" in parsed and values.get("cuda_graph_memory_profiled") is None:
            values["cuda_graph_memory_profiled"] = parsed["cuda_graph_memory_profiled"]
    for key, value in (params.get("measured") or {}).items():
        if key not in MEASURED_KEYS or value is None:
            continue
        try:
            measured[key] = float(value)
        except (TypeError, ValueError):
            raise MemoryPlanError(
                f"measured.{key} is {value!r}, not a number: give GiB per rank, e.g. {key}: 27.72"
            ) from None
    values["measured"] = measured
    return MemoryPlanInput(**values)
