"""Make the collection importable as ``ansible_collections.sparkops.vllm``.

The repository root *is* the collection; ``.collections/ansible_collections/
sparkops/vllm`` is a committed symlink back to it, so the same tree serves
ansible.cfg's ``collections_path`` and the unit tests without an install step.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLLECTIONS = ROOT / ".collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

FIXTURES = ROOT / "tests" / "fixtures"
