# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Where the collection is: the playbooks, ansible.cfg and module_utils the CLI uses.

The CLI runs the collection in place, as ``ansible-playbook deploy.yml`` does from
the repository root. The root is, in this order: ``$SPARKOPS_PROJECT_DIR``; the
nearest directory above the current one that holds the collection; the checkout
the package was installed from (``pip install -e .``).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import yaml

# The CLI's commands and the playbook each runs, relative to the root.
PLAYBOOKS = {
    "deploy": "deploy.yml",
    "preflight": "playbooks/preflight_only.yml",
    "status": "playbooks/status.yml",
    "diagnose": "playbooks/diagnose.yml",
    "reclaim": "playbooks/reclaim.yml",
    "restart": "playbooks/restart.yml",
    "teardown": "playbooks/teardown.yml",
    "fabric": "playbooks/fabric_check.yml",
    "watchdog": "playbooks/watchdog_control.yml",
    "bench": "playbooks/bench.yml",
    "probe": "playbooks/probe.yml",
    "upgrade": "playbooks/upgrade.yml",
    "rollback": "playbooks/rollback.yml",
}


class ProjectNotFound(RuntimeError):
    """No sparkops.vllm checkout to run."""


def is_project(path: Path) -> bool:
    galaxy = path / "galaxy.yml"
    if not (galaxy.is_file() and (path / "ansible.cfg").is_file() and (path / "deploy.yml").is_file()):
        return False
    try:
        meta = yaml.safe_load(galaxy.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return False
    return meta.get("namespace") == "sparkops" and meta.get("name") == "vllm"


def find_project(cwd: Path | None = None, env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    given = env.get("SPARKOPS_PROJECT_DIR")
    if given:
        path = Path(given).resolve()
        if not is_project(path):
            raise ProjectNotFound(
                f"SPARKOPS_PROJECT_DIR={given} is not a sparkops.vllm checkout (no galaxy.yml for "
                "sparkops.vllm with ansible.cfg and deploy.yml); unset it or point it at the clone"
            )
        return path
    start = (cwd or Path.cwd()).resolve()
    for path in (start, *start.parents):
        if is_project(path):
            return path
    installed = Path(__file__).resolve().parents[2]
    if is_project(installed):
        return installed
    raise ProjectNotFound(
        f"no sparkops.vllm checkout above {start} and the package was not installed from one; "
        "run sparkops from the clone or set SPARKOPS_PROJECT_DIR to it"
    )


def diagnose_module(project: Path) -> ModuleType:
    """The collection's log parser (the package plugins/module_utils/_diagnose/), imported as Ansible does.

    ``.collections/ansible_collections/sparkops/vllm`` links to the root, the
    same path ansible.cfg, the unit tests and bench/diagnose use.
    """
    return _module_utils(project, "_diagnose")


def upgrade_module(project: Path) -> ModuleType:
    """The collection's upgrade rules (plugins/module_utils/_upgrade.py), imported as Ansible does.

    ``sparkops upgrade`` checks its image reference, vLLM version and model
    revision with the collection's own rules before anything runs.
    """
    return _module_utils(project, "_upgrade")


def _module_utils(project: Path, name: str) -> ModuleType:
    collections = str(project / ".collections")
    if collections not in sys.path:
        sys.path.insert(0, collections)
    return importlib.import_module(f"ansible_collections.sparkops.vllm.plugins.module_utils.{name}")
