# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The memory plan's inputs: weight sizes and KV bytes per token from the model's files; numbers checked.

Split from ``_memory_plan.py`` (the arithmetic), which re-exports these names.
"""

from __future__ import annotations

import json
import math
import os
import re
from ansible_collections.sparkops.vllm.plugins.module_utils._safe_read import open_regular

GIB = 1024**3

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
# Files with weight suffixes that vLLM never loads as model weights.
_NOT_WEIGHTS_RE = re.compile(r"^(training_args\.bin|optimizer\.pt|scheduler\.pt|rng_state.*\.pth)$")

_DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_ds_mla": 1,
}


class MemoryPlanError(ValueError):
    """Bad input. The message says what is wrong and how to fix it."""


# ---------------------------------------------------------------- inputs from files


def weight_files(model_path: str) -> list[str]:
    """The files vLLM would load as weights under ``model_path``, links followed.

    In the Hugging Face cache layout (``models--org--name/{blobs,refs,snapshots}``) only
    the snapshot ``refs/main`` names is read (else the newest one); blobs have no suffix.
    When a directory holds safetensors, ``.bin``/``.pt`` copies are ignored, as vLLM
    loads safetensors first; a ``consolidated*.safetensors`` next to sharded files is
    the Mistral-format duplicate and is ignored too.
    """
    root = model_path
    snapshots = os.path.join(model_path, "snapshots")
    if os.path.isdir(snapshots):
        ref = os.path.join(model_path, "refs", "main")
        chosen = None
        if os.path.isfile(ref):
            with open_regular(ref, "r", encoding="utf-8") as handle:
                candidate = os.path.join(snapshots, handle.read().strip())
            if os.path.isdir(candidate):
                chosen = candidate
        if chosen is None:
            entries = [os.path.join(snapshots, e) for e in os.listdir(snapshots)]
            entries = [e for e in entries if os.path.isdir(e)]
            if entries:
                chosen = max(entries, key=os.path.getmtime)
        if chosen is not None:
            root = chosen
    found: list[str] = []
    for dirpath, _dirs, files in os.walk(root, followlinks=True):
        names = [f for f in files if f.lower().endswith(WEIGHT_SUFFIXES) and not _NOT_WEIGHTS_RE.match(f)]
        safetensors = [f for f in names if f.lower().endswith(".safetensors")]
        if safetensors:
            sharded = [f for f in safetensors if not f.startswith("consolidated")]
            names = sharded or safetensors
        found.extend(os.path.join(dirpath, f) for f in sorted(names))
    return found


def weights_bytes_from_path(model_path: str) -> int:
    """Sum of the weight files' sizes, following links; one inode is counted once."""
    if not os.path.isdir(model_path):
        raise MemoryPlanError(
            f"model_path {model_path!r} is not a directory on this host: give the directory that holds the "
            "model's weight files (or its Hugging Face cache folder), or give weights_gib instead."
        )
    seen: set[tuple[int, int]] = set()
    total = 0
    for path in weight_files(model_path):
        try:
            st = os.stat(path)
        except OSError as exc:
            raise MemoryPlanError(
                f"weight file {path} cannot be read ({exc.strerror}): a dangling link in the model folder? "
                "Re-download the model, or give weights_gib."
            ) from exc
        key = (st.st_dev, st.st_ino)
        if key not in seen:
            seen.add(key)
            total += st.st_size
    if total == 0:
        raise MemoryPlanError(
            f"no weight files ({', '.join(WEIGHT_SUFFIXES)}) under model_path {model_path!r}: "
            "point it at the model directory, or give weights_gib."
        )
    return total


def _text_config(config: dict) -> dict:
    # Multimodal checkpoints (Qwen3.5, Llama 4, Gemma 3) nest the language model's settings.
    inner = config.get("text_config") or config.get("language_config") or {}
    merged = dict(config)
    merged.update(inner)
    return merged


def kv_cache_layers(config: dict) -> tuple[int, int]:
    """(layers that keep a KV cache, all layers), from a model's config.json.

    Hybrid models keep KV only in their full-attention layers: ``layer_types``
    (Qwen3.5, Gemma 3), ``full_attention_interval`` (Qwen3-Next) or
    ``hybrid_override_pattern`` (Nemotron-H, ``*`` marks attention).
    """
    cfg = _text_config(config)
    layers = int(cfg.get("num_hidden_layers") or cfg.get("n_layer") or cfg.get("num_layers") or 0)
    if layers <= 0:
        raise MemoryPlanError(
            "config.json has no num_hidden_layers: give kv_cache_bytes_per_token instead of the config."
        )
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        kv = sum(
            1
            for t in layer_types
            if "attention" in str(t) and not any(x in str(t) for x in ("linear", "mamba", "delta"))
        )
        return kv, len(layer_types)
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return layers // interval, layers
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return pattern.count("*"), len(pattern)
    return layers, layers


