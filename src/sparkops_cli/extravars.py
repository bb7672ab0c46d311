# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""``-e`` values as ansible-playbook takes them, and their redaction for display.

Every ``-e`` reaches ansible-playbook as ``-e @FILE`` in the order given, so its
meaning is Ansible's own (later values win, ``@file`` and JSON/YAML as with
ansible-playbook), while no value ever appears on a command line: ``key=value``
pairs become a JSON file, JSON/YAML text is written as given, and ``@file`` is
passed through with its path made absolute (the playbooks run from the
repository root, not from the caller's directory). The files live in a private
0700 directory that is removed after the run.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from ansible.parsing.splitter import parse_kv

REDACTED = "<redacted>"

# Variable names that hold credentials (sparkops_api_key, sparkops_hf_token,
# ansible_become_password, ansible_ssh_pass, aws_secret_access_key, ...).
SECRET_NAME = re.compile(
    r"((^|_)pass($|_)|passw(or)?d|passphrase|secret|token|api[_-]?key|private[_-]?key|credential)", re.I
)
# Values that are credentials whatever their name: Hugging Face and OpenAI-style
# tokens, bearer headers, vault-encrypted text.
SECRET_VALUE = re.compile(r"^(hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_-]{16,}|Bearer\s+\S+|\$ANSIBLE_VAULT;)", re.I)


class ExtraVarsError(ValueError):
    """An ``-e`` value ansible-playbook would refuse, said before anything runs."""


@dataclass(frozen=True)
class ExtraVar:
    """One ``-e`` argument: what is passed to Ansible and what may be shown."""

    given: str
    file: Path | None = None  # an @file, absolute
    text: str | None = None  # JSON/YAML text, or key=value pairs as JSON
    display: str = ""


def is_secret(name: str, value: Any) -> bool:
    """Whether a variable must not be shown: by its name, or by what its value looks like."""
    if SECRET_NAME.search(str(name)):
        return True
    return isinstance(value, str) and bool(SECRET_VALUE.match(value.strip()))


def redact(data: Any, name: str = "") -> Any:
    """A copy of ``data`` with every secret-looking value replaced, at any depth."""
    if isinstance(data, Mapping):
        return {key: redact(value, str(key)) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [redact(value, name) for value in data]
    if data is not None and is_secret(name, data):
        return REDACTED
    return data


def _display_pairs(pairs: Mapping[str, Any]) -> str:
    return " ".join(f"{key}={REDACTED if is_secret(key, value) else value}" for key, value in pairs.items())


def parse_extra_var(value: str, cwd: Path) -> ExtraVar:
    """Classify one ``-e`` value the way ansible-playbook does."""
    if not value:
        raise ExtraVarsError("-e needs a value: key=value, JSON/YAML text, or @FILE")
    if value.startswith("@"):
        path = (cwd / value[1:]).resolve()
        if not path.is_file():
            raise ExtraVarsError(f"-e {value}: no such file {path}")
        return ExtraVar(given=value, file=path, display=f"@{path}")
    if value[0] in "/.":
        raise ExtraVarsError(f"-e {value}: a file of variables is given as @{value}")
    if value[0] in "[{":
        try:
            data = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ExtraVarsError(f"-e {value[:60]}...: not valid JSON or YAML ({exc.problem})") from exc
        if not isinstance(data, dict):
            raise ExtraVarsError(
                f"-e {value[:60]}: extra variables must be a mapping, not {type(data).__name__}"
            )
        return ExtraVar(given=value, text=value, display=json.dumps(redact(data), sort_keys=True))
    pairs = parse_kv(value)
    if not pairs or "_raw_params" in pairs:
        raise ExtraVarsError(f"-e {value}: expected key=value (several separated by spaces), JSON, or @FILE")
    return ExtraVar(given=value, text=json.dumps(pairs), display=_display_pairs(pairs))


def parse_extra_vars(values: Iterable[str], cwd: Path) -> list[ExtraVar]:
    return [parse_extra_var(value, cwd) for value in values]


def write_extra_vars(extra: Iterable[ExtraVar], directory: Path) -> list[str]:
    """Write the values into ``directory`` (0600 files) and return the ``-e @FILE`` arguments."""
    args: list[str] = []
    for number, item in enumerate(extra, 1):
        if item.file is not None:
            args += ["-e", f"@{item.file}"]
            continue
        path = directory / f"extra-vars-{number}.yml"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(item.text or "")
        args += ["-e", f"@{path}"]
    return args


def redact_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with the values of secret-looking variables replaced."""
    return {key: REDACTED if is_secret(key, value) else value for key, value in env.items()}
