"""Make the collection importable as ``ansible_collections.sparkops.vllm``, and the CLI as ``sparkops_cli``.

The repository root *is* the collection; ``.collections/ansible_collections/
sparkops/vllm`` is a committed symlink back to it, so the same tree serves
ansible.cfg's ``collections_path`` and the unit tests without an install step.
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLLECTIONS = ROOT / ".collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))
# The sparkops CLI's package (src/sparkops_cli), installed into .venv or not.
# One conftest for the whole tree: tests import FIXTURES from `conftest`, and a
# second conftest.py elsewhere would shadow this module under that name.
SRC = ROOT / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

FIXTURES = ROOT / "tests" / "fixtures"


def iter_tasks(node):
    """Every task mapping in a loaded tasks file or playbook, blocks and plays included."""
    if isinstance(node, list):
        for item in node:
            yield from iter_tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            yield from iter_tasks(node.get(key) or [])


ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def run_local_playbook(playbook, extra, *, inventory=None, timeout=300):
    """Run ``playbook`` with ``extra`` as one JSON -e against the lab inventory (nothing reached:
    the playbooks the unit tests write run on localhost); assert it passed and return the result."""
    result = subprocess.run(
        [
            str(ANSIBLE_PLAYBOOK),
            "-i",
            str(inventory or ROOT / "inventory" / "lab"),
            str(playbook),
            "-e",
            json.dumps(extra),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


# A project of one local host: the ansible.cfg and inventory the CLI tests' throwaway
# checkouts hold (tests/unit/cli), so a playbook the CLI runs reaches no node.
LOCAL_PROJECT_CFG = "[defaults]\ninventory = hosts.yml\ngathering = explicit\n"
LOCAL_PROJECT_HOSTS = """\
all:
  hosts:
    alpha:
      ansible_connection: local
      ansible_python_interpreter: "{{ ansible_playbook_python }}"
"""


def write_local_project(root):
    """ansible.cfg and hosts.yml of a one-local-host project into ``root`` (created)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "ansible.cfg").write_text(LOCAL_PROJECT_CFG)
    (root / "hosts.yml").write_text(LOCAL_PROJECT_HOSTS)
