"""roles/model_sync: meta/argument_specs.yml mirrors defaults/main.yml (names, defaults, types)."""

from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[4] / "roles" / "model_sync"
TYPES = {"str": str, "path": str, "int": int, "bool": bool, "dict": dict, "float": (int, float)}


def _load(name):
    return yaml.safe_load((ROLE / name).read_text())
