# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Environment-file filters: one value per line, secrets never echoed (module_utils/_env_file.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.sparkops.vllm.plugins.module_utils import _env_file


def env_file_problems(values, settings=None):
    """The reasons ``values`` cannot be written one per line (names only, never a value)."""
    return _env_file.problems(dict(values or {}), dict(settings or {}))


def env_file(values, settings=None):
    """The text of a ``docker --env-file`` file, one ``NAME=value`` per set value."""
    try:
        return _env_file.render(dict(values or {}), dict(settings or {}))
    except _env_file.EnvFileError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    """sparkops.vllm environment-file filters."""

    def filters(self):
        return {"env_file_problems": env_file_problems, "env_file": env_file}
