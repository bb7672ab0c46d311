# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""Filter of vllm_serve's readiness: every rank's NCCL transport, read from serve's log."""

from __future__ import annotations

from ansible_collections.sparkops.vllm.plugins.module_utils._nccl_transport import serve_transport


def nccl_transport(text, expected_devices=None, expected_ranks=1, rdma_expected=False, started=True):
    """:func:`_nccl_transport.serve_transport` of ``text`` (the serve unit's journal since it started)."""
    devices = (
        expected_devices.split(",") if isinstance(expected_devices, str) else list(expected_devices or [])
    )
    return serve_transport(
        str(text or ""),
        [d for d in devices if d],
        int(expected_ranks),
        None if rdma_expected is None else bool(rdma_expected),
        bool(started),
    )


class FilterModule:
    """sparkops.vllm NCCL transport filter."""

    def filters(self):
        return {"nccl_transport": nccl_transport}
