# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Every module's DOCUMENTATION, EXAMPLES and RETURN is YAML that ansible-doc can read.

ansible-lint reported two modules whose DOCUMENTATION did not parse (an unquoted ': ' inside a
description line): ansible-doc shows nothing for such a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[4]
MODULES = sorted(p for p in (ROOT / "plugins" / "modules").glob("*.py") if p.name != "__init__.py")


def _docs(path: Path) -> dict[str, str]:
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("DOCUMENTATION", "EXAMPLES", "RETURN") and isinstance(node.value, ast.Constant):
                found[name] = node.value.value
    return found


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_the_module_documents_itself_in_yaml(path):
    docs = _docs(path)
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, path.name
    documentation = yaml.safe_load(docs["DOCUMENTATION"])
    assert documentation["module"] == path.stem
    assert documentation["short_description"]
    yaml.safe_load(docs["EXAMPLES"])
    yaml.safe_load(docs["RETURN"])


def test_the_scan_reads_the_modules():
    assert len(MODULES) >= 10
    assert _docs(MODULES[0])
