# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""``python -m sparkops_cli`` is ``sparkops``."""

import sys

from sparkops_cli.cli import main

sys.exit(main())
