# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Shared documentation of the collection's modules."""

from __future__ import annotations


class ModuleDocFragment:
    # The attributes of a read-only *_info module.
    INFO = r"""
attributes:
  check_mode:
    support: full
    description: Only reads; runs the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    description: Never changes anything.
"""
