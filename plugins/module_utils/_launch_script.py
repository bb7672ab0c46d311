# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The `vllm serve` command line of the launch script, from the memory plan.

The flags that feed the memory plan (PLAN_FLAGS) come from the plan, never from
free-form extra arguments: an operator changes them through the sparkops_*
settings (or the serve stage's overrides), so that every change is planned,
and a change that does not fit fails with the plan's explanation.

Every value reaches bash single-quoted (shlex.quote): nothing in a setting is
expanded, substituted or split by the shell, so a served model name shaped like
``${a:-$(cmd)}`` arrives at vLLM as those characters and runs nothing.

The API key is on no command line at all: vLLM reads ``VLLM_API_KEY`` from its
environment when ``--api-key`` is not given (vllm/envs.py, "API key for vLLM API
server"; vllm/entrypoints/openai/api_server.py build_app: ``args.api_key or
[envs.VLLM_API_KEY]``, vLLM 0.1x), and the serve container gets it from the
unit's 0600 environment file. With ``--api-key`` absent its default (None) is
kept, so vLLM's ``non-default args`` startup line does not carry it either.
"""

from __future__ import annotations

import re
import shlex

# vLLM flags whose value changes the memory plan, and the setting that feeds each.
PLAN_FLAGS = {
    "--gpu-memory-utilization": "sparkops_gpu_memory_utilization",
    "--kv-cache-memory-bytes": "sparkops_gpu_memory_utilization (the plan offers the byte form)",
    "--max-model-len": "sparkops_max_model_len",
    "--enforce-eager": "sparkops_cuda_graphs",
    "--tensor-parallel-size": "sparkops_tensor_parallel_size",
    "-tp": "sparkops_tensor_parallel_size",
    "--pipeline-parallel-size": "sparkops_pipeline_parallel_size",
    "-pp": "sparkops_pipeline_parallel_size",
    "--kv-cache-dtype": "vllm_serve_kv_cache_dtype",
    "--max-num-seqs": "vllm_serve_max_num_seqs",
}
# Flags the launch script sets itself from the stage's settings.
OWN_FLAGS = {
    "--host": "vllm_serve_host",
    "--port": "vllm_serve_port",
    "--served-model-name": "sparkops_served_model_name",
    "--distributed-executor-backend": "the Ray cluster (always ray)",
    "--api-key": "sparkops_api_key (vLLM reads it as VLLM_API_KEY from the 0600 environment file)",
}


class LaunchScriptError(ValueError):
    """The inputs cannot make a launch script; the message says what to change."""


def _flag_name(arg):
    return arg.split("=", 1)[0]


def check_extra_args(extra_args):
    """Refuse extra arguments that would bypass the plan or the stage's own settings."""
    problems = []
    for arg in extra_args or []:
        if not isinstance(arg, str):
            problems.append(f"{arg!r} is not a string; give each argument as a string")
            continue
        name = _flag_name(arg)
        if name in PLAN_FLAGS:
            problems.append(
                f"{name} feeds the memory plan: set {PLAN_FLAGS[name]} instead of passing it in vllm_serve_extra_args"
            )
        elif name in OWN_FLAGS:
            problems.append(f"{name} is set by the stage: use {OWN_FLAGS[name]}")
    if problems:
        raise LaunchScriptError("; ".join(problems))


def serve_argv(
    *,
    model,
    served_model_name,
    tensor_parallel_size,
    pipeline_parallel_size,
    host,
    port,
    plan_args,
    max_model_len=None,
    cuda_graphs=True,
    kv_cache_dtype=None,
    max_num_seqs=None,
    extra_args=None,
):
    """The argv after `vllm` in the launch script, in a stable order (so diffs are small)."""
    check_extra_args(extra_args)
    plan_args = list(plan_args or [])
    if "--gpu-memory-utilization" not in plan_args and "--kv-cache-memory-bytes" not in plan_args:
        raise LaunchScriptError(
            "the memory plan gave no --gpu-memory-utilization: run the preflight stage (its plan) before the "
            "launch script"
        )
    argv = [
        "serve",
        str(model),
        "--served-model-name",
        str(served_model_name),
        "--host",
        str(host),
        "--port",
        str(int(port)),
        "--distributed-executor-backend",
        "ray",
        "--tensor-parallel-size",
        str(int(tensor_parallel_size)),
        "--pipeline-parallel-size",
        str(int(pipeline_parallel_size)),
    ]
    if max_model_len and "--max-model-len" not in plan_args:
        argv += ["--max-model-len", str(int(max_model_len))]
    argv += [str(arg) for arg in plan_args]
    if not cuda_graphs and "--enforce-eager" not in plan_args:
        argv.append("--enforce-eager")
    if kv_cache_dtype:
        argv += ["--kv-cache-dtype", str(kv_cache_dtype)]
    if max_num_seqs:
        argv += ["--max-num-seqs", str(int(max_num_seqs))]
    argv += [str(arg) for arg in extra_args or []]
    bad = [arg for arg in argv if "\x00" in arg]
    if bad:
        raise LaunchScriptError(
            f"{bad[0]!r} holds a NUL character, which no command line can carry: remove it from the setting"
        )
    return argv


def render_command(argv):
    """Shell text for `exec vllm <argv>`, one flag per line, every value literal.

    Each argument is shlex.quote'd: single quotes, in which bash expands nothing
    (no $, backquote, glob or word splitting); a single quote inside a value is
    written as '"'"'. There is no path that leaves an argument expandable.
    """
    parts = [shlex.quote(str(arg)) for arg in argv]
    lines = ["exec vllm " + " ".join(parts[:2])]
    index = 2
    while index < len(parts):
        flag = parts[index]
        if index + 1 < len(parts) and not parts[index + 1].startswith("-") and flag.startswith("-"):
            lines.append(f"{flag} {parts[index + 1]}")
            index += 2
        else:
            lines.append(flag)
            index += 1
    return " \\\n  ".join(lines)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def comment_text(value):
    """``value`` as text that stays inside one ``#`` comment line: control characters are escaped."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", str(value))


def template_vars(*, cluster, unit, notes, argv):
    """The variables of templates/vllm-launch.sh.j2: the header's values stay comments, the command is quoted."""
    return {
        "launch_script_cluster": comment_text(cluster),
        "launch_script_unit": comment_text(unit),
        "launch_script_notes": [comment_text(note) for note in notes],
        "launch_script_command": render_command(argv),
    }
