"""The bench's API key never reaches a command line, a log or an artifact.

llama-benchy takes the key only as ``--api-key``. roles/bench/files/llama_benchy_run.py reads it
from a 0600 file (or SPARKOPS_BENCH_API_KEY) and hands it to llama-benchy in-process. Here a
stand-in ``llama_benchy`` package records what it was given: the key must be in its in-process
arguments and absent from the process's real command line (/proc/self/cmdline), its environment,
and every file the run wrote.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
WRAPPER = ROOT / "roles" / "bench" / "files" / "llama_benchy_run.py"
KEY = "sk-bench-test-5f1d2c"

FAKE_MAIN = """
import json, os, sys
def main():
    with open(os.environ["FAKE_BENCHY_OUT"], "w") as handle:
        json.dump({"argv": sys.argv, "cmdline": open("/proc/self/cmdline").read().split("\\0"),
                   "environ": dict(os.environ)}, handle)
"""


def run_wrapper(
    tmp_path: Path, *extra: str, env_key: bool = False
) -> tuple[subprocess.CompletedProcess, dict]:
    fake = tmp_path / "fake"
    (fake / "llama_benchy").mkdir(parents=True)
    (fake / "llama_benchy" / "__init__.py").write_text("")
    (fake / "llama_benchy" / "__main__.py").write_text(FAKE_MAIN)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one two three four five six seven")
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY)
    key_file.chmod(0o600)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(fake), "FAKE_BENCHY_OUT": str(tmp_path / "seen.json")}
    args = [sys.executable, str(WRAPPER), "--workdir", str(tmp_path / "work"), "--corpus", str(corpus)]
    args += ["--tokenizer", str(tmp_path / "tokenizer.json")]
    if env_key:
        env["SPARKOPS_BENCH_API_KEY"] = KEY
    else:
        args += ["--api-key-file", str(key_file)]
    args += ["--", "--base-url", "http://127.0.0.1:1/v1", *extra]
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, check=False)
    seen = json.loads((tmp_path / "seen.json").read_text()) if (tmp_path / "seen.json").exists() else {}
    return result, seen


def test_the_key_reaches_llama_benchy_in_process_only(tmp_path):
    result, seen = run_wrapper(tmp_path)
    assert result.returncode == 0, result.stderr
    assert seen["argv"][-2:] == ["--api-key", KEY]
    assert not any(KEY in arg for arg in seen["cmdline"])
    assert KEY not in json.dumps(seen["environ"])
    assert KEY not in result.stdout + result.stderr
    # The corpus is seeded in the private HOME: nothing is downloaded.
    book = seen["argv"][seen["argv"].index("--book-url") + 1]
    assert book.startswith("sparkops-corpus:sha256:")
    assert seen["environ"]["HOME"] == str((tmp_path / "work").resolve())
    for path in (tmp_path / "work").rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace")


def test_the_environment_variable_is_unset_before_llama_benchy_runs(tmp_path):
    result, seen = run_wrapper(tmp_path, env_key=True)
    assert result.returncode == 0, result.stderr
    assert seen["argv"][-2:] == ["--api-key", KEY]
    assert "SPARKOPS_BENCH_API_KEY" not in seen["environ"]


def test_a_key_on_the_command_line_is_refused(tmp_path):
    result, seen = run_wrapper(tmp_path, "--api-key", "sk-on-argv")
    assert result.returncode == 2 and "never on the command line" in result.stderr
    assert seen == {}


def test_the_role_passes_the_key_in_a_0600_file_and_hides_the_task():
    tasks = yaml.safe_load((ROOT / "roles" / "bench" / "tasks" / "run.yml").read_text())
    block = next(task for task in tasks if "block" in task)
    key_file, levels = block["block"]
    assert key_file["ansible.builtin.copy"]["mode"] == "0600" and key_file["no_log"] is True
    assert levels["ansible.builtin.include_tasks"] == "level.yml"
    assert block["always"][0]["ansible.builtin.file"]["state"] == "absent"
    level = yaml.safe_load((ROOT / "roles" / "bench" / "tasks" / "level.yml").read_text())
    bench = next(task for task in level if "ansible.builtin.command" in task)
    argv = bench["ansible.builtin.command"]["argv"]
    assert "'--api-key-file'" in argv and "api_key" not in argv.replace("api-key", "")
    assert "environment" not in bench