def kv_cache_bytes_per_token(
    config: dict, tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1, kv_cache_dtype: str = "auto"
) -> dict:
    """Bytes of KV cache one token takes on one rank, and how they were derived.

    Per layer with a KV cache: ``2 (K and V) x kv_heads_per_rank x head_dim x dtype``,
    where ``kv_heads_per_rank = max(1, kv_heads // TP)`` (vLLM replicates KV heads when
    TP exceeds them). MLA models (DeepSeek) store ``kv_lora_rank + qk_rope_head_dim``
    per layer, replicated on every rank. Layers split over pipeline stages.
    """
    cfg = _text_config(config)
    kv_layers, all_layers = kv_cache_layers(config)
    dtype_name = str(kv_cache_dtype or "auto").lower()
    if dtype_name == "auto":
        dtype_name = (
            str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").lower().replace("torch.", "")
        )
    dtype_bytes = _DTYPE_BYTES.get(dtype_name)
    if dtype_bytes is None and dtype_name.startswith("fp8"):
        dtype_bytes = 1
    if dtype_bytes is None:
        raise MemoryPlanError(
            f"unknown KV cache dtype {dtype_name!r}: use kv_cache_dtype auto, fp8, bfloat16 or float16."
        )
    layers_per_rank = math.ceil(kv_layers / max(1, pipeline_parallel_size))
    if cfg.get("kv_lora_rank"):
        per_layer_elems = int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)
        heads_per_rank = 1
        head_dim = per_layer_elems
        kv_heads = 1
        per_layer = per_layer_elems * dtype_bytes
    else:
        heads = int(cfg.get("num_attention_heads") or 0)
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or (int(cfg.get("hidden_size") or 0) // heads if heads else 0))
        if kv_heads <= 0 or head_dim <= 0:
            raise MemoryPlanError(
                "config.json lacks num_key_value_heads/num_attention_heads/head_dim: "
                "give kv_cache_bytes_per_token instead."
            )
        heads_per_rank = max(1, kv_heads // max(1, tensor_parallel_size))
        per_layer = 2 * heads_per_rank * head_dim * dtype_bytes
    return {
        "bytes_per_token": per_layer * layers_per_rank,
        "kv_layers": kv_layers,
        "layers": all_layers,
        "kv_heads": kv_heads,
        "kv_heads_per_rank": heads_per_rank,
        "head_dim": head_dim,
        "dtype_bytes": dtype_bytes,
        "hybrid": kv_layers < all_layers,
    }


def load_model_config(path: str) -> dict:
    try:
        with open_regular(path, "r", encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise MemoryPlanError(
            f"cannot read the model config {path}: {exc}. Give the path of the model's config.json, "
            "or kv_cache_bytes_per_token."
        ) from exc


# ---------------------------------------------------------------- numbers

# The numeric inputs: each must be a finite number >= 0 (NaN and infinity pass every
# comparison the checks make, so they are refused first, by name).
_NUMBERS = frozenset(
    {
        "memory_total_gib",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "weights_gib",
        "memory_available_gib",
        "memory_free_gib",
        "system_memory_total_gib",
        "gpu_memory_utilization",
        "activation_reserve_gib",
        "non_torch_reserve_gib",
        "cuda_graph_reserve_gib",
        "cuda_context_reserve_gib",
        "nccl_reserve_gib",
        "ray_reserve_gib",
        "ray_memory_threshold",
        "earlyoom_term_percent",
        "earlyoom_kill_percent",
        "running_stack_host_gib",
        "safety_margin_gib",
        "load_reserve_gib",
        "max_model_len",
        "max_num_seqs",
        "kv_cache_bytes_per_token",
    }
)


# Checked against a range below, with a message that names the range.
_RANGED = frozenset(
    {"gpu_memory_utilization", "ray_memory_threshold", "earlyoom_term_percent", "earlyoom_kill_percent"}
)


def _number(name: str, value, *, negative_ok: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MemoryPlanError(f"{name} is {value!r}, not a number: give a number >= 0.")
    if not math.isfinite(value):
        raise MemoryPlanError(
            f"{name} is {value!r}: give a finite number >= 0 (NaN and infinity are refused)."
        )
    if value < 0 and not negative_ok:
        raise MemoryPlanError(f"{name} is {value!r}: it must not be negative.")
