# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The project's redaction as a filter (module_utils/_redact.py), for text a task is about to show or pass on."""

from __future__ import annotations

from ansible_collections.sparkops.vllm.plugins.module_utils import _redact


def redact(text, secrets=None):
    """``text`` with the given secret values and every recognised secret form replaced by [REDACTED]."""
    if isinstance(secrets, str):
        secrets = [secrets]
    return _redact.redact(text, [s for s in secrets or [] if s])


class FilterModule:
    """sparkops.vllm redaction filter."""

    def filters(self):
        return {"redact": redact}
