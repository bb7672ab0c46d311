"""The vllm serve command line of the launch script: plan flags from the plan, never from extra args."""

import shlex
import subprocess

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _launch_script as launch

BASE = {
    "model": "/srv/models/Qwen3.5-122B-A10B-FP8",
    "served_model_name": "qwen3.5-122b",
    "tensor_parallel_size": 2,
    "pipeline_parallel_size": 1,
    "host": "0.0.0.0",
    "port": 8000,
    "plan_args": ["--gpu-memory-utilization", "0.85"],
    "max_model_len": 32768,
}


def test_argv_takes_memory_flags_from_the_plan():
    argv = launch.serve_argv(**BASE)
    assert argv[:2] == ["serve", BASE["model"]]
    joined = " ".join(argv)
    assert "--gpu-memory-utilization 0.85" in joined
    assert "--distributed-executor-backend ray" in joined
    assert "--tensor-parallel-size 2 --pipeline-parallel-size 1" in joined
    assert "--max-model-len 32768" in joined
    assert "--enforce-eager" not in argv


def test_cuda_graphs_off_adds_enforce_eager_once():
    assert launch.serve_argv(**BASE, cuda_graphs=False).count("--enforce-eager") == 1
    plan = {**BASE, "plan_args": [*BASE["plan_args"], "--enforce-eager"]}
    assert launch.serve_argv(**plan, cuda_graphs=False).count("--enforce-eager") == 1


def test_the_api_key_is_on_no_command_line():
    # vLLM reads VLLM_API_KEY from its environment (vllm/envs.py); the argv never carries it.
    argv = launch.serve_argv(**BASE)
    assert "--api-key" not in argv
    assert not any("API_KEY" in arg for arg in argv)
    assert "api_key_env" not in launch.serve_argv.__code__.co_varnames


@pytest.mark.parametrize(
    ("arg", "setting"),
    [
        ("--gpu-memory-utilization=0.95", "sparkops_gpu_memory_utilization"),
        ("--max-model-len", "sparkops_max_model_len"),
        ("--enforce-eager", "sparkops_cuda_graphs"),
        ("-tp", "sparkops_tensor_parallel_size"),
        ("--api-key", "sparkops_api_key"),
        ("--port=9000", "vllm_serve_port"),
    ],
)
def test_extra_args_that_bypass_the_plan_are_refused_with_the_setting(arg, setting):
    with pytest.raises(launch.LaunchScriptError, match=setting):
        launch.serve_argv(**BASE, extra_args=[arg])


def test_harmless_extra_args_pass_through_at_the_end():
    argv = launch.serve_argv(**BASE, extra_args=["--enable-prefix-caching", "--seed=7"])
    assert argv[-2:] == ["--enable-prefix-caching", "--seed=7"]


def test_a_plan_without_utilization_is_refused():
    with pytest.raises(launch.LaunchScriptError, match="preflight"):
        launch.serve_argv(**{**BASE, "plan_args": []})


def test_rendered_command_is_valid_shell_with_the_same_argv(tmp_path):
    argv = launch.serve_argv(**BASE, extra_args=["--generation-config", "a b"])
    text = launch.render_command(argv)
    script = tmp_path / "launch.sh"
    # A stand-in `vllm` that prints its arguments one per line.
    (tmp_path / "vllm").write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    (tmp_path / "vllm").chmod(0o755)
    script.write_text("#!/bin/bash\nset -euo pipefail\n" + text + "\n")
    out = subprocess.run(
        ["bash", str(script)],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "VLLM_API_KEY": "s3cret"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out == argv
    assert shlex.quote("a b") in text


def test_a_nul_in_a_value_is_refused():
    with pytest.raises(launch.LaunchScriptError, match="NUL"):
        launch.serve_argv(**{**BASE, "served_model_name": "a\x00b"})


def test_max_model_len_from_the_plan_is_not_repeated():
    plan = {**BASE, "plan_args": ["--gpu-memory-utilization", "0.85", "--max-model-len", "32768"]}
    assert launch.serve_argv(**plan).count("--max-model-len") == 1
