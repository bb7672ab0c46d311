# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""The ``sparkops`` command: the sparkops.vllm runbooks through ansible-runner."""

__version__ = "0.1.0"
