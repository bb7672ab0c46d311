# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The page-cache drop: one command for the units and the workers, its lines read back for the summary."""

import subprocess

import pytest
from ansible_collections.sparkops.vllm.plugins.filter.memory_plan import FilterModule
from ansible_collections.sparkops.vllm.plugins.module_utils import _memory_guard as guard

FILTERS = FilterModule().filters()


def run_script(tmp_path, writable):
    """Run the real script with the drop file pointed at a temporary file (writable or not)."""
    target = tmp_path / "drop_caches"
    target.write_text("0\n")
    if not writable:
        target.chmod(0o444)
    script = guard.drop_caches_script("serve").replace(guard.DROP_CACHES_FILE, str(target))
    if not writable and subprocess.run(["test", "-w", str(target)], check=False).returncode == 0:
        pytest.skip(
            "root writes a 0444 file; the not-writable branch is covered by the lab's read-only /proc/sys"
        )
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=False)
    return done, target


def test_the_script_drops_and_says_so(tmp_path):
    done, target = run_script(tmp_path, writable=True)
    assert done.returncode == 0
    assert target.read_text() == "1\n"
    assert guard.page_cache_outcome(done.stdout) == {"dropped": True, "what": "serve"}


def test_the_script_says_when_it_cannot(tmp_path):
    # A directory cannot be written as a file, whoever runs the script (root included).
    script = guard.drop_caches_script("serve").replace(guard.DROP_CACHES_FILE, str(tmp_path))
    done = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0  # the start goes on
    assert guard.page_cache_outcome(done.stdout) == {"dropped": False, "what": "serve"}


def test_exec_form_is_safe_for_systemd():
    line = guard.drop_caches_command("Ray unit")
    assert line.startswith("/bin/sh -c '") and line.endswith("'")
    # systemd expands $VAR and %-specifiers in Exec lines; the command has neither, and no
    # inner single quote that would end the -c argument early.
    assert "$" not in line and "%" not in line
    assert line[len("/bin/sh -c '") : -1].count("'") == 0
    assert guard.drop_caches_command("serve", "argv") == ["/bin/sh", "-c", guard.drop_caches_script("serve")]


@pytest.mark.parametrize("what", ["", "serve; rm -rf /", "a'b", "x$HOME", "50%", None])
def test_what_is_refused_when_it_could_break_the_command(what):
    with pytest.raises(ValueError, match="letters, digits"):
        guard.drop_caches_command(what)


def test_an_unknown_form_is_refused():
    with pytest.raises(ValueError, match="exec or argv"):
        guard.drop_caches_command("serve", "shell")


# Real journal text around the line: systemd's own lines and the shell's error on a
# read-only /proc/sys (as a lab node prints it), the last drop line wins.
JOURNAL = """Started sparkops-lab-vllm.service - vLLM serve.
/bin/sh: 1: cannot create /proc/sys/vm/drop_caches: Read-only file system
sparkops: page cache NOT dropped before the serve start: /proc/sys/vm/drop_caches is not writable
INFO 12-02 10:00:00 [api_server.py:1] vLLM API server version 0.17.1
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (JOURNAL, {"dropped": False, "what": "serve"}),
        ("sparkops: page cache dropped before the Ray unit start\n", {"dropped": True, "what": "Ray unit"}),
        (
            "sparkops: page cache NOT dropped before the serve start: x\nsparkops: page cache dropped before the serve start\n",
            {"dropped": True, "what": "serve"},
        ),
        ("", None),
        (None, None),
        ("echo sparkops: page cache dropped before the serve start", None),  # not at a line start
    ],
)
def test_page_cache_outcome(text, expected):
    assert guard.page_cache_outcome(text) == expected


def test_the_summary_line_names_each_node():
    line = FILTERS["memory_plan_page_cache"](
        {
            "spark-1": JOURNAL,
            "spark-2": {"changed": True, "stdout": "sparkops: page cache dropped before the serve start"},
            "spark-3": {"changed": False, "skipped": True},
        }
    )
    assert line.startswith("page cache: ")
    assert "dropped before serve claimed memory on spark-2" in line
    assert "NOT dropped on spark-1 (/proc/sys/vm/drop_caches is not writable" in line
    assert "no drop logged on spark-3" in line


def test_no_start_no_drop():
    line = FILTERS["memory_plan_page_cache"]({"spark-1": "", "spark-2": {"skipped": True}})
    assert line == "page cache: no drop in this run (serve did not start)"


def test_the_risk_says_what_drops_it_and_when_nothing_does():
    on = guard.page_cache_risks("0.17.1", 100.0, 50.0, drop_caches=True)
    off = guard.page_cache_risks("0.17.1", 100.0, 50.0, drop_caches=False)
    assert "the serve stage on every worker before serve starts" in on[0]
    assert "preflight_plan_drop_caches is off, so nothing drops it" in off[0]
    assert "drops the page cache" not in off[0]
    old_off = guard.page_cache_risks("0.11.0", 100.0, 50.0, drop_caches=False)
    assert "MemFree" in old_off[0] and "nothing drops it" in old_off[0]


def test_outcome_filter_reads_one_text():
    outcome = FILTERS["memory_plan_page_cache_outcome"]
    assert outcome("sparkops: page cache dropped before the serve start\n") == {
        "dropped": True,
        "what": "serve",
    }
    assert outcome(None) is None
