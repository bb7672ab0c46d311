"""The rendered launch script runs nothing from a setting: every value reaches `vllm` literally.

The real template (templates/vllm-launch.sh.j2) is rendered with the action's own variables
(launch.template_vars), then executed by bash with a stub `vllm` that records its argv.
Each payload, if the shell interpreted it, would create the marker file.
"""

import subprocess
from pathlib import Path

import jinja2
import pytest
from ansible.plugins.filter.core import comment
from ansible_collections.sparkops.vllm.plugins.module_utils import _launch_script as launch

TEMPLATE = Path(__file__).resolve().parents[4] / "templates" / "vllm-launch.sh.j2"


def payloads(marker):
    return [
        f"${{a:-$(touch {marker})}}",
        f"$(touch {marker})",
        f"`touch {marker}`",
        f"'; touch {marker}; '",
        f'"; touch {marker}; "',
        f"x\ntouch {marker}",
        f"x\r\ntouch {marker} #",
        f"x \\\ntouch {marker}",
        f"--x=$(touch {marker})",
        f"a'\"'\"'$(touch {marker})",
        f"$((1))$HOME*?[a]{{b,c}}~ ; touch {marker} &",
        "x\\",
    ]


def render(tmp_path, payload, **overrides):
    settings = {
        "model": f"/srv/models/{payload}",
        "served_model_name": payload,
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
        "host": payload,
        "port": 8000,
        "plan_args": ["--gpu-memory-utilization", "0.85"],
        "max_model_len": 4096,
        "kv_cache_dtype": payload,
        "extra_args": [payload, f"--seed={payload}"],
    }
    settings.update(overrides)
    argv = launch.serve_argv(**settings)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["comment"] = comment
    text = env.from_string(TEMPLATE.read_text()).render(
        ansible_managed="Ansible managed",
        **launch.template_vars(
            cluster=payload, unit=payload, notes=[f"environment from the plan: X={payload}"], argv=argv
        ),
    )
    return argv, text


def run_script(tmp_path, text):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    record = tmp_path / "argv"
    stub = bindir / "vllm"
    stub.write_text(f'#!/bin/bash\nprintf "%s\\0" "$@" > {record}\n')
    stub.chmod(0o755)
    script = tmp_path / "launch.sh"
    script.write_text(text)
    subprocess.run(
        ["bash", str(script)],
        cwd=tmp_path,
        env={"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path), "VLLM_API_KEY": "k" * 32},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return record.read_bytes().decode().split("\0")[:-1]


@pytest.mark.parametrize("index", range(len(payloads("M"))))
def test_no_payload_runs_and_every_value_arrives_literally(tmp_path, index):
    marker = tmp_path / "pwned"
    payload = payloads(marker)[index]
    argv, text = render(tmp_path, payload)
    received = run_script(tmp_path, text)
    assert not marker.exists(), f"the shell ran part of {payload!r}"
    assert received == argv
    assert payload in received  # served name, host, kv dtype and the extra argument, byte for byte
    assert f"/srv/models/{payload}" in received


def test_the_api_key_never_reaches_the_script_or_argv(tmp_path):
    _argv, text = render(tmp_path, "plain")
    received = run_script(tmp_path, text)
    assert "--api-key" not in received
    assert "k" * 32 not in "".join(received)
    assert "VLLM_API_KEY}" not in text


def test_the_header_values_stay_comments(tmp_path):
    hostile = launch.template_vars(
        cluster="c\ntouch x", unit="u\r", notes=["n\x00touch x"], argv=["serve", "m"]
    )
    assert hostile["launch_script_cluster"] == "c\\x0atouch x"
    assert hostile["launch_script_unit"] == "u\\x0d"
    assert hostile["launch_script_notes"] == ["n\\x00touch x"]
